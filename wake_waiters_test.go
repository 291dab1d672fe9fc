package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A waiter with a short lease does not shorten the wake key that a waiter
// with a long one set: were the key to expire, the unfair holder's release
// would announce nothing, and a fair waiter queued behind it (a name used
// in both modes) would sleep to its timer (a third of its window, 20 s).
func TestWakeKeyIsNotShortenedByAWaiterWithAShortLease(t *testing.T) {
	t.Parallel()
	for _, withShort := range []bool{true, false} {
		t.Run(map[bool]string{true: "short-waiter", false: "control"}[withShort], func(t *testing.T) { wakeBehindShortWaiter(t, withShort) })
	}
}

func wakeBehindShortWaiter(t *testing.T, withShort bool) {
	_, rdb := setup(t)
	ctx := t.Context()
	name := "wake-short"
	holder := newClient(t, rdb, dlock.WithUnfair(nil), dlock.LeaseTTL(10*time.Minute))
	h, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	fairW := newClient(t, rdb, dlock.LeaseTTL(10*time.Minute))
	got := make(chan time.Time, 1)
	go func() {
		l, err := fairW.Acquire(ctx, name, dlock.MaxWait(15*time.Second))
		if err != nil {
			t.Errorf("fair waiter: %v", err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		l.Release(ctx)
	}()
	if !waitFor(3*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == 1 }) {
		t.Fatal("never queued")
	}
	short := newClient(t, rdb, dlock.WithUnfair(nil), dlock.LeaseTTL(200*time.Millisecond))
	if withShort {
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		short.Acquire(sctx, name, dlock.MaxWait(50*time.Millisecond))
		cancel()
	}
	if pttl := rdb.PTTL(ctx, "dlock:{"+name+"}:w").Val(); pttl < 10*time.Second {
		t.Errorf("the wake key lives %v after the short waiter's attempt, want the long waiter's (up to a minute)", pttl)
	}
	rel := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if at.IsZero() {
		return
	}
	if d := at.Sub(rel); d > 2*time.Second {
		t.Errorf("the fair waiter took the lock %v after the release (missed wake-up)", d)
	}
}
