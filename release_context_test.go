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
	t.Parallel()
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
	t.Parallel()
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

// A Lock lost on the client (its validity ran out) while Redis still holds
// its lease (an extension applied, its reply lost: here a PEXPIRE from
// outside): Release with the Lock's own Context, ended by the loss, still
// sends the release, and the name is free at once.
func TestReleaseWithTheContextOfALostLockIsSent(t *testing.T) {
	t.Parallel()
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "own-ctx", false: "live-ctx"}[own], func(t *testing.T) {
			_, rdb := setup(t)
			ctx := t.Context()
			c := newClient(t, rdb, dlock.WithUnfair(nil), dlock.LeaseTTL(500*time.Millisecond), dlock.WithAutoExtend(false))
			l, err := c.Acquire(ctx, "relctx-lost")
			if err != nil {
				t.Fatal(err)
			}
			rdb.PExpire(ctx, l.Key(), 20*time.Second)
			if !closedWithin(l.Done(), 3*time.Second) {
				t.Fatal("the lease was never found lost")
			}
			rctx := context.Background()
			if own {
				rctx = l.Context()
			}
			rerr := l.Release(rctx)
			if v := rdb.Get(ctx, l.Key()).Val(); v == l.Token() {
				t.Errorf("after Release (= %v) the lease still holds the name for %v", rerr, rdb.PTTL(ctx, l.Key()).Val())
			}
		})
	}
}

// Do whose context is cancelled while Redis holds the release's reply (a
// client without a read timeout, which waits for ever) returns soon after,
// reporting the release's failure, instead of waiting for Redis as long as
// it stalls; the lease is not left for its TTL: once Redis answers again
// the background undo frees the name.
func TestDoReturnsSoonWhenItsContextEndsDuringAStalledRelease(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 0, -1)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "do-stalled-release", func(context.Context, *dlock.Lock) error {
			p.StallReplies()
			cancel()
			return nil
		})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Do whose release went unanswered = nil, want the release's failure")
		}
	case <-time.After(15 * time.Second):
		p.Cut()
		<-done
		t.Fatal("Do still waited for its stalled release 15s after its context was cancelled")
	}
	p.Cut() // (Redis answers again)
	other := newClient(t, direct)
	var l *dlock.Lock
	if !waitFor(20*time.Second, func() bool {
		l, _ = other.TryAcquire(t.Context(), "do-stalled-release")
		return l != nil
	}) {
		t.Fatal("the name was still held 20s after Redis answered again (TTL 1m)")
	}
	l.Release(t.Context())
}

// Do whose context is still live while Redis holds the release's reply (a
// client without a read timeout) returns about undoTimeout (2 s) after fn,
// not that plus a second wait for the undo's first try.
func TestDoWithALiveContextWaitsForAStalledReleaseOnlyOnce(t *testing.T) {
	t.Parallel()
	p, rdb, _ := proxied(t, 0, -1)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	var left time.Time
	err := c.Do(t.Context(), "do-stalled-release-live", func(context.Context, *dlock.Lock) error {
		p.StallReplies()
		left = time.Now()
		return nil
	})
	took := time.Since(left)
	p.Cut()
	if err == nil {
		t.Error("Do whose release went unanswered = nil, want the release's failure")
	}
	if took > 3500*time.Millisecond {
		t.Errorf("Do returned %v after fn with its release stalled, want about 2s (one undoTimeout)", took)
	}
}
