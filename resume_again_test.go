package dlock_test

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// replyLost is a go-redis hook: once the lease's marker was read (read),
// the first script call runs, then waits for open (up to 10s) and fails
// as a reply that timed out does, though it ran.
type replyLost struct {
	read, spent, waiting *atomic.Bool
	open                 chan struct{}
}

func (h replyLost) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h replyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmd) })(ctx, []redis.Cmder{cmd})
	}
}
func (h replyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return afterMarkerRead{h.read, func([]redis.Cmder) error { return nil }}.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.read.Load() || !evalIn(cmds) || h.spent.Swap(true) {
			return err
		}
		h.waiting.Store(true)
		select {
		case <-h.open:
		case <-time.After(10 * time.Second):
		}
		err = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	})
}

// A resume whose extension landed but whose reply was lost is undone; when
// another Lock resumed the lease after it meanwhile (its number above the
// failed one's), the undo changes nothing: that Lock goes on holding the
// lease, and its Extend, Fence and Release work.
func TestFailedResumeUndoLeavesTheLeaseOfALaterResume(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	name := "undo-after-later"
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	first, err := newClient(t, rdb, opts...).TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	h := replyLost{new(atomic.Bool), new(atomic.Bool), new(atomic.Bool), make(chan struct{})}
	hooked := s.Client(t)
	hooked.AddHook(h)
	failing := newClient(t, hooked, opts...)
	failed := make(chan error, 1)
	go func() {
		l, err := failing.TryAcquire(ctx, name, dlock.Resume(first.Token()))
		if err == nil {
			l.Release(ctx)
		}
		failed <- err
	}()
	if !waitFor(5*time.Second, h.waiting.Load) {
		close(h.open)
		t.Fatal("the first resume's extension never ran")
	}
	later, err := newClient(t, rdb, opts...).TryAcquire(ctx, name, dlock.Resume(first.Token()))
	close(h.open)
	if err != nil {
		t.Fatalf("the later resume = %v", err)
	}
	if err := <-failed; err == nil {
		t.Fatal("the resume whose reply was lost succeeded")
	}
	if err := failing.Close(ctx); err != nil { // (its undo, if any, is over)
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, first.Key()).Val(); v != first.Token() {
		t.Fatalf("the lock after the failed resume's undo holds %q, want the lease's token", v)
	}
	if err := later.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("the later resumer's Extend after the undo = %v", err)
	}
	if f, err := later.Fence(ctx); err != nil || f <= 0 {
		t.Errorf("the later resumer's Fence after the undo = %d, %v", f, err)
	}
	if err := later.Release(ctx); err != nil {
		t.Errorf("the later resumer's Release after the undo = %v", err)
	}
	if n := rdb.Exists(ctx, first.Key()).Val(); n != 0 {
		t.Errorf("the lock after the later resumer's Release exists (%d)", n)
	}
}

// Every call of a Lock that resumed a lease, made after another Lock
// resumed it again and before it learned of it, fails with ErrNotHeld and
// ends the Lock as lost; its Release then sends nothing, and the later
// resumer's Lock goes on: the earlier resume's number does not let it act
// over the later one's extension, for every kind's scripts.
func TestResumedHolderCallsRefusedOnceResumedAgain(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	supersededCallsRefused(t, rdb, func(k resumable) resumable {
		take := k.take
		k.take = func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
			if len(opts) > 0 { // (the later resume)
				return take(ctx, c, name, opts...)
			}
			first, err := take(ctx, newClient(t, rdb, append([]dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}, k.opts...)...), name)
			if err != nil {
				return nil, err
			}
			return take(ctx, c, name, dlock.Resume(first.Token()))
		}
		return k
	})
}
