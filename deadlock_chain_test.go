package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dlockio/dlock"
)

// nestedInPart is c.DoAll of names, and within it c.Do of inner, as a
// holdFn: fn runs under the inner Do's context and holds the outer part
// named held, so a wait in fn reaches that part only through the chain of
// contexts.
func nestedInPart(c *dlock.Client, names []string, held, inner string) holdFn {
	return func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
		return c.DoAll(ctx, names, func(ctx context.Context, m *dlock.MultiLock) error {
			return c.Do(ctx, inner, func(ctx context.Context, _ *dlock.Lock) error {
				for _, l := range m.Locks() {
					if l.Name() == held {
						return fn(ctx, l)
					}
				}
				panic("no part " + held)
			})
		})
	}
}

// A wait in a Do nested in a DoAll holds the Do's lease and every part of
// the outer multi-lock: a cycle through the outer part that is not the
// first is found and reported once.
func TestDeadlockThroughAnOuterMultiLockPartFromANestedDoIsReportedOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c1 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	c2 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	testReportedOnce(t, rdb, nestedInPart(c1, []string{"ledger", "order"}, "order", "audit"), doOf(c1, "inventory"),
		doOf(c2, "inventory"), doOf(c2, "order"))
}

// A reentrant owner's multi-lock parts are keyed by the owner's hold of
// each name, as its single locks are: a cycle through a part is reported
// once, naming the owners.
func TestDeadlockOfReentrantOwnerThroughAMultiLockPartIsReportedOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.DeadlockCheck(fastCheck))
	o1, o2 := asOwner(t, c, "job-1"), asOwner(t, c, "job-2")
	ids := map[*dlock.Lock]string{}
	var mu sync.Mutex
	record := func(ctx context.Context, o *dlock.Client, l *dlock.Lock) error {
		info, err := o.Inspect(ctx, l.Name())
		if err != nil || len(info.Owners) != 1 {
			return fmt.Errorf("inspect: %v %v", info, err)
		}
		mu.Lock()
		ids[l] = info.Owners[0].ID
		mu.Unlock()
		return nil
	}
	first1 := func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
		return o1.DoAll(ctx, []string{"ledger", "order"}, func(ctx context.Context, m *dlock.MultiLock) error {
			l := m.Locks()[1]
			if l.Name() != "order" {
				l = m.Locks()[0]
			}
			if err := record(ctx, o1, l); err != nil {
				return err
			}
			return fn(ctx, l)
		})
	}
	first2 := func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
		return o2.Do(ctx, "inventory", func(ctx context.Context, l *dlock.Lock) error {
			if err := record(ctx, o2, l); err != nil {
				return err
			}
			return fn(ctx, l)
		})
	}
	testReportedOnce(t, rdb, first1, doOf(o1, "inventory"), first2, doOf(o2, "order"),
		func(l *dlock.Lock) string { mu.Lock(); defer mu.Unlock(); return ids[l] })
}
