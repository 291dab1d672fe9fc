package dlock_test

import (
	"slices"
	"testing"

	"github.com/dlockio/dlock"
)

// List finds the locks of a Client whose prefix holds characters that a
// SCAN pattern reads as a glob ('[', ']', '*', '?', '\'): the prefix is
// matched as written, not as a pattern, so that its own locks are listed
// and a lock under a prefix the glob would also match is not.
func TestListMatchesAPrefixWithGlobCharactersAsWritten(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	for _, prefix := range []string{`t[1]:`, `t*:`, `t?:`, `t\x:`} {
		c := newClient(t, rdb, dlock.WithPrefix(prefix), dlock.WithAutoExtend(false))
		l, err := c.TryAcquire(ctx, "listed")
		if err != nil {
			t.Fatal(err)
		}
		other := newClient(t, rdb, dlock.WithPrefix("t1:"), dlock.WithAutoExtend(false)) // (what t[1]:, t*: and t?: match)
		o, err := other.TryAcquire(ctx, "not-"+prefix)
		if err != nil {
			t.Fatal(err)
		}
		infos, err := c.List(ctx, "")
		var names []string
		for _, info := range infos {
			names = append(names, info.Name)
		}
		if err != nil || !slices.Equal(names, []string{"listed"}) {
			t.Errorf("List of prefix %q = %q, %v; want [listed]", prefix, names, err)
		}
		l.Release(ctx)
		o.Release(ctx)
	}
}
