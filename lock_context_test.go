package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Lock.Context ends with the Lock: at Release, with ErrReleased as its
// cause; at a loss, with the loss; never while the lease is extended; and
// beside a Do's context, each told.
func TestLockContext(t *testing.T) {
	t.Parallel()
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
		short := newClient(t, rdb, waiting(!unfair), dlock.WithAutoExtend(false), dlock.LeaseTTL(1500*time.Millisecond))
		l, err = short.TryAcquire(ctx, "ctx-lost")
		if err != nil {
			t.Fatal(err)
		}
		lctx = l.Context()
		if !closedWithin(lctx.Done(), 8*time.Second) {
			t.Fatal("the context is not done once the lease ran out")
		}
		if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrNotHeld) {
			t.Errorf("cause after the lease ran out = %v, want ErrNotHeld", cause)
		}
		l.Release(ctx)

		// Extended by the watchdog: held past several TTLs.
		dog := newClient(t, rdb, waiting(!unfair), dlock.LeaseTTL(1500*time.Millisecond))
		l, err = dog.TryAcquire(ctx, "ctx-held")
		if err != nil {
			t.Fatal(err)
		}
		lctx = l.Context()
		if closedWithin(lctx.Done(), 6*time.Second) {
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

// Lock.Context: done with ErrReleased after Release, with the loss after a
// loss, immediately when called after either, and no goroutine left.
func TestLockContextEndsWithReleaseOrLoss(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	for i := range 50 {
		l, err := c.Acquire(ctx, fmt.Sprint("lctx-", i%3))
		if err != nil {
			t.Fatal(err)
		}
		lc := l.Context()
		var wg sync.WaitGroup
		wg.Go(func() { l.Release(ctx) })
		wg.Go(func() { _ = l.Context() })
		wg.Wait()
		select {
		case <-lc.Done():
		case <-time.After(time.Second):
			t.Fatal("Context not done after Release")
		}
		if !errors.Is(context.Cause(lc), dlock.ErrReleased) {
			t.Fatalf("cause = %v", context.Cause(lc))
		}
		if l.Context() != lc {
			t.Fatal("Context changed")
		}
	}
	// Context first asked after a loss: done, cause the loss.
	l, err := c.Acquire(ctx, "lctx-lost", dlock.LeaseTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, l.Key())
	ok := waitFor(3*time.Second, func() bool { return l.Err() != nil })
	if !ok {
		t.Fatal("loss not noticed")
	}
	lc := l.Context()
	select {
	case <-lc.Done():
	case <-time.After(time.Second):
		t.Fatal("Context after a loss not done")
	}
	if !errors.Is(context.Cause(lc), dlock.ErrNotHeld) {
		t.Errorf("cause after loss = %v", context.Cause(lc))
	}
	// Context of a lock whose client is closed afterwards.
	c2 := newClient(t, rdb)
	l2, err := c2.Acquire(ctx, "lctx-close", dlock.LeaseTTL(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lc2 := l2.Context()
	c2.Close(ctx)
	select {
	case <-lc2.Done():
		if !errors.Is(context.Cause(lc2), dlock.ErrNotHeld) {
			t.Errorf("after Close: cause %v", context.Cause(lc2))
		}
	case <-time.After(3 * time.Second):
		t.Errorf("after Close, Context not done past the lease's validity (Err %v)", l2.Err())
	}
	// Context asked first, then the key deleted: the watchdog's loss ends it.
	l3, err := c.Acquire(ctx, "lctx-del", dlock.LeaseTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lc3 := l3.Context()
	rdb.Del(ctx, l3.Key())
	select {
	case <-lc3.Done():
	case <-time.After(3 * time.Second):
		t.Errorf("Context not done after the key was deleted")
	}
}

// Right after a pause longer than the lease (a stopped process, a GC
// pause), Do's ctx must already report the loss: its Err consults the
// validity deadline instead of waiting for a timer's goroutine to run.
func TestDoContextKnowsOfLossRightAfterPause(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, _ := setup(t)
	for i := range 4 {
		h := startHelper(t, s, "pausedo", "paused", 500*time.Millisecond, 1)
		if !h.waitLine("in", 30*time.Second) { // (a process started on a loaded machine)
			t.Fatalf("round %d: the worker never entered Do", i)
		}
		time.Sleep(50 * time.Millisecond)
		h.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(1200 * time.Millisecond)
		h.cmd.Process.Signal(syscall.SIGCONT)
		for {
			select {
			case line := <-h.lines:
				switch line {
				case "lost":
				case "stale":
					t.Errorf("round %d: after a 1.2s pause with a 500ms lease, fn's ctx.Err() was nil past the deadline", i)
				default:
					continue
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no report from the worker", i)
			}
			break
		}
		if err := h.wait(10 * time.Second); err != nil {
			t.Errorf("round %d: worker: %v", i, err)
		}
	}
}

// Once a lease's validity has passed without an extension (its server
// frozen, so the watchdog cannot extend it), Lock.Context reports the loss
// as Lock.Err does, whichever is read first: the context checks the
// validity itself, as Do's does, instead of waiting for a timer's
// goroutine. Serial: it stops its server with SIGSTOP.
func TestLockContextKnowsOfLossAsSoonAsErr(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(200*time.Millisecond))
	for round := range 8 {
		ctxFirst := round%2 == 0
		l, err := c.TryAcquire(ctx, "ctx-frozen")
		if err != nil {
			t.Fatal(err)
		}
		lctx := l.Context()
		s.Pause()
		if ctxFirst {
			// Read the context the moment the validity has passed, every
			// other P kept busy meanwhile (as on a loaded machine), so that
			// a timer due then waits for a preemption to run.
			deadline := time.Now().Add(5 * time.Second)
			var busy sync.WaitGroup
			var stop atomic.Bool
			for range runtime.GOMAXPROCS(0) - 1 {
				busy.Go(func() {
					for !stop.Load() && time.Now().Before(deadline) {
					}
				})
			}
			for !time.Now().After(l.ValidUntil()) && time.Now().Before(deadline) {
			}
			cause, cerr := context.Cause(lctx), lctx.Err()
			stop.Store(true)
			busy.Wait()
			if !errors.Is(cause, dlock.ErrNotHeld) || cerr == nil {
				t.Errorf("round %d: past ValidUntil, before reading Err: Cause = %v, Err = %v; want ErrNotHeld, non-nil (l.Err() now %v)",
					round, cause, cerr, l.Err())
			}
		} else if !waitFor(5*time.Second, func() bool { return l.Err() != nil }) {
			t.Errorf("round %d: the loss was never declared on a frozen server", round)
		} else if cerr, cause := lctx.Err(), context.Cause(lctx); cerr == nil || !errors.Is(cause, dlock.ErrNotHeld) {
			t.Errorf("round %d: after l.Err() = %v: Context Err = %v, Cause = %v; want non-nil, ErrNotHeld", round, l.Err(), cerr, cause)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("round %d: l.Err() = %v, want ErrNotHeld", round, err)
		}
		s.Resume()
		l.Release(ctx)
	}
}
