package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Owner views: nested Do of another owner waits, bounded by ctx; views of
// the same owner re-enter; Owner of an Owner is the new owner.
func TestQuorumAttackOwnerViews(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(2*time.Second))
	a, _ := c.Owner("a")
	b, _ := c.Owner("b")
	ab, _ := a.Owner("b")
	err := a.Do(ctx, "own", func(ctx context.Context, l *dlock.Lock) error {
		// same owner again, from another goroutine: re-enters
		errc := make(chan error, 1)
		go func() {
			a2, _ := c.Owner("a")
			l2, err := a2.TryAcquire(ctx, "own")
			if err == nil {
				err = l2.Release(ctx)
			}
			errc <- err
		}()
		if err := <-errc; err != nil {
			t.Errorf("same owner re-entry from another view = %v", err)
		}
		// owner b (through a's Owner) must not re-enter
		if l3, err := ab.TryAcquire(ctx, "own"); err == nil {
			l3.Release(ctx)
			t.Errorf("a.Owner(\"b\") re-entered a's hold")
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := b.Do(dctx, "own", func(context.Context, *dlock.Lock) error {
			t.Errorf("b's nested Do ran inside a's hold")
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("b's nested Do = %v after %v, want the deadline promptly", err, time.Since(start))
		}
		// release order: inner released after outer ends is checked by Do
		inner, err := a.TryAcquire(ctx, "own")
		if err != nil {
			t.Fatalf("inner = %v", err)
		}
		defer func() {
			if err := inner.Release(ctx); err != nil {
				t.Errorf("inner release after the outer Do's lock... = %v", err)
			}
		}()
		return nil
	})
	if err != nil {
		t.Errorf("Do = %v", err)
	}
	// outer released by Do, the inner hold released after it (defer inside fn
	// runs before Do's release). Now check the lock is free.
	if l, err := b.TryAcquire(ctx, "own"); err != nil {
		t.Errorf("after both holds ended, b TryAcquire = %v", err)
	} else {
		l.Release(ctx)
	}
	// inner outliving the outer
	o1, err := a.TryAcquire(ctx, "own2")
	if err != nil {
		t.Fatal(err)
	}
	o2, err := a.TryAcquire(ctx, "own2")
	if err != nil {
		t.Fatal(err)
	}
	if err := o1.Release(ctx); err != nil {
		t.Errorf("outer release = %v", err)
	}
	if _, err := b.TryAcquire(ctx, "own2"); err == nil {
		t.Errorf("b got own2 while a's inner hold is live")
	}
	if err := o2.Release(ctx); err != nil {
		t.Errorf("inner release = %v", err)
	}
	if l, err := b.TryAcquire(ctx, "own2"); err != nil {
		t.Errorf("after inner release b TryAcquire = %v", err)
	} else {
		l.Release(ctx)
	}
}
