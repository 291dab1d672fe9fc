package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A permit or read handed over to a waiter from the queue extends like any
// other: its queue marker ("q") is not the number of an applied extension,
// which would make a lengthening extension count as a late copy.
func TestHoldGrantedFromTheQueueExtends(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(2*time.Second))
	s, err := c.Semaphore("queued-ext", 1)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("queued-ext-rw")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		first, next interface {
			Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
		}
	}{
		{"permit", s, s},
		{"read after a write", rw.Writer(), rw.Reader()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, err := tc.first.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, err := tc.next.Acquire(ctx, dlock.MaxWait(5*time.Second))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(100 * time.Millisecond) // queued behind first
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l == nil {
				return
			}
			defer l.Release(ctx)
			if err := l.Extend(ctx, 5*time.Second); err != nil {
				t.Fatalf("Extend of a hold granted from the queue = %v, want nil", err)
			}
			if left := time.Until(l.ValidUntil()); left < 4*time.Second {
				t.Errorf("validity after Extend(5s) is %v", left)
			}
		})
	}
}
