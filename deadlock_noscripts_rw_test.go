package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A script-free Client's deadlock check walks through a read-write lock's
// holds too: it holds a name and waits for a second, whose holder waits
// for the write of a read-write lock, whose reader waits for the first
// name. The script-free waiter, waiting last, reports the cycle; the
// others complete.
func TestDeadlockWithoutScriptsWalksThroughReadHolds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ns := newClient(t, rdb, dlock.WithoutScripts(), dlock.DeadlockCheck(fastCheck))
	c := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	rw := newRW(t, c, "nsrw-rw")
	// waitLast waits for the name once both others' waits wrote their
	// records (their first check, a period after they began).
	waitLast := func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
		if !waitFor(20*time.Second, func() bool { return len(rdb.Keys(ctx, dlock.DefaultPrefix+"waits:*").Val()) == 2 }) {
			return errors.New("the other waits wrote no records")
		}
		return ns.Do(ctx, "nsrw-b", fn)
	}
	errs, held := crossing(t,
		part{first: doOf(ns, "nsrw-a"), then: waitLast},
		part{first: doOf(c, "nsrw-b"), then: do(rw.Writer().Do)},
		part{first: do(rw.Reader().Do), then: doOf(c, "nsrw-a")})
	ds := deadlocks(t, errs)
	if len(ds) != 1 || !errors.Is(errs[0], dlock.ErrDeadlock) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v; want a deadlock for the script-free waiter and two nils", errs)
	}
	cycleHas(t, ds[0], []string{"nsrw-a", "nsrw-b", "nsrw-rw"}, []string{held[0].Token(), held[1].Token(), held[2].Token()})
}
