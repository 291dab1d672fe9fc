package dlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A panic in Waiting and in Lost (run by the watchdog) is counted once per
// call, the waiter still gets the lock, the lost lease still ends its
// Lock, and Stats.Waiting returns to zero.
func TestObserverPanicsInWaitingAndLostAreCountedAndBreakNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var waits, losts atomic.Int64
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second), dlock.WithObserver(dlock.Observer{
		Lost:    func(context.Context, *dlock.Event) { losts.Add(1); panic("lost") },
		Waiting: func(context.Context, string, int) { waits.Add(1); panic("waiting") },
	}))
	ctx := t.Context()
	a, err := c.TryAcquire(ctx, "wp")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "wp")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	if !waitFor(5*time.Second, func() bool { return c.Stats().Waiting == 1 }) {
		t.Fatal("the waiter never waited")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var b *dlock.Lock
	select {
	case b = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
	if b == nil {
		t.FailNow()
	}
	if w := c.Stats().Waiting; w != 0 {
		t.Errorf("Stats.Waiting = %d after the waiter got the lock", w)
	}
	// Lose b: its key is deleted under it.
	if err := rdb.Del(ctx, "dlock:{wp}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lost lease's Lock never ended")
	}
	if !waitFor(3*time.Second, func() bool { return losts.Load() >= 1 }) {
		t.Fatal("Lost never called")
	}
	// Each count follows its observer's panic: wait for the last one.
	want := uint64(waits.Load() + losts.Load())
	waitFor(3*time.Second, func() bool { return c.Stats().ObserverPanics == want })
	if p := c.Stats().ObserverPanics; p != want {
		t.Errorf("ObserverPanics = %d, want %d (Waiting %d, Lost %d)", p, want, waits.Load(), losts.Load())
	}
	if losts.Load() != 1 {
		t.Errorf("Lost called %d times, want 1", losts.Load())
	}
	if c.Stats().Lost != 1 {
		t.Errorf("Stats.Lost = %d", c.Stats().Lost)
	}
}
