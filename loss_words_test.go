package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Each way a lease is lost reads in its own words, after "dlock: not held"
// and the name, and matches ErrNotHeld; a lease that reached its max hold
// matches ErrMaxHold too, and no other loss does.
func TestLossesReadInTheirOwnWords(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	check := func(what string, err error, want string, maxHold bool) {
		t.Helper()
		if err == nil || err.Error() != want || !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrMaxHold) != maxHold {
			t.Errorf("%s: %v; want %q, ErrNotHeld, ErrMaxHold %v", what, err, want, maxHold)
		}
	}
	l := newLock(t, c, "loss-ran-out", dlock.LeaseTTL(100*time.Millisecond))
	if !closedWithin(l.Done(), 30*time.Second) {
		t.Fatal("Done() still open 30s after the lease's validity")
	}
	check("ran out", l.Err(), `dlock: not held: "loss-ran-out": the lease's validity ran out before it was extended`, false)
	l.Release(ctx)

	l = newLock(t, newClient(t, rdb), "loss-max", dlock.LeaseTTL(time.Second), dlock.MaxHold(100*time.Millisecond))
	if !closedWithin(l.Done(), 30*time.Second) {
		t.Fatal("Done() still open 30s after the max hold")
	}
	check("max hold", l.Err(), `dlock: not held: "loss-max": held for its max hold of 100ms`, true)
	l.Release(ctx)

	l = newLock(t, c, "loss-extend")
	rdb.Del(ctx, lockKeys("loss-extend")[0])
	check("extend", l.Extend(ctx, time.Second), `dlock: not held: "loss-extend": the lock key no longer holds our token`, false)

	l = newLock(t, c, "loss-release")
	rdb.Del(ctx, lockKeys("loss-release")[0])
	check("release", l.Release(ctx), `dlock: not held: "loss-release": the lease had expired or was taken over before Release`, false)
}

// newLock returns c's Lock of name (tryAcquireInTime), failing the test if
// it is not taken.
func newLock(t *testing.T, c *dlock.Client, name string, opts ...dlock.LockOption) *dlock.Lock {
	t.Helper()
	l, err := tryAcquireInTime(t.Context(), c, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
