package dlock_test

import (
	"context"
	"testing"

	"github.com/dlockio/dlock"
)

// doAllOf is c.DoAll of names as a holdFn: fn holds the part named held.
func doAllOf(c *dlock.Client, names []string, held string) holdFn {
	return func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
		return c.DoAll(ctx, names, func(ctx context.Context, m *dlock.MultiLock) error {
			for _, l := range m.Locks() {
				if l.Name() == held {
					return fn(ctx, l)
				}
			}
			panic("no part " + held)
		})
	}
}

// A DoAll's context holds every part of its multi-lock: a wait under it
// writes a record for each part, so a cycle through a part that is not
// the first is found and reported once.
func TestDeadlockThroughAPartOfAMultiLockIsReportedOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c1 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	c2 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	testReportedOnce(t, rdb, doAllOf(c1, []string{"ledger", "order"}, "order"), doOf(c1, "inventory"),
		doOf(c2, "inventory"), doOf(c2, "order"))
}
