package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// clockWatcher is an Observer that records what it is told of servers'
// clocks, of lost leases, and counts the watchdog's extensions.
type clockWatcher struct {
	mu       sync.Mutex
	told     []*dlock.ClockError
	names    []string
	lost     atomic.Int32
	extended atomic.Int32
}

func (w *clockWatcher) observer() dlock.Observer {
	return dlock.Observer{
		Clock: func(_ context.Context, e *dlock.Event) {
			ce, _ := errors.AsType[*dlock.ClockError](e.Err)
			w.mu.Lock()
			defer w.mu.Unlock()
			w.told = append(w.told, ce)
			w.names = append(w.names, e.Name)
		},
		Lost: func(context.Context, *dlock.Event) { w.lost.Add(1) },
		End: func(_ context.Context, e *dlock.Event) {
			if e.Op == dlock.OpExtend && e.Auto && e.Err == nil {
				w.extended.Add(1)
			}
		},
	}
}

// clockEvents returns what w was told so far.
func (w *clockWatcher) clockEvents() []*dlock.ClockError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*dlock.ClockError(nil), w.told...)
}

// extensions waits until the watchdog made n more extensions, within d.
func (w *clockWatcher) extensions(t *testing.T, n int32, d time.Duration) {
	t.Helper()
	want := w.extended.Load() + n
	if !waitFor(d, func() bool { return w.extended.Load() >= want }) {
		t.Fatalf("the watchdog made %d extensions within %v, want %d (leases lost: %d)", w.extended.Load(), d, want, w.lost.Load())
	}
}

// heldUnderFakeClock starts a server whose clock the test sets, and holds
// name on it, the watchdog extending every second, told to w.
func heldUnderFakeClock(t *testing.T, name string, w *clockWatcher) (*dlock.Lock, func(string)) {
	t.Helper()
	leakcheck.Check(t)
	opts, set := redistest.FakeClock(t)
	rdb := redistest.Start(t, opts...).Client(t)
	c := newClient(t, rdb, dlock.WithObserver(w.observer()))
	l, err := c.TryAcquire(t.Context(), name, dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire(%q) = %v, want nil", name, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	w.extensions(t, 2, 20*time.Second) // the clock read twice: a base to compare with
	return l, set
}

// unextendedUnderFakeClock starts a server whose clock the test sets, from
// offset on, and a Client on it whose Locks only Extend extends, told to w.
func unextendedUnderFakeClock(t *testing.T, offset string, w *clockWatcher, opts ...dlock.Option) (*dlock.Client, func(string)) {
	t.Helper()
	leakcheck.Check(t)
	sopts, set := redistest.FakeClock(t)
	set(offset)
	rdb := redistest.Start(t, sopts...).Client(t)
	c := newClient(t, rdb, append([]dlock.Option{dlock.WithAutoExtend(false), dlock.WithObserver(w.observer())}, opts...)...)
	return c, set
}

// heldFor takes name on c for ttl, released when t ends.
func heldFor(t *testing.T, c *dlock.Client, name string, ttl time.Duration) *dlock.Lock {
	t.Helper()
	l, err := c.TryAcquire(t.Context(), name, dlock.LeaseTTL(ttl))
	if err != nil {
		t.Fatalf("TryAcquire(%q) = %v, want nil", name, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// A server's clock stepped, frozen, while a lease is held: the Observer is
// told once, with the way and about how far, and the lease, still on the
// server, stays held (the extension that showed it counted from the new
// clock).
func TestObserverToldOfServerClockStepWhileHeld(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, offset string
		lo, hi       time.Duration // the bounds of ClockError.Ahead
	}{
		// Ahead by the step less the round trips' uncertainty.
		{name: "ahead", offset: "+1s", lo: 300 * time.Millisecond, hi: 1050 * time.Millisecond},
		{name: "behind", offset: "-30s", lo: -30050 * time.Millisecond, hi: -29 * time.Second},
		// Frozen at the whole second (libfaketime's "@" resolution), it
		// falls behind by up to that second and the time between two
		// extensions, another; the first reading after it may show only
		// part of that.
		{name: "frozen", offset: "@now x0", lo: -2500 * time.Millisecond, hi: -time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := new(clockWatcher)
			l, set := heldUnderFakeClock(t, "clock-"+tc.name, w)
			if got := w.clockEvents(); len(got) != 0 {
				t.Fatalf("before the step: told %v, want nothing", got[0])
			}
			if tc.offset == "@now x0" {
				tc.offset = "@" + time.Now().Format(time.DateTime) + " x0" // (the server's local time, as the test's)
			}
			set(tc.offset)
			if !waitFor(20*time.Second, func() bool { return len(w.clockEvents()) > 0 }) {
				t.Fatalf("after the step %q: not told within 20s (%d extensions)", tc.offset, w.extended.Load())
			}
			w.extensions(t, 2, 20*time.Second) // more disagreeing (frozen) or agreeing readings: not told again
			got := w.clockEvents()
			if len(got) != 1 || got[0] == nil {
				t.Fatalf("after the step %q and 2 extensions: told %d times (%v), want once, a *ClockError", tc.offset, len(got), got)
			}
			if a := got[0].Ahead; a < tc.lo || a > tc.hi {
				t.Errorf("after the step %q: ClockError.Ahead = %v, want within [%v, %v] (%v)", tc.offset, a, tc.lo, tc.hi, got[0])
			}
			if w.names[0] != "clock-"+tc.name {
				t.Errorf("OpClock's Name = %q, want %q", w.names[0], "clock-"+tc.name)
			}
			if err := l.Err(); err != nil {
				t.Errorf("after the step %q: l.Err() = %v, want nil (still held)", tc.offset, err)
			}
		})
	}
}

// A step ahead past the lease's expiry ends it on the server: the next
// extension finds it gone, and the Observer is told of the clock with the
// loss.
func TestObserverToldOfServerClockStepThatEndedTheLease(t *testing.T) {
	t.Parallel()
	w := new(clockWatcher)
	l, set := heldUnderFakeClock(t, "clock-past", w)
	set("+30s")
	if !waitFor(20*time.Second, func() bool { return w.lost.Load() > 0 }) {
		t.Fatalf("after a step of 30s past a 3s lease: not lost within 20s")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("after a step of 30s past a 3s lease: l.Err() = %v, want ErrNotHeld", err)
	}
	got := w.clockEvents()
	// (Ahead by the step, give or take the round trips' uncertainty, as in
	// TestObserverToldOfServerClockStepWhileHeld.)
	if len(got) != 1 || got[0] == nil || got[0].Ahead < 29*time.Second || got[0].Ahead > 30050*time.Millisecond {
		t.Errorf("after a step of 30s: told %v, want once, about 30s ahead", got)
	}
}

// Replies that come back late, or late by turns, do not read as a step of
// the server's clock: each reading is compared within the interval it was
// taken in.
func TestObserverNotToldOfSteadyClockWhenRepliesAreSlow(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, _ := proxied(t, 0, 0)
	w := new(clockWatcher)
	c := newClient(t, rdb, dlock.WithObserver(w.observer()))
	// (A lease of 2s, extended every 667ms: its validity outlasts a
	// delayed reply by over a second, which a loaded machine's late timers
	// and round trips do not use up, as they could of a 900ms lease's.)
	l, err := c.TryAcquire(t.Context(), "clock-slow", dlock.LeaseTTL(2*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	defer l.Release(context.Background())
	// Replies, then requests, held for up to a third of the time between
	// extensions, changing after each.
	delays := []time.Duration{0, 200 * time.Millisecond, 0, 80 * time.Millisecond, 200 * time.Millisecond, 0}
	for i := range 24 {
		d := delays[i%len(delays)]
		if i%2 == 0 {
			p.Delay(0, d)
		} else {
			p.Delay(d, 0)
		}
		w.extensions(t, 1, 20*time.Second)
	}
	p.Delay(0, 0)
	if got := w.clockEvents(); len(got) != 0 {
		t.Errorf("after 24 extensions with slow replies, the server's clock steady: told %v, want nothing", got[0])
	}
	if err := l.Err(); err != nil {
		t.Errorf("l.Err() = %v, want nil", err)
	}
}

// Over a quorum each node's clock is read on its own: a step of one node's
// clock is told, naming that node, and the lease stays held.
func TestObserverToldOfOneQuorumNodesClockStep(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	opts, set := redistest.FakeClock(t)
	stepped := redistest.Start(t, opts...)
	nodes := []redis.UniversalClient{stepped.Client(t), redistest.Start(t).Client(t), redistest.Start(t).Client(t)}
	w := new(clockWatcher)
	c := newRedlock(t, nodes, time.Second, dlock.WithObserver(w.observer()))
	l, err := c.TryAcquire(t.Context(), "clock-quorum", dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	defer l.Release(context.Background())
	w.extensions(t, 2, 20*time.Second)
	set("+1s")
	if !waitFor(20*time.Second, func() bool { return len(w.clockEvents()) > 0 }) {
		t.Fatalf("after a step of one node's clock: not told within 20s (%d extensions)", w.extended.Load())
	}
	w.extensions(t, 2, 20*time.Second)
	got := w.clockEvents()
	if len(got) != 1 || got[0] == nil || got[0].Server != stepped.Addr() || got[0].Ahead < 300*time.Millisecond {
		t.Errorf("after a step of %s's clock by 1s: told %v, want once, that node about 1s ahead", stepped.Addr(), got)
	}
	if err := l.Err(); err != nil {
		t.Errorf("l.Err() = %v, want nil", err)
	}
}

// SlogObserver logs a server's clock that disagrees as a warning that
// names the lock, the server, the way and how far.
func TestSlogObserverWarnsOfServerClock(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	o := dlock.SlogObserver(slog.New(slog.NewTextHandler(&buf, nil)))
	o.Clock(t.Context(), &dlock.Event{Op: dlock.OpClock, Name: "jobs",
		Err: &dlock.ClockError{Server: "10.0.0.1:6379", Ahead: -30 * time.Second, Over: time.Second}})
	for _, want := range []string{"level=WARN", "lock=jobs", "10.0.0.1:6379", "30s behind ours over 1s"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("SlogObserver's Clock logged %q, want it to contain %q", buf.String(), want)
		}
	}
}

// Extensions read the server's clock only while some Observer has Clock,
// for one command more each (TIME, inside the script).
func TestExtensionReadsServerClockOnlyWhenObserved(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, rdb := setup(t)
	perExtension := func(opts ...dlock.Option) float64 {
		c := newClient(t, rdb, append([]dlock.Option{dlock.WithAutoExtend(false)}, opts...)...)
		l, err := c.TryAcquire(ctx, "clock-cost")
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		defer l.Release(ctx)
		return commandsPerOp(t, ctx, rdb, 20, func(int) {
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Fatalf("Extend = %v, want nil", err)
			}
		})
	}
	plain := perExtension()
	observed := perExtension(dlock.WithObserver(dlock.Observer{Clock: func(context.Context, *dlock.Event) {}}))
	if observed != plain+1 {
		t.Errorf("commands per extension: %.2f with an Observer of the clock, %.2f without; want one more", observed, plain)
	}
}

// In a Cluster each master's clock is read on its own: masters whose
// clocks differ, each running steadily, are never told of, however the
// leases' extensions alternate between them.
func TestObserverNotToldOfClusterMastersWhoseClocksDifferSteadily(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster")
	}
	leakcheck.Check(t)
	opts, set := redistest.FakeClock(t)
	set("+5s") // one master's clock 5s ahead of the others', from its start
	nodes := redistest.StartClusterOf(t, 3, 0, func(i int) []redistest.Option {
		if i == 0 {
			return opts
		}
		return []redistest.Option{redistest.Valkey(t)}
	})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	ctx := t.Context()
	w := new(clockWatcher)
	c := newClient(t, cc, dlock.WithObserver(w.observer()))
	// One lease on the master ahead, one on another.
	var ahead, other bool
	for i := 0; i < 64 && !(ahead && other); i++ {
		name := fmt.Sprint("clock-cluster-", i)
		l, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(3*time.Second))
		if err != nil {
			t.Fatalf("TryAcquire(%s) = %v, want nil", name, err)
		}
		m, err := cc.MasterForKey(ctx, l.Key())
		if err != nil {
			t.Fatalf("MasterForKey(%s) = %v", l.Key(), err)
		}
		onAhead := m.Options().Addr == nodes[0].Addr()
		if (onAhead && ahead) || (!onAhead && other) {
			l.Release(ctx)
			continue
		}
		ahead, other = ahead || onAhead, other || !onAhead
		t.Cleanup(func() { l.Release(context.Background()) })
	}
	if !ahead || !other {
		t.Fatalf("64 names: a lease on the master ahead %v, on another %v; want both", ahead, other)
	}
	w.extensions(t, 12, 30*time.Second)
	if got := w.clockEvents(); len(got) != 0 {
		t.Errorf("after 12 extensions on two masters whose clocks differ by 5s, each steady: told %d times (first %v), want never", len(got), got[0])
	}
	// A step of that master's clock is told once, naming it.
	set("+6s")
	if !waitFor(20*time.Second, func() bool { return len(w.clockEvents()) > 0 }) {
		t.Fatalf("after a step of one master's clock: not told within 20s (%d extensions)", w.extended.Load())
	}
	w.extensions(t, 6, 30*time.Second)
	if got := w.clockEvents(); len(got) != 1 || got[0] == nil || got[0].Server != nodes[0].Addr() || got[0].Ahead < 300*time.Millisecond {
		t.Errorf("after a step of %s's clock by 1s: told %v, want once, that master about 1s ahead", nodes[0].Addr(), got)
	}
	if n := w.lost.Load(); n != 0 {
		t.Errorf("%d leases lost, want none", n)
	}
}

// A server clock that runs 3% fast expires a 3s lease 90ms early, beyond
// the lease's drift margin (32ms): the client then counts as valid a lease
// another may hold. It is told, however small each extension's share of it.
func TestObserverToldOfServerClockRunningFastBeyondTheDriftMargin(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	opts, set := redistest.FakeClock(t)
	set("+0 x1.03")
	srv := redistest.Start(t, opts...)
	rdb := srv.Client(t)
	ctx := t.Context()
	// The rate the server's clock runs at, bounded by when each TIME was
	// sent and answered: a loaded machine widens the bounds, and only a
	// rate outside them is wrong.
	b0, s0, a0 := time.Now(), rdb.Time(ctx).Val(), time.Now()
	time.Sleep(time.Second) // (measured, not waited on)
	b1, s1, a1 := time.Now(), rdb.Time(ctx).Val(), time.Now()
	lo, hi := float64(s1.Sub(s0))/float64(a1.Sub(b0)), float64(s1.Sub(s0))/float64(b1.Sub(a0))
	if lo > 1.035 || hi < 1.025 {
		t.Fatalf("the server's clock ran at %.3f–%.3f of the client's, want about 1.03 (libfaketime's rate)", lo, hi)
	}
	w := new(clockWatcher)
	c := newClient(t, rdb, dlock.WithObserver(w.observer()))
	l, err := c.TryAcquire(ctx, "clock-fast", dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	defer l.Release(context.Background())
	w.extensions(t, 10, 40*time.Second)
	switch got := w.clockEvents(); {
	case len(got) == 0:
		t.Errorf("after 10 extensions, the server's clock 3%% fast (a 3s lease's margin: 32ms): told nothing, want told it runs ahead")
	case len(got) > 1:
		t.Errorf("after 10 extensions, the server's clock 3%% fast: told %d times, want once: %v", len(got), got)
	}
}

// A step of the server's clock beyond one lease's drift margin is told
// though the first extension after it is another lease's, whose longer
// lease time allows more: the step still ends the short lease early.
func TestObserverToldOfServerClockStepBeyondAShortLeasesMargin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w := new(clockWatcher)
	c, set := unextendedUnderFakeClock(t, "+0", w)
	long := heldFor(t, c, "clock-long", 5*time.Minute)   // margin 3.002s
	short := heldFor(t, c, "clock-short", 3*time.Second) // margin 32ms
	extend := func(l *dlock.Lock, ttl time.Duration) {
		t.Helper()
		if err := l.Extend(ctx, ttl); err != nil {
			t.Fatalf("Extend(%s) = %v, want nil", l.Name(), err)
		}
	}
	extend(short, 3*time.Second)
	extend(short, 3*time.Second) // the clock read twice, agreeing
	set("+1s")
	extend(long, 5*time.Minute)
	extend(short, 3*time.Second)
	extend(short, 3*time.Second)
	if got := w.clockEvents(); len(got) == 0 {
		t.Errorf("after a step of 1s, beyond the 3s lease's margin of 32ms: told nothing, want told it ran ahead")
	}
}

// A server clock 3% fast expires a 10s lease with a 100ms drift margin
// 300ms early. It is told though a short lease, whose margin allows a far
// larger share of its lease time, was extended on the same server first:
// the rate that any lease allows is the least of them, not the short one's.
func TestObserverToldOfServerClockRunningFastAfterAShortLeaseWasExtended(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w := new(clockWatcher)
	c, _ := unextendedUnderFakeClock(t, "+0 x1.03", w, dlock.WithDrift(100*time.Millisecond))
	short := heldFor(t, c, "clock-short", time.Second) // margin 100ms: 10%
	if err := short.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend(short) = %v, want nil", err)
	}
	long := heldFor(t, c, "clock-long", 10*time.Second) // margin 100ms: 1%
	// Extend the long lease every 500ms (each step 15ms, inside the step
	// check's margin) until told, or for 20s: 3% over 5s is 150ms, beyond
	// the 1% the long lease allows (50ms).
	told := waitFor(20*time.Second, func() bool {
		if err := long.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("Extend(long) = %v, want nil", err)
		}
		time.Sleep(500 * time.Millisecond) // (the pace of the extensions)
		return len(w.clockEvents()) > 0
	})
	if !told {
		t.Errorf("after 20s of a server clock 3%% fast, a 10s lease's margin 100ms: told nothing, want told it runs ahead")
	}
}

// A server clock that runs 5% fast, read by extensions at uneven intervals
// (as several leases on one server read it), is one steady error: told
// once, though the step check sees the 2s intervals beyond its margin and
// the 100ms ones inside it.
func TestObserverToldOnceOfServerClockRunningFastReadAtUnevenIntervals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w := new(clockWatcher)
	c, _ := unextendedUnderFakeClock(t, "+0 x1.05", w)
	l := heldFor(t, c, "clock-uneven", 3*time.Second) // margin 32ms
	for i := range 8 {
		if err := l.Extend(ctx, 3*time.Second); err != nil {
			t.Fatalf("Extend %d = %v, want nil", i, err)
		}
		pause := 100 * time.Millisecond // 4% beyond the default rate: 4ms
		if i%2 == 1 {
			pause = 2 * time.Second // 80ms
		}
		time.Sleep(pause) // (the pace of the extensions, not a wait)
	}
	if err := l.Extend(ctx, 3*time.Second); err != nil {
		t.Fatalf("Extend = %v, want nil", err)
	}
	switch got := w.clockEvents(); {
	case len(got) == 0:
		t.Errorf("a server clock 5%% fast: told nothing, want told once it runs ahead")
	case len(got) > 1:
		t.Errorf("a server clock 5%% fast: told %d times, want once: %v", len(got), got)
	}
}

// Through a driver, which does not say which master answered, a Cluster's
// clock is not watched, whichever way its releases are announced: masters
// whose clocks differ steadily, read as one server, would be told of as a
// step at each turn between them.
func TestObserverNotToldOfADriversClusterMastersWhoseClocksDiffer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster")
	}
	leakcheck.Check(t)
	opts, set := redistest.FakeClock(t)
	set("+5s") // one master's clock 5s ahead of the others', from its start
	nodes := redistest.StartClusterOf(t, 3, 0, func(i int) []redistest.Option {
		if i == 0 {
			return opts
		}
		return []redistest.Option{redistest.Valkey(t)}
	})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	ctx := t.Context()
	for _, sharded := range []bool{true, false} {
		w := new(clockWatcher)
		c, err := dlock.NewFrom(goredisdriver.Conn(cc), dlock.WithShardedPubSub(sharded), dlock.WithAutoExtend(false),
			dlock.WithObserver(w.observer()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		// One lease on the master ahead, one on another.
		var ahead, other *dlock.Lock
		for i := 0; i < 64 && (ahead == nil || other == nil); i++ {
			name := fmt.Sprint("clock-driver-cluster-", sharded, "-", i)
			l, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(3*time.Second))
			if err != nil {
				t.Fatalf("TryAcquire(%s) = %v, want nil", name, err)
			}
			m, err := cc.MasterForKey(ctx, l.Key())
			if err != nil {
				t.Fatalf("MasterForKey(%s) = %v", l.Key(), err)
			}
			switch onAhead := m.Options().Addr == nodes[0].Addr(); {
			case onAhead && ahead == nil:
				ahead = l
			case !onAhead && other == nil:
				other = l
			default:
				l.Release(ctx)
				continue
			}
			t.Cleanup(func() { l.Release(context.Background()) })
		}
		if ahead == nil || other == nil {
			t.Fatalf("64 names: a lease on the master ahead %v, on another %v; want both", ahead != nil, other != nil)
		}
		for range 3 {
			for _, l := range []*dlock.Lock{ahead, other} {
				if err := l.Extend(ctx, 3*time.Second); err != nil {
					t.Fatalf("Extend(%s) = %v, want nil", l.Key(), err)
				}
			}
		}
		if got := w.clockEvents(); len(got) != 0 {
			t.Errorf("sharded pub/sub %v: after extensions on two masters whose clocks differ by 5s, each steady: told %d times (first %v), want never",
				sharded, len(got), got[0])
		}
	}
}

// An extension the replica does not acknowledge in time fails as such
// (ErrReplicaAck), the lease still held, whether or not an Observer of
// the clock makes its reply carry the server's time; acknowledged again,
// it succeeds.
func TestUnacknowledgedExtensionFailsAsSuchWhetherOrNotTheClockIsWatched(t *testing.T) {
	t.Parallel()
	long(t)
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fast := redistest.Args("--repl-diskless-sync-delay", "0")
	master := redistest.Start(t, redistest.TCP(), fast)
	link := redistest.NewProxy(t, master.Addr()) // replication crosses it
	replica := redistest.Start(t, redistest.TCP(), fast, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(link.Port())))
	rdb := master.Client(t)
	for _, watched := range []bool{false, true} {
		if !replicaAcks(ctx, master, replica) {
			t.Fatal("the replica never synced")
		}
		opts := []dlock.Option{dlock.WithReplicaAck(1, 2*time.Second), dlock.WithAutoExtend(false), dlock.LeaseTTL(5 * time.Second)}
		w := new(clockWatcher)
		if watched {
			opts = append(opts, dlock.WithObserver(w.observer()))
		}
		c := newClient(t, rdb, opts...)
		for _, kind := range []string{"plain", "fair"} {
			name := fmt.Sprint("acked-extend-", kind, "-", watched)
			var l *dlock.Lock
			var err error
			if kind == "plain" {
				l, err = newClient(t, rdb, append(opts, dlock.WithUnfair(nil))...).TryAcquire(ctx, name)
			} else {
				l, err = c.TryAcquire(ctx, name)
			}
			if err != nil {
				t.Fatalf("clock watched %v, %s: acknowledged TryAcquire = %v", watched, kind, err)
			}
			if err := l.Extend(ctx, 3*time.Second); err != nil {
				t.Errorf("clock watched %v, %s: acknowledged Extend = %v", watched, kind, err)
			}
			link.Stall()
			// (4s: it moves the deadline, so there is a write to acknowledge;
			// one that moved nothing, sent within the millisecond of the last,
			// would have nothing to wait for.)
			if err := l.Extend(ctx, 4*time.Second); !errors.Is(err, dlock.ErrReplicaAck) || errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("clock watched %v, %s: Extend with replication stalled = %v, want ErrReplicaAck, not ErrNotHeld", watched, kind, err)
			}
			if err := l.Err(); err != nil {
				t.Errorf("clock watched %v, %s: Err() after an unacknowledged extension = %v, want nil", watched, kind, err)
			}
			link.Cut()
			if !replicaAcks(ctx, master, replica) {
				t.Fatal("the replica never synced again")
			}
			if err := l.Extend(ctx, 3*time.Second); err != nil {
				t.Errorf("clock watched %v, %s: Extend acknowledged again = %v, want nil", watched, kind, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("clock watched %v, %s: Release = %v", watched, kind, err)
			}
		}
		if got := w.clockEvents(); len(got) != 0 {
			t.Errorf("clock watched %v: told %v, want nothing (one server, its clock steady)", watched, got)
		}
	}
}
