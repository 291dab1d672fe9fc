package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// TestReentrantLocksAndFenceChecksRefusedInTheirOwnWords: a reentrant
// Client over a quorum or without scripts, and a fence check on such a
// Client, are refused with the texts they had, each naming what it asked for.
func TestReentrantLocksAndFenceChecksRefusedInTheirOwnWords(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	nodes := []redis.UniversalClient{rdb, rdb, rdb}
	ctx := t.Context()
	_, noScripts := dlock.New(rdb, dlock.WithReentrant(true), dlock.WithoutScripts())
	_, quorum := dlock.NewRedlock(nodes, 50*time.Millisecond, dlock.WithReentrant(true))
	_, fenceNoScripts := newClient(t, rdb, dlock.WithoutScripts()).FenceCurrent(ctx, "n", 1, "t")
	_, fenceQuorum := newRedlock(t, nodes, 50*time.Millisecond).FenceCurrent(ctx, "n", 1, "t")
	for _, tc := range []struct {
		call string
		err  error
		want string
	}{
		{"New(WithReentrant(true), WithoutScripts())", noScripts, "WithReentrant(true): reentrant locks need scripts; a Client made WithoutScripts() cannot keep one"},
		{"NewRedlock(WithReentrant(true))", quorum, "WithReentrant(true): reentrant locks are not available over a quorum (NewRedlock)"},
		{"FenceCurrent without scripts", fenceNoScripts, `FenceCurrent("n"): fence checks need scripts; a Client made WithoutScripts() cannot make one`},
		{"FenceCurrent over a quorum", fenceQuorum, `FenceCurrent("n"): fence checks are not available over a quorum (NewRedlock)`},
	} {
		if want := dlock.ErrInvalid.Error() + ": " + tc.want; !errors.Is(tc.err, dlock.ErrInvalid) || tc.err.Error() != want {
			t.Errorf("%s = %v, want %q", tc.call, tc.err, want)
		}
	}
}
