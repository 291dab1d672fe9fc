package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// autoRuns returns a lease under ttl whose watchdog's runs first call
// during(n, l, ctx), n counting from 1, and use the context it returns;
// ended, if not nil, gets the error of each run's extension.
func autoRuns(t *testing.T, name string, ttl time.Duration, during func(n int32, l *Lock, ctx context.Context) context.Context, ended chan<- error) *Lock {
	t.Helper()
	leakcheck.Check(t)
	rdb := redistest.Start(t).Client(t)
	var (
		held atomic.Pointer[Lock]
		n    atomic.Int32
	)
	auto := func(e *Event) *Lock {
		if e.Op != OpExtend || !e.Auto {
			return nil
		}
		return held.Load()
	}
	obs := Observer{
		Start: func(ctx context.Context, e *Event) context.Context {
			if l := auto(e); l != nil {
				return during(n.Add(1), l, ctx)
			}
			return ctx
		},
		End: func(_ context.Context, e *Event) {
			if auto(e) != nil && ended != nil {
				select {
				case ended <- e.Err:
				default:
				}
			}
		},
	}
	c, err := New(rdb, LeaseTTL(ttl), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	held.Store(l)
	return l
}

// cancelled returns ctx cancelled: an extension under it fails unsent.
func cancelled(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return ctx
}

// An Extend to a shorter lease made while a watchdog run is under way,
// whose own extension then fails, is kept to: the run's retry comes within
// the shorter validity, not a quarter of the validity the run began with
// later (which is past the shorter lease's end: the lock lost with Redis
// answering).
func TestWatchdogRetryAfterAFailedRunKeepsToAShorterExtendMadeDuringIt(t *testing.T) {
	t.Parallel()
	extended := make(chan error, 1)
	lag := redistest.TimerLag()
	l := autoRuns(t, "shorter-during-a-failed-run", 6*time.Second, func(n int32, l *Lock, ctx context.Context) context.Context {
		if n != 1 {
			return ctx
		}
		extended <- l.Extend(context.Background(), 500*time.Millisecond)
		return cancelled(ctx) // this run's extension fails
	}, nil)
	t.Cleanup(func() { lag() })
	select {
	case err := <-extended:
		if err != nil && !LostToLag(t, err, lag(), 500*time.Millisecond) {
			t.Fatalf("Extend(500ms) during the watchdog's first run = %v", err)
		} else if err != nil {
			return // (no shorter lease to keep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog's first run did not start within 10s (TTL/3 is 2s)")
	}
	time.Sleep(1500 * time.Millisecond) // three times the shorter lease
	if err, worst := l.Err(), lag(); err != nil && !LostToLag(t, err, worst, 500*time.Millisecond) {
		t.Fatalf("1.5s after Extend(500ms), with Redis answering, Err() = %v; want the watchdog to have kept the lease", err)
	}
}

// An Extend to a shorter lease that fails (its outcome unknown: the
// validity stands) does not put off a watchdog retry already due sooner:
// after failed runs the validity left is under a third of the shorter
// lease, and the retry must still come within it.
func TestFailedShorterExtendDoesNotPutOffTheWatchdogsRetry(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	ended := make(chan error, 16)
	l := autoRuns(t, "shorter-extend-failed", 6*time.Second, func(_ int32, _ *Lock, ctx context.Context) context.Context {
		if failing.Load() {
			return cancelled(ctx)
		}
		return ctx
	}, ended)
	for time.Until(l.ValidUntil()) > 1500*time.Millisecond {
		select {
		case err := <-ended:
			if err == nil {
				t.Fatal("a watchdog run under a cancelled context succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no watchdog run within 10s")
		}
	}
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		running := l.running
		l.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed run did not end within 1s")
		}
	}
	failing.Store(false) // Redis answers the watchdog from now on
	left := time.Until(l.ValidUntil())
	if err := l.Extend(cancelled(context.Background()), 5700*time.Millisecond); err == nil {
		t.Fatal("Extend under a cancelled context succeeded")
	}
	time.Sleep(left + 500*time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("the watchdog did not extend the lease within the %v of validity left when an Extend(5.7s) failed: Err() = %v",
			left.Round(time.Millisecond), err)
	}
}

// Nudges and Extends to lease times longer and shorter, at random moments
// of the watchdog's runs, never leave a lease that Redis keeps answering
// for unextended past its validity.
func TestWatchdogKeepsALeaseThroughNudgesAndExtendsOfEveryLength(t *testing.T) {
	t.Parallel()
	l := autoRuns(t, "nudged-and-extended", 900*time.Millisecond, func(_ int32, _ *Lock, ctx context.Context) context.Context { return ctx }, nil)
	const shortest = 400 * time.Millisecond // of the lease times below
	lag := redistest.TimerLag()
	stop, extendErr := make(chan struct{}), make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.IntN(30)) * time.Millisecond):
			}
			l.nudge()
		}
	})
	wg.Go(func() {
		r := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.IntN(150)) * time.Millisecond):
			}
			ttl := shortest + time.Duration(r.IntN(600))*time.Millisecond
			if err := l.Extend(context.Background(), ttl); err != nil {
				extendErr <- fmt.Errorf("Extend(%v) = %w", ttl, err) // (judged below)
				return
			}
		}
	})
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) && l.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	worst := lag()
	if err := l.Err(); err != nil && !LostToLag(t, err, worst, shortest) {
		t.Errorf("lost with Redis answering: %v", err)
	}
	select {
	case err := <-extendErr: // (an Extend that outlasted the validity it began with, or the loss)
		if worst <= shortest/10 {
			t.Error(err)
		} else {
			t.Logf("timers ran up to %v late: %v", worst, err)
		}
	default:
	}
}

// Leases released at random moments of their watchdogs' runs, nudged and
// extended meanwhile, start no watchdog run after their Release returned,
// and leave no goroutine behind (leakcheck). A run starts when the watchdog
// decides on it (l.checked); one decided before the Release may tell its
// observers after, on a loaded machine.
func TestNoWatchdogRunStartsAfterRelease(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t).Client(t)
	type run struct {
		l  *Lock
		at time.Time
	}
	var (
		mu       sync.Mutex
		runs     []run
		returned = map[*Lock]time.Time{}
		byName   sync.Map // name -> *Lock
	)
	obs := Observer{Start: func(ctx context.Context, e *Event) context.Context {
		if v, ok := byName.Load(e.Name); ok && e.Op == OpExtend && e.Auto {
			l := v.(*Lock)
			l.mu.Lock()
			r := run{l, l.checked} // (set by this run, as it was decided on)
			l.mu.Unlock()
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
		}
		return ctx
	}}
	const shortest = 300 * time.Millisecond // of the lease times below
	c, err := New(rdb, LeaseTTL(450*time.Millisecond), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	lag := redistest.TimerLag()
	r := rand.New(rand.NewPCG(5, 6))
	var wg sync.WaitGroup
	lost := make(chan error, 40)
	for i := range 40 {
		name := fmt.Sprintf("released-mid-run-%d", i)
		l := acquireInTime(t, c, name)
		byName.Store(name, l)
		hold, nudges := time.Duration(r.IntN(600))*time.Millisecond, r.IntN(5)
		wg.Go(func() {
			end := time.Now().Add(hold)
			for k := 0; time.Now().Before(end); k++ {
				if k < nudges {
					l.nudge()
				} else if k%3 == 0 {
					l.Extend(context.Background(), shortest+time.Duration(k%4)*50*time.Millisecond)
				}
				time.Sleep(7 * time.Millisecond)
			}
			if err := l.Release(context.Background()); err != nil {
				lost <- fmt.Errorf("Release of %s = %w", name, err)
			}
			mu.Lock()
			returned[l] = time.Now()
			mu.Unlock()
		})
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // more than two watchdog periods
	worst := lag()
	close(lost)
	for err := range lost {
		// A lease lost before its Release is no late run: on a machine
		// that ran timers late by a tenth of the lease, it is no fault.
		if !errors.Is(err, ErrNotHeld) || worst <= shortest/10 {
			t.Error(err)
		} else {
			t.Logf("timers ran up to %v late: %v", worst, err)
		}
	}
	mu.Lock()
	for _, r := range runs {
		if at, ok := returned[r.l]; ok && r.at.After(at) {
			t.Errorf("a watchdog run of %s started %v after its Release returned", r.l.name, r.at.Sub(at))
		}
	}
	mu.Unlock()
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// acquireInTime is c.TryAcquire(name), tried again while its reply came
// after the lease's validity (a short lease on a loaded machine).
func acquireInTime(t *testing.T, c *Client, name string) *Lock {
	t.Helper()
	for range 10 {
		l, err := c.TryAcquire(t.Context(), name)
		if err == nil {
			return l
		}
		if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "the reply came after the lease's validity had run out") {
			t.Fatal(err)
		}
	}
	t.Fatalf("TryAcquire(%q): every reply came after the lease's validity", name)
	return nil
}

// A watchdog timer that fires as it is re-armed later (a stale fire: its
// function runs after arm moved the next run) runs nothing: no extension
// before the run's time, and, during a run, no jeopardy before the time
// its extension is left unanswered.
func TestStaleWatchdogFireRunsNothing(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	release := make(chan struct{})
	l := autoRuns(t, "stale-fire", time.Minute, func(n int32, l *Lock, ctx context.Context) context.Context {
		runs.Store(n)
		if n == 1 {
			select { // the run stays under way while the test fires the timer's function again
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		return ctx
	}, nil)
	j := l.Jeopardy()
	staleFire(t, l) // 20s before the first run is due
	if n := runs.Load(); n != 0 {
		t.Fatalf("a stale fire before the first run was due ran the watchdog (%d runs)", n)
	}
	l.mu.Lock()
	l.arm(0)
	l.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watchdog armed to run now did not run within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	staleFire(t, l) // during the run, about 30s before its extension is left unanswered
	if !isOpenChan(j) {
		t.Error("a stale fire during a run put the lease in jeopardy before its extension was left unanswered")
	}
	close(release)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}

// staleFire runs the watchdog timer's function as a stale fire does, and
// fails the test if it does not return within 5s.
func staleFire(t *testing.T, l *Lock) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); l.tick() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a stale fire did not return within 5s: it ran the watchdog")
	}
}

func isOpenChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// A watchdog run decided just before Release sends nothing to Redis once
// Release has returned: when it takes its turn it finds the Lock released,
// and its extension ends with ErrReleased, as Redis would have answered.
func TestWatchdogRunDecidedBeforeReleaseSendsNothingAfterIt(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t).Client(t)
	var held atomic.Pointer[Lock]
	released, ended := make(chan error, 1), make(chan error, 1)
	obs := Observer{
		Start: func(ctx context.Context, e *Event) context.Context {
			if l := held.Load(); l != nil && e.Op == OpExtend && e.Auto {
				// The run is decided: Release runs, and returns, before its extension.
				released <- l.Release(context.Background())
				rdb.ConfigResetStat(context.Background())
			}
			return ctx
		},
		End: func(_ context.Context, e *Event) {
			if l := held.Load(); l != nil && e.Op == OpExtend && e.Auto && l.Err() != nil {
				ended <- e.Err // (once: a released Lock's watchdog runs no more)
			}
		},
	}
	c, err := New(rdb, LeaseTTL(900*time.Millisecond), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	held.Store(acquireInTime(t, c, "released-before-the-run-extends"))
	if err := <-released; err != nil {
		t.Fatalf("Release during the run's start = %v, want nil", err)
	}
	if err := <-ended; !errors.Is(err, ErrReleased) {
		t.Errorf("the run's extension after the Release = %v, want ErrReleased", err)
	}
	if s := c.Stats(); s.ExtendFailed != 0 || s.Errors != 0 {
		t.Errorf("a run overtaken by the Release counted as a failure: ExtendFailed %d, Errors %d", s.ExtendFailed, s.Errors)
	}
	var logged strings.Builder
	SlogObserver(slog.New(slog.NewTextHandler(&logged, nil))).End(t.Context(), &Event{Op: OpExtend, Name: "x", Auto: true, Err: ErrReleased})
	if logged.Len() > 0 {
		t.Errorf("a run overtaken by the Release was logged: %s", logged.String())
	}
	noScriptSinceTheRelease(t, rdb)
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// An Extend of a user's that waits for the extension's turn (another
// extension under way) while the Lock is released ends with ErrReleased
// once it has the turn, and sends nothing to Redis after the Release.
func TestExtendWaitingForItsTurnAcrossAReleaseSendsNothingAfterIt(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t).Client(t)
	c, err := New(rdb, LeaseTTL(10*time.Second), WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	l := acquireInTime(t, c, "extend-waits-across-a-release")
	if !l.take(t.Context(), extTurn) { // (an extension under way)
		t.Fatal("the free extension turn was refused")
	}
	ended := make(chan error, 1)
	go func() { ended <- l.Extend(context.Background(), 20*time.Second) }()
	waiting := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.waits) == 1
	}
	for end := time.Now().Add(10 * time.Second); !waiting(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the Extend did not wait for the extension's turn within 10s")
		}
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release while an Extend waits for its turn = %v, want nil", err)
	}
	if err := rdb.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	l.give(extTurn)
	if err := <-ended; !errors.Is(err, ErrReleased) {
		t.Errorf("Extend that took its turn after the Release = %v, want ErrReleased", err)
	}
	noScriptSinceTheRelease(t, rdb)
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// noScriptSinceTheRelease fails t if rdb's server ran a script since its
// stats were last reset: the test's Release returned before then.
func noScriptSinceTheRelease(t *testing.T, rdb *redis.Client) {
	t.Helper()
	stats, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stats, "cmdstat_eval") {
		t.Errorf("Redis ran a script after the Release returned:\n%s", stats)
	}
}
