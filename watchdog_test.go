package dlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// watchdogRuns returns a lease under a 60s TTL (a run every 20s; a nudge
// may make one every 2s) and a channel that gets the start of each of its
// watchdog's runs. Each run first calls during(n, l), n counting from 1;
// the run uses the context it returns.
func watchdogRuns(t *testing.T, name string, during func(n int32, l *Lock, ctx context.Context) context.Context) (*Lock, <-chan time.Time) {
	t.Helper()
	leakcheck.Check(t)
	rdb := redistest.Start(t).Client(t)
	var (
		held atomic.Pointer[Lock]
		n    atomic.Int32
		runs = make(chan time.Time, 64)
	)
	start := func(ctx context.Context, e *Event) context.Context {
		l := held.Load()
		if e.Op != OpExtend || !e.Auto || l == nil {
			return ctx
		}
		select {
		case runs <- time.Now():
		default:
		}
		return during(n.Add(1), l, ctx)
	}
	c, err := New(rdb, LeaseTTL(time.Minute), WithObserver(Observer{Start: start}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	held.Store(l)
	return l, runs
}

// nextRun returns the start of the watchdog's next run, if it comes
// within d.
func nextRun(runs <-chan time.Time, d time.Duration) (time.Time, bool) {
	select {
	case at := <-runs:
		return at, true
	case <-time.After(d):
		return time.Time{}, false
	}
}

// A nudge that comes while a watchdog run is under way is not lost: the
// watchdog runs once more soon after (TTL/checkRate after the run
// began), not a third of the TTL later.
func TestNudgeDuringAWatchdogRunRunsItAgainSoon(t *testing.T) {
	t.Parallel()
	l, runs := watchdogRuns(t, "nudged-during-a-run", func(n int32, l *Lock, ctx context.Context) context.Context {
		if n == 1 {
			l.nudge() // (the run is under way)
		}
		return ctx
	})
	l.nudge() // the first run, now rather than at TTL/3
	first, ok := nextRun(runs, 10*time.Second)
	if !ok {
		t.Fatal("a nudge with no run under way made none within 10s (TTL/3 is 20s)")
	}
	second, ok := nextRun(runs, 12*time.Second)
	if !ok {
		t.Fatal("a nudge during a run made no run after it within 12s (TTL/3 is 20s)")
	}
	if d := second.Sub(first); d < time.Minute/checkRate-100*time.Millisecond {
		t.Errorf("the run after the nudge began %v after the one it came during, sooner than TTL/checkRate", d)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}

// A run a nudge asked for that gets no answer is tried again soon,
// quickRetries times in a row (10, 40, 160, 640ms), then a quarter of the
// validity left later, as any failed run.
func TestNudgedWatchdogRunLeftUnansweredIsRetriedQuicklyAFewTimes(t *testing.T) {
	t.Parallel()
	l, runs := watchdogRuns(t, "nudged-and-failing", func(_ int32, _ *Lock, ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx) // the extension fails unsent
		cancel()
		return ctx
	})
	l.nudge()
	for i := range 1 + quickRetries {
		if _, ok := nextRun(runs, 10*time.Second); !ok {
			t.Fatalf("run %d of a failing nudged check did not come within 10s", i+1)
		}
	}
	if _, ok := nextRun(runs, 3*time.Second); ok {
		t.Errorf("a run came within 3s after %d quick retries; want the next a quarter of the validity (about 15s) later", quickRetries)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}
