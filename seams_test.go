package dlock_test

// Regression tests for the paths where a lock's promises used to break:
// two holders, a stuck or resurrected lease, a context ignored. Each test
// names the seam it keeps closed; where a fix must hold in every mode, the
// test runs in each (plain, fair, reentrant, quorum).

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Do releases the lock when fn panics (net/http recovers handler panics: the
// lock must not stay held until the process exits), and the panic goes on.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t)
			name := "panic-" + m.name
			func() {
				defer func() {
					if r := recover(); r != "boom" {
						t.Errorf("recovered %v, want the fn's panic", r)
					}
				}()
				c.Do(m.ctx(t.Context()), name, func(context.Context, *dlock.Lock) error { panic("boom") })
			}()
			l, err := m.new(t).TryAcquire(t.Context(), name)
			if err != nil {
				t.Fatalf("TryAcquire right after Do's fn panicked = %v, want the lock (released)", err)
			}
			l.Release(t.Context())
		})
	}
}

// A foreign value at the fence key fails what issues a fence, with a clear
// error and nothing written: a reentrant acquisition (its fence is issued
// with the first hold), or Fence of a plain lease (issued when asked for),
// which leaves the lease held.
func TestForeignFenceKeyLeavesNothingBehind(t *testing.T) {
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, false) {
		name := "foreign-" + m.name
		rdb.RPush(t.Context(), "dlock:{"+name+"}:fence", "not a counter")
		l, err := m.new(t).TryAcquire(m.ctx(t.Context()), name)
		if m.name != "reentrant" {
			if err != nil {
				t.Fatalf("%s: TryAcquire with a list at the fence key = %v, want the lock (no fence asked for)", m.name, err)
			}
			_, err = l.Fence(t.Context())
			if l.Err() != nil {
				t.Errorf("%s: the lease after a failed Fence: %v, want it held", m.name, l.Err())
			}
			l.Release(t.Context())
		}
		if !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("%s: with a list at the fence key: %v, want ErrWrongType", m.name, err)
		} else if strings.Contains(err.Error(), "script") {
			t.Errorf("%s: error text %q shows the script's internals", m.name, err)
		}
		if n := liveKeys(t.Context(), rdb, "dlock:{"+name+"}"); n != 0 {
			t.Errorf("%s: lock key left behind", m.name)
		}
	}
}

// A call with a done context fails fast, matches ErrNotAcquired and the
// context's error, and never takes the lock — with pipelining on and off.
func TestDoneContextTakesNothing(t *testing.T) {
	_, rdb := setup(t)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, m := range modes(t, rdb, true) {
		for _, pipelining := range []bool{true, false} {
			c := m.new(t, pipelined(pipelining))
			name := "done-" + m.name
			for op, call := range map[string]func(context.Context, string, ...dlock.LockOption) (*dlock.Lock, error){
				"TryAcquire": c.TryAcquire, "Acquire": c.Acquire,
			} {
				_, err := call(m.ctx(cancelled), name)
				if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
					t.Errorf("%s, pipelining %v: %s with a cancelled ctx = %v, want ErrNotAcquired and Canceled", m.name, pipelining, op, err)
				}
				if info, _ := c.Inspect(t.Context(), name); info.Held {
					t.Errorf("%s, pipelining %v: %s with a cancelled ctx took the lock", m.name, pipelining, op)
				}
			}
		}
	}
}

// Against a frozen server, a call returns within a small bound of its
// context's deadline (go-redis honours deadlines on reads with
// ContextTimeoutEnabled; batched calls honour them in any case), and the
// error matches ErrNotAcquired and DeadlineExceeded.
func TestFrozenServerCallEndsAtDeadline(t *testing.T) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	holder, err := newClient(t, rdb).TryAcquire(t.Context(), "frozen")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(t.Context())
	s.Pause()
	defer s.Resume()
	for _, pipelining := range []bool{true, false} {
		for _, fair := range []bool{true, false} {
			c := newClient(t, rdb, pipelined(pipelining), waiting(fair))
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			start := time.Now()
			_, err := c.Acquire(ctx, "frozen")
			took := time.Since(start)
			cancel()
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("pipelining %v, fair %v: Acquire = %v, want ErrNotAcquired and DeadlineExceeded", pipelining, fair, err)
			}
			if took > time.Second {
				t.Errorf("pipelining %v, fair %v: Acquire with a 200ms ctx on a frozen server took %v", pipelining, fair, took)
			}
		}
	}
}

// Right after a pause longer than the lease (a stopped process, a GC
// pause), Do's ctx must already report the loss: its Err consults the
// validity deadline instead of waiting for a timer's goroutine to run.
func TestDoContextKnowsOfLossRightAfterPause(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, _ := setup(t)
	for i := range 4 {
		h := startHelper(t, s, "pausedo", "paused", 500*time.Millisecond, 1)
		if !h.waitLine("in", 10*time.Second) {
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
