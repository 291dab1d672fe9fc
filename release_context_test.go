package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Release with the Lock's own Context (the work and the release under the
// lock's context): Release settles the Lock before it sends, which ends that
// very context; the release must still go out, and the name be free at once.
func TestReleaseWithTheLocksOwnContextIsSent(t *testing.T) {
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(20*time.Second))
			ctx := m.ctx(t.Context())
			name := "ownctx-" + m.name
			l, err := c.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			lctx := l.Context()
			rerr := l.Release(lctx)
			other := m.new(t)
			if m.name == "reentrant" {
				other = asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "owner-b")
			}
			tctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			o, err := other.TryAcquire(tctx, name)
			if err != nil {
				t.Errorf("l.Release(l.Context()) = %v; then another's TryAcquire = %v (the name is still held)", rerr, err)
				return
			}
			o.Release(t.Context())
			if rerr != nil {
				t.Errorf("l.Release(l.Context()) = %v though the lock was freed", rerr)
			}
		})
	}
}

// The same inside Do: fn releases early with its own ctx.
func TestReleaseInsideDoWithFnsContextIsSent(t *testing.T) {
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(20*time.Second))
	var rerr, oerr error
	err := c.Do(t.Context(), "ownctx-do", func(ctx context.Context, l *dlock.Lock) error {
		rerr = l.Release(ctx)
		o, err := newClient(t, rdb).TryAcquire(t.Context(), "ownctx-do")
		oerr = err
		if o != nil {
			o.Release(t.Context())
		}
		return nil
	})
	if err != nil || rerr != nil {
		t.Errorf("Do = %v, l.Release(fn's ctx) = %v; want nil, nil", err, rerr)
	}
	if oerr != nil {
		t.Errorf("l.Release(fn's ctx) inside Do = %v; then another's TryAcquire = %v (still held)", rerr, oerr)
	}
}
