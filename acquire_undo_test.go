package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// An acquisition whose grant comes back after its validity ran out is not
// returned (ErrNotAcquired, saying so) and is undone at once: its lease,
// kept in Redis for a lock-delay past its validity, does not block the
// next holder, in either waiting mode.
func TestAcquireWhoseGrantComesTooLateIsUndoneDespiteLockDelay(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 0)
	ctx := t.Context()
	for _, fair := range []bool{true, false} {
		name := "late-" + map[bool]string{true: "fair", false: "unfair"}[fair]
		c := newClient(t, rdb, waiting(fair), dlock.WithAutoExtend(false))
		other := newClient(t, direct, waiting(fair))
		warm(t, ctx, c, "lock", name+"-warm") // (the scripts are loaded: the attempt is one round trip)
		p.Delay(0, 400*time.Millisecond)      // each reply comes after a 100ms lease's validity
		_, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(100*time.Millisecond), dlock.LockDelay(time.Minute))
		p.Delay(0, 0)
		if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "the reply came after the lease's validity had run out") {
			t.Errorf("fair %v: TryAcquire whose grant came too late = %v, want ErrNotAcquired saying the reply came too late", fair, err)
		}
		var l *dlock.Lock
		if !waitFor(5*time.Second, func() bool { l, err = other.TryAcquire(ctx, name); return err == nil }) {
			t.Fatalf("fair %v: the late grant's lease still blocks the lock (%v): it was not undone", fair, err)
		}
		l.Release(ctx)
	}
}

// An acquisition whose ctx ends while its request is unanswered undoes it:
// the caller, its ctx done, waits for the undo's first try only briefly,
// not for the undo's whole bound, and the undo, left to the background,
// frees the lock once Redis answers again.
func TestAcquireWhoseCtxEndsUnansweredUndoesWithoutWaitingOut(t *testing.T) { // (not parallel: it measures how long the caller waits)
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 10*time.Second)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	other := newClient(t, direct)
	const name = "unanswered"
	warm(t, ctx, c, "lock", name+"-warm")
	p.StallReplies() // requests run; no reply comes back, the undo's included
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryAcquire(tctx, name, dlock.LeaseTTL(time.Minute))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire whose ctx ended unanswered = %v, want context.DeadlineExceeded", err)
	}
	if took > 1900*time.Millisecond { // (300ms, then 100ms for the undo's first try; the bound without a done ctx is 2s more)
		t.Errorf("TryAcquire whose ctx ended unanswered returned after %v: it waited out the undo", took)
	}
	p.Cut() // (the held replies are dropped: the undo tries again, answered)
	var l *dlock.Lock
	if !waitFor(5*time.Second, func() bool { l, err = other.TryAcquire(ctx, name); return err == nil }) {
		t.Fatalf("the unanswered grant's lease (1m) still blocks the lock (%v): it was not undone", err)
	}
	l.Release(ctx)
}
