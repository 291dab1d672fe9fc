package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// jeopardyTrace records the Jeopardy and Lost events a Client's observers
// are told of, in order.
type jeopardyTrace struct {
	mu  sync.Mutex
	ops []dlock.Op
}

func (tr *jeopardyTrace) observer() dlock.Observer {
	add := func(_ context.Context, e *dlock.Event) {
		tr.mu.Lock()
		tr.ops = append(tr.ops, e.Op)
		tr.mu.Unlock()
	}
	return dlock.Observer{Jeopardy: add, Lost: add}
}

func (tr *jeopardyTrace) seen() []dlock.Op {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]dlock.Op(nil), tr.ops...)
}

// isOpen reports whether ch is still open.
func isOpen(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// jeopardyFault is a way to make the watchdog's extensions fail while the
// lease is still valid, and to end it.
type jeopardyFault struct {
	name        string
	start, heal func()
}

// jeopardyLease returns a lease with the watchdog on, under a 5s TTL (the
// last third of it, from jeopardy to the loss, is the time a test has to
// end the fault and see the next extension through on a loaded machine), and
// the faults that put it at risk: a stalled connection (the extension
// goes unanswered) and a frozen server (SIGSTOP; the extension fails at a
// short read timeout).
func jeopardyLease(t *testing.T, stall bool, name string) (*dlock.Lock, *jeopardyTrace, jeopardyFault) {
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	f := jeopardyFault{name: "frozen server", start: s.Pause, heal: s.Resume}
	opts := &redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1}
	if stall {
		p := redistest.NewProxy(t, s.Addr())
		f = jeopardyFault{name: "stalled connection", start: p.Stall, heal: p.Cut}
		opts = &redis.Options{Addr: p.Addr(), ReadTimeout: time.Minute, MaxRetries: -1}
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	tr := &jeopardyTrace{}
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithObserver(tr.observer()))
	l, err := c.TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return l, tr, f
}

// A watchdog extension that fails, or goes unanswered, while the lease is
// still valid closes Jeopardy before the loss, and tells the observers
// once; the loss follows at the validity's end.
func TestJeopardyToldBeforeTheLossOfAnUnextendableLease(t *testing.T) {
	t.Parallel()
	for _, stall := range []bool{true, false} {
		l, tr, f := jeopardyLease(t, stall, "jeopardy-lost")
		jeop := l.Jeopardy()
		f.start()
		select {
		case <-jeop:
		case <-time.After(10 * time.Second):
			f.heal()
			t.Fatalf("%s: no jeopardy", f.name)
		}
		if err := l.Err(); err != nil {
			t.Errorf("%s: the lease was lost (%v) before jeopardy was told", f.name, err)
		}
		if !closedWithin(l.Done(), 10*time.Second) {
			t.Errorf("%s: the lease was never lost", f.name)
		}
		f.heal()
		if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Err = %v, want ErrNotHeld", f.name, err)
		}
		waitFor(5*time.Second, func() bool { return len(tr.seen()) >= 2 }) // (Lost is told after Done closes)
		if got := tr.seen(); len(got) != 2 || got[0] != dlock.OpJeopardy || got[1] != dlock.OpLost {
			t.Errorf("%s: observers told %v, want [jeopardy lost]", f.name, got)
		}
		l.Release(t.Context())
	}
}

// A lease at risk that a later extension renews recovers: Jeopardy then
// returns a new, open channel, the validity moves on, and the next
// failure is a new episode.
func TestJeopardyEndsWhenALaterExtensionSucceeds(t *testing.T) {
	t.Parallel()
	for _, stall := range []bool{true, false} {
		l, tr, f := jeopardyLease(t, stall, "jeopardy-recovers")
		lag := redistest.TimerLag()
		t.Cleanup(func() { lag() })
		f.start()
		if !closedWithin(l.Jeopardy(), 10*time.Second) {
			f.heal()
			t.Fatalf("%s: no jeopardy", f.name)
		}
		risky := l.ValidUntil()
		f.heal()
		if !waitFor(10*time.Second, func() bool { return isOpen(l.Jeopardy()) }) {
			// Jeopardy comes with about a third of the lease time left (half
			// of what the unanswered extension had): the heal and the
			// retried extension that follows it must both come within it.
			if lostToLag(t, l.Err(), lag(), 5*time.Second) {
				l.Release(t.Context())
				continue
			}
			t.Fatalf("%s: the lease never recovered (Err %v)", f.name, l.Err())
		}
		if err := l.Err(); err != nil || !l.ValidUntil().After(risky) {
			t.Errorf("%s: after recovery Err = %v, validity %v (at risk: %v)", f.name, err, l.ValidUntil(), risky)
		}
		f.start() // a second episode
		if !closedWithin(l.Jeopardy(), 10*time.Second) {
			t.Errorf("%s: no second jeopardy", f.name)
		}
		f.heal()
		if err := l.Release(t.Context()); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Release = %v", f.name, err)
		}
		if got := tr.seen(); len(got) < 2 || got[0] != dlock.OpJeopardy || got[1] != dlock.OpJeopardy {
			t.Errorf("%s: observers told %v, want a jeopardy per episode", f.name, got)
		}
	}
}

// A lease whose extensions all succeed is never told in jeopardy; its
// channel closes at the release.
func TestNoJeopardyWhileExtensionsSucceed(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	tr := &jeopardyTrace{}
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond), dlock.WithObserver(tr.observer()))
	l, err := c.TryAcquire(t.Context(), "jeopardy-healthy")
	if err != nil {
		t.Fatal(err)
	}
	jeop := l.Jeopardy()
	for i := range 3 { // three extensions
		before := l.ValidUntil()
		if !waitFor(5*time.Second, func() bool { return l.ValidUntil().After(before) }) {
			t.Fatalf("extension %d never came", i)
		}
	}
	if !isOpen(jeop) || !isOpen(l.Jeopardy()) || len(tr.seen()) != 0 {
		t.Errorf("a healthy lease told in jeopardy (observers: %v)", tr.seen())
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if isOpen(jeop) {
		t.Error("Jeopardy still open after the release")
	}
}

// Close stops the watchdog, so a held lease then ends at its validity: its
// holder is told it is at risk before that loss, not only at it.
func TestJeopardyToldBeforeTheLossOfALeaseCloseStoppedExtending(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	_, rdb := setup(t)
	tr := &jeopardyTrace{}
	c, err := dlock.New(rdb, dlock.LeaseTTL(6*time.Second), dlock.WithObserver(tr.observer()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "closed")
	if err != nil {
		t.Fatal(err)
	}
	j := l.Jeopardy()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var errAtRisk error
	if !waitFor(20*time.Second, func() bool {
		if isOpen(j) {
			return false
		}
		errAtRisk = l.Err()
		return true
	}) {
		t.Fatal("Jeopardy still open 20s after Close, with a 6s lease")
	}
	if errAtRisk != nil {
		t.Errorf("Jeopardy closed only at the loss (%v): the holder was not told before it", errAtRisk)
	}
	if ops := tr.seen(); len(ops) == 0 || ops[0] != dlock.OpJeopardy {
		t.Errorf("observers told %v, want a jeopardy first", ops)
	}
	l.Release(ctx)
}

// A Jeopardy channel asked for while the lease is at risk times every
// later watchdog extension, even when the extension then under way ends
// the risk: a later one left unanswered closes the next channel before
// the loss, not only at it.
func TestJeopardyAskedForDuringARecoveryTimesLaterExtensions(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var (
		held atomic.Pointer[dlock.Lock]
		runs atomic.Int32
		jeop = make(chan (<-chan struct{}), 1)
	)
	start := func(ctx context.Context, e *dlock.Event) context.Context {
		l := held.Load()
		if e.Op != dlock.OpExtend || !e.Auto || l == nil {
			return ctx
		}
		switch runs.Add(1) {
		case 1: // it fails: the lease is at risk
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			return ctx
		case 2: // asked for at risk, while the extension that ends the risk runs
			l.Jeopardy()
		case 3: // left unanswered
			p.Stall()
			jeop <- l.Jeopardy()
		}
		return ctx
	}
	c := newClient(t, rdb, dlock.LeaseTTL(6*time.Second), dlock.WithObserver(dlock.Observer{Start: start}))
	l, err := c.TryAcquire(t.Context(), "jeopardy-after-recovery")
	if err != nil {
		t.Fatal(err)
	}
	held.Store(l)
	var j <-chan struct{}
	select {
	case j = <-jeop:
	case <-time.After(30 * time.Second):
		t.Fatalf("no third extension (runs %d, Err %v)", runs.Load(), l.Err())
	}
	checkToldBeforeTheLoss(t, l, j, p)
}

// checkToldBeforeTheLoss checks that j, the Jeopardy of the 6s lease l
// whose extension p leaves unanswered, closes while l is still held; then
// it ends the stall and releases l.
func checkToldBeforeTheLoss(t *testing.T, l *dlock.Lock, j <-chan struct{}, p *redistest.Proxy) {
	t.Helper()
	var errAtRisk error
	closed := waitFor(20*time.Second, func() bool {
		if isOpen(j) {
			return false
		}
		errAtRisk = l.Err()
		return true
	})
	p.Cut()
	if !closed {
		t.Fatal("Jeopardy still open 20s into an unanswered extension of a 6s lease")
	}
	if errAtRisk != nil {
		t.Errorf("Jeopardy closed only at the loss (%v): the holder was not told before it", errAtRisk)
	}
	l.Release(t.Context())
}

// stallableLease returns a Client with opts and no Observer of its own, a
// lease it holds with the watchdog on under a 6s TTL (its first run at
// 2s), and the proxy between them, whose Stall leaves its extensions
// unanswered.
func stallableLease(t *testing.T, name string, opts ...dlock.Option) (*dlock.Client, *dlock.Lock, *redistest.Proxy) {
	t.Helper()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, append([]dlock.Option{dlock.LeaseTTL(6 * time.Second)}, opts...)...)
	l, err := c.TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return c, l, p
}

// Jeopardy asked for before the watchdog's first run, or after a run,
// with no Observer that has Jeopardy, times the later runs: one left
// unanswered closes it before the loss, not only at it.
func TestJeopardyAskedForWithoutAnObserverTimesLaterExtensions(t *testing.T) {
	t.Parallel()
	for _, afterARun := range []bool{false, true} {
		t.Run(map[bool]string{false: "before the first run", true: "after a run"}[afterARun], func(t *testing.T) {
			t.Parallel()
			_, l, p := stallableLease(t, "jeopardy-without-observer")
			if afterARun {
				granted := l.ValidUntil()
				if !waitFor(10*time.Second, func() bool { return l.ValidUntil().After(granted) }) {
					t.Fatal("the watchdog's first run never extended the lease")
				}
			}
			j := l.Jeopardy()
			p.Stall()
			checkToldBeforeTheLoss(t, l, j, p)
		})
	}
}

// An Observer with Jeopardy added by Client.Observe after a lease was
// taken is told when a later watchdog extension of it goes unanswered,
// before the loss.
func TestJeopardyObserverAddedLaterIsToldOfAnUnansweredExtension(t *testing.T) {
	t.Parallel()
	c, l, p := stallableLease(t, "jeopardy-observed-later")
	told := make(chan error, 1)
	c.Observe(dlock.Observer{Jeopardy: func(_ context.Context, e *dlock.Event) {
		select {
		case told <- l.Err():
		default:
		}
	}})
	p.Stall()
	select {
	case err := <-told:
		if err != nil {
			t.Errorf("the Observer was told of the jeopardy only at the loss (%v)", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("the Observer added later was not told of an unanswered extension within 20s")
	}
	p.Cut()
	l.Release(t.Context())
}

// Jeopardy asked for while a watchdog extension is under way, with no
// Observer that has Jeopardy, times that extension too: left unanswered,
// it closes the channel before the loss, not only at it.
func TestJeopardyAskedForDuringAnExtensionTimesThatExtension(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	_, l, p := stallableLease(t, "jeopardy-asked-mid-extension", dlock.WithObserver(dlock.Observer{
		Start: func(ctx context.Context, e *dlock.Event) context.Context {
			if e.Op == dlock.OpExtend && e.Auto {
				select {
				case started <- struct{}{}:
				default:
				}
			}
			return ctx
		},
	}))
	p.Stall()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog's first run did not start within 10s")
	}
	checkToldBeforeTheLoss(t, l, l.Jeopardy(), p)
}

// The watchdog's next run comes a third of the lease after the last run
// was sent, not after it was answered: the validity an extension gives
// counts from its send (and the first run's from the acquisition's send,
// as the lease's validity does). So a lease whose round trip is longer
// than a third of it is still kept (timed from the answers, each
// extension came a round trip later than the one before allowed, and a
// lease over such a round trip ran out within a few runs). A run sent a
// third of the lease or more after the previous answer is one timed from
// that answer, however slow the machine (a timer never fires early); a
// lease lost at a run sent sooner was lost to round trips longer than the
// lease allows, which a loaded machine adds: reported, not failed.
func TestWatchdogKeepsALeaseWhoseRoundTripIsAThirdOfIt(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	const ttl = 1200 * time.Millisecond
	c := newClient(t, rdb, dlock.WithUnfair(nil))
	near, err := c.TryAcquire(t.Context(), "near") // (the scripts loaded before the delay)
	if err != nil {
		t.Fatal(err)
	}
	near.Release(t.Context())
	var runs roundTrips // the acquisition's, then the watchdog's
	c.Observe(runs.observer())
	p.Delay(240*time.Millisecond, 240*time.Millisecond) // a 480ms round trip: more than a third of the lease
	l, err := c.TryAcquire(t.Context(), "far-away", dlock.LeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	lost := waitFor(6*time.Second, func() bool { return l.Err() != nil })
	rt, now := runs.list(), time.Now()
	late := 0 // runs sent a third of the lease or more after the previous answer
	for i := 1; i < len(rt); i++ {
		if rt[i].sent.Sub(rt[i-1].answered) >= ttl/3 {
			late++
		}
	}
	if late > (len(rt)-1)/2 {
		t.Errorf("%d of %d watchdog runs were sent a third of the lease or more after the previous answer: timed from the answers\n%v", late, len(rt)-1, rt)
	}
	if !lost {
		return
	}
	last := rt[len(rt)-1]
	if last.err == nil && !last.answered.IsZero() { // no run in flight: the next one was never sent
		last = roundTrip{sent: now}
	} else {
		rt = rt[:len(rt)-1]
	}
	if prev := rt[len(rt)-1]; last.sent.Sub(prev.answered) >= ttl/3 {
		t.Fatalf("a 1.2s lease over a 480ms round trip was lost (%v) at a run not sent within a third of the lease of the previous answer\n%v", l.Err(), runs.list())
	}
	t.Logf("lost (%v) to round trips longer than the lease allows (the machine's), the runs timed from their sends:\n%v", l.Err(), runs.list())
}

// roundTrip is one acquisition or extension as an Observer sees it: when
// it started and when it ended, and how.
type roundTrip struct {
	sent, answered time.Time
	err            error
}

func (r roundTrip) String() string {
	return fmt.Sprintf("%s–%s %v", r.sent.Format("05.000"), r.answered.Format("05.000"), r.err)
}

// roundTrips records a Client's acquisitions and its watchdog's extensions
// (one lease's, one after another), in order.
type roundTrips struct {
	mu   sync.Mutex
	runs []roundTrip
}

func (r *roundTrips) observer() dlock.Observer {
	ours := func(e *dlock.Event) bool { return e.Op == dlock.OpAcquire || e.Op == dlock.OpExtend && e.Auto }
	return dlock.Observer{
		Start: func(ctx context.Context, e *dlock.Event) context.Context {
			if ours(e) {
				r.mu.Lock()
				r.runs = append(r.runs, roundTrip{sent: time.Now()})
				r.mu.Unlock()
			}
			return ctx
		},
		End: func(_ context.Context, e *dlock.Event) {
			if ours(e) {
				r.mu.Lock()
				r.runs[len(r.runs)-1].answered, r.runs[len(r.runs)-1].err = time.Now(), e.Err
				r.mu.Unlock()
			}
		},
	}
}

func (r *roundTrips) list() []roundTrip {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]roundTrip(nil), r.runs...)
}
