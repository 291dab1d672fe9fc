package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Lock.Context ends with the Lock: at Release, with ErrReleased as its
// cause; at a loss, with the loss; never while the lease is extended; and
// beside a Do's context, each told.
func TestLockContext(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	for _, unfair := range []bool{false, true} {
		c := newClient(t, rdb, waiting(!unfair))

		l, err := c.TryAcquire(ctx, "ctx-release")
		if err != nil {
			t.Fatal(err)
		}
		lctx := l.Context()
		if l.Context() != lctx {
			t.Error("a second Context call returned another context")
		}
		select {
		case <-lctx.Done():
			t.Fatal("the context is done while the lock is held")
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(lctx.Done(), time.Second) {
			t.Fatal("the context is not done after Release")
		}
		if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrReleased) {
			t.Errorf("cause after Release = %v, want ErrReleased", cause)
		}
		if l.Context().Err() == nil {
			t.Error("Context after Release is not done")
		}

		// Lost: no watchdog, a short lease that runs out.
		short := newClient(t, rdb, waiting(!unfair), dlock.WithAutoExtend(false), dlock.LeaseTTL(150*time.Millisecond))
		l, err = short.TryAcquire(ctx, "ctx-lost")
		if err != nil {
			t.Fatal(err)
		}
		lctx = l.Context()
		if !closedWithin(lctx.Done(), 2*time.Second) {
			t.Fatal("the context is not done once the lease ran out")
		}
		if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrNotHeld) {
			t.Errorf("cause after the lease ran out = %v, want ErrNotHeld", cause)
		}
		l.Release(ctx)

		// Extended by the watchdog: held past several TTLs.
		dog := newClient(t, rdb, waiting(!unfair), dlock.LeaseTTL(150*time.Millisecond))
		l, err = dog.TryAcquire(ctx, "ctx-held")
		if err != nil {
			t.Fatal(err)
		}
		lctx = l.Context()
		if closedWithin(lctx.Done(), 600*time.Millisecond) {
			t.Fatalf("the context ended while the watchdog kept the lease: %v", context.Cause(lctx))
		}
		l.Release(ctx)

		// Beside Do: both contexts end at a loss.
		err = c.Do(ctx, "ctx-do", func(fctx context.Context, l *dlock.Lock) error {
			lctx := l.Context()
			rdb.Del(ctx, "dlock:{ctx-do}") // the lock taken away under it
			if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Extend after the key was deleted = %v, want ErrNotHeld", err)
			}
			if !closedWithin(lctx.Done(), time.Second) || !closedWithin(fctx.Done(), time.Second) {
				t.Error("a loss did not end both Lock.Context and Do's context")
			}
			return nil
		})
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Do = %v, want the loss", err)
		}
	}
}
