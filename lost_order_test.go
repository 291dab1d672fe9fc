package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A loss found by an Extend (the lease gone from Redis) is told by that
// Extend, before its end event, even while other goroutines read the
// Lock's state as it is found: the Lost hook has returned by the time the
// extension's end is told, every round.
func TestAnExtendThatFindsTheLossTellsItBeforeItsEndWhileOthersReadErr(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var (
		lostDone atomic.Bool
		early    atomic.Int32
		told     atomic.Int32
	)
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second),
		dlock.WithObserver(dlock.Observer{
			Lost: func(context.Context, *dlock.Event) {
				told.Add(1)
				time.Sleep(20 * time.Millisecond) // a hook that takes a while
				lostDone.Store(true)
			},
			End: func(_ context.Context, e *dlock.Event) {
				if e.Op == dlock.OpExtend && e.Err != nil && !lostDone.Load() {
					early.Add(1)
				}
			},
		}))
	const rounds = 20
	for i := range rounds {
		lostDone.Store(false)
		told.Store(0)
		l, err := c.TryAcquire(ctx, "lost-order")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 { // readers of the state, as the loss is found
			wg.Go(func() {
				for l.Err() == nil {
				}
				for range 100 {
					l.Err()
				}
			})
		}
		if err := rdb.Del(ctx, l.Key()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("round %d: Extend once the lease was gone = %v, want the loss", i, err)
		}
		wg.Wait()
		if n := told.Load(); n != 1 {
			t.Fatalf("round %d: the loss was told %d times, want once", i, n)
		}
	}
	if n := early.Load(); n > 0 {
		t.Errorf("in %d of %d rounds the Extend that found the loss ended before the Lost hook had returned", n, rounds)
	}
}
