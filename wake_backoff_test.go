package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// An unfair waiter whose backoff (3 s) is longer than its own lease's
// window (300 ms) finds the wake key it set still there when the release
// comes, and is woken by it rather than by its backoff.
func TestWakeKeyOutlivesAnUnfairWaitersBackoff(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	name := "wake-backoff"
	key := "dlock:{" + name + "}:w"
	holder := newClient(t, rdb, dlock.WithUnfair(nil), dlock.LeaseTTL(20*time.Second))
	h, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w := newClient(t, rdb, dlock.WithUnfair(dlock.ExponentialBackoff(3*time.Second, 3*time.Second)),
		dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false))
	got := make(chan time.Time, 1)
	go func() {
		l, err := w.Acquire(ctx, name, dlock.MaxWait(15*time.Second))
		if err != nil {
			t.Errorf("waiter: %v", err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		l.Release(ctx)
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.Exists(ctx, key).Val() == 1 }) {
		t.Fatal("the waiter never set the wake key")
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl < 10*time.Second {
		t.Errorf("the wake key lives %v, less than the waiter's 3 s backoff could need", pttl)
	}
	rel := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if at := <-got; !at.IsZero() && at.Sub(rel) > 2*time.Second {
		t.Errorf("the waiter took the lock %v after the release: it slept through it", at.Sub(rel))
	}
}
