package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// gate is a go-redis hook that, once armed, holds the next command (or
// pipeline) before it is sent until opened: a call of a Lock kept in
// flight for as long as the test needs, with its turn taken.
type gate struct {
	armed atomic.Bool
	in    chan struct{} // closed when the held command arrives
	out   chan struct{} // closed by open: the held command goes on
	once  sync.Once
}

// gated starts a server and returns a client of it through a gate, and a
// Client of that without a watchdog (no extension but the test's).
func gated(t *testing.T) (*redis.Client, *gate, *dlock.Client) {
	_, rdb := setup(t)
	g := &gate{in: make(chan struct{}), out: make(chan struct{})}
	t.Cleanup(g.open)
	rdb.AddHook(g)
	return rdb, g, newClient(t, rdb, dlock.WithAutoExtend(false))
}

func (g *gate) open() { g.once.Do(func() { close(g.out) }) }

// arm makes the gate hold the next command, once more.
func (g *gate) arm() {
	g.in, g.out, g.once = make(chan struct{}), make(chan struct{}), sync.Once{}
	g.armed.Store(true)
}

func (g *gate) hold() {
	if !g.armed.CompareAndSwap(true, false) {
		return
	}
	close(g.in)
	select {
	case <-g.out:
	case <-time.After(30 * time.Second): // (bounded: the test opens it long before)
	}
}

// held waits until the armed command arrives.
func (g *gate) held(t *testing.T) {
	t.Helper()
	select {
	case <-g.in:
	case <-time.After(10 * time.Second):
		t.Fatal("the held call's command never came")
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { g.hold(); return next(ctx, cmd) }
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { g.hold(); return next(ctx, cmds) }
}

// returned waits for a call's error, for 10s at most.
func returned(t *testing.T, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", what)
		return nil
	}
}

// endedHeldContext is a context of l's, derived from its Context, that has
// ended: a Release under it still goes out, as a clean-up.
func endedHeldContext(l *dlock.Lock) context.Context {
	ctx, cancel := context.WithCancel(l.Context())
	cancel()
	return ctx
}

// A Lock's calls take turns by sort: an extension in flight holds up
// neither a Release nor a Fence. A Release under an ended context of the
// Lock's own still goes out, and a Fence already issued is given under an
// ended one.
func TestReleaseAndFenceDoNotWaitForAnExtensionInFlight(t *testing.T) {
	t.Parallel()
	rdb, g, c := gated(t)
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "turns-ext")
	if err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(t, l)
	g.armed.Store(true)
	ext := make(chan error, 1)
	go func() { ext <- l.Extend(ctx, 5*time.Second) }()
	g.held(t)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if f, err := l.Fence(ended); err != nil || f != fence {
		t.Errorf("Fence under an ended context, an extension in flight = %d, %v; want %d, nil", f, err, fence)
	}
	rel := make(chan error, 1)
	go func() { rel <- l.Release(endedHeldContext(l)) }()
	if err := returned(t, rel, "a Release while an extension is in flight"); err != nil {
		t.Errorf("Release under an ended context of the Lock's, an extension in flight: %v", err)
	}
	if n := rdb.Exists(ctx, l.Key()).Val(); n != 0 {
		t.Errorf("the lock key is still there after the Release (%d)", n)
	}
	g.open()
	returned(t, ext, "the held extension") // (released meanwhile: its outcome is the release's)
	if err := l.Release(ctx); err != nil {
		t.Errorf("a repeated Release: %v", err)
	}
}

// A Downgrade takes every turn of its hold: while it is in flight, a
// Release, a Fence and an extension of the hold wait for it (and leave,
// unsent, when their contexts end); once it returns, each goes out.
func TestDowngradeHoldsEveryTurnUntilItReturns(t *testing.T) {
	t.Parallel()
	rdb, g, c := gated(t)
	ctx := t.Context()
	const name = "turns-down"
	rw := newRW(t, c, name)
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(t, w)
	g.armed.Store(true)
	down := make(chan error, 1)
	go func() { down <- rw.Downgrade(ctx, w) }()
	g.held(t)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Release(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Release under an ended context, a Downgrade in flight = %v, want context.Canceled", err)
	}
	if _, err := w.Fence(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Fence under an ended context, a Downgrade in flight = %v, want context.Canceled", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if err := w.Extend(short, 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend whose context ends while a Downgrade is in flight = %v, want context.DeadlineExceeded", err)
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 1 {
		t.Errorf("holds while the Downgrade is in flight: %v, want the write alone", m)
	}
	g.open()
	if err := returned(t, down, "the held Downgrade"); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	if f, err := w.Fence(ctx); err != nil || f != fence {
		t.Errorf("Fence after the Downgrade = %d, %v; want %d, nil", f, err, fence)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("Extend after the Downgrade: %v", err)
	}
	if err := w.Release(endedHeldContext(w)); err != nil {
		t.Errorf("Release after the Downgrade: %v", err)
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 0 {
		t.Errorf("holds after the Release: %v, want none", m)
	}
}

// Many goroutines call Extend, Fence and Downgrade on one hold at once,
// beside its watchdog, under contexts that end before, while or after
// they wait for their turn: once all have returned, no turn is left taken
// (a later Extend, Fence and Release go out), and none was held twice
// (the race detector watches the fields each turn guards).
func TestLockTurnsAreFreeAfterAStormOfCalls(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "turns-storm"
	c := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	rw := newRW(t, c, name)
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(t, w)
	const workers, calls = 6, 40
	var wg sync.WaitGroup
	errc := make(chan error, workers*calls)
	for i := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for range calls {
				cctx, cancel := context.WithTimeout(ctx, []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 5 * time.Second}[r.IntN(4)])
				switch r.IntN(3) {
				case 0:
					if f, err := w.Fence(cctx); err == nil && f != fence {
						errc <- fmt.Errorf("Fence = %d, want %d", f, fence)
					}
				case 1:
					w.Extend(cctx, 2*time.Second)
				case 2:
					err := rw.Downgrade(cctx, w)
					if errors.Is(err, dlock.ErrNotHeld) {
						errc <- fmt.Errorf("Downgrade: %w", err)
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if f, err := w.Fence(wait); err != nil || f != fence {
		t.Errorf("Fence after the storm = %d, %v; want %d, nil", f, err, fence)
	}
	if err := w.Extend(wait, 2*time.Second); err != nil {
		t.Errorf("Extend after the storm: %v", err)
	}
	if err := rw.Downgrade(wait, w); err != nil && !errors.Is(err, dlock.ErrInvalid) { // (a read by now, or still a write)
		t.Errorf("Downgrade after the storm: %v", err)
	}
	if err := w.Release(endedHeldContext(w)); err != nil {
		t.Errorf("Release after the storm: %v", err)
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 0 {
		t.Errorf("holds after the Release: %v, want none", m)
	}
}

// asked is a go-redis hook that records, in the order they are sent, the
// arguments among want of the commands sent.
type asked struct {
	want []int64
	mu   sync.Mutex
	got  []int64
}

func (a *asked) note(cmd redis.Cmder) {
	for _, v := range cmd.Args() {
		if ms, ok := v.(int64); ok && slices.Contains(a.want, ms) {
			a.mu.Lock()
			a.got = append(a.got, ms)
			a.mu.Unlock()
		}
	}
}

// take returns what was recorded, and forgets it.
func (a *asked) take() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.got
	a.got = nil
	return got
}

func (a *asked) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *asked) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { a.note(cmd); return next(ctx, cmd) }
}

func (a *asked) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			a.note(cmd)
		}
		return next(ctx, cmds)
	}
}

// A call waiting for its turn gets it when the call that has it gives it
// back, before a call that comes later: an Extend that waits for one in
// flight is sent before an Extend called once that one returned (the
// last asked for sets the lease), and no stream of later calls keeps a
// waiting one out.
func TestAWaitingExtensionGoesBeforeALaterOne(t *testing.T) {
	t.Parallel()
	rdb, g, c := gated(t)
	a := &asked{want: []int64{7001, 9001}} // (the two extensions' lease times, in ms)
	rdb.AddHook(a)
	ctx := t.Context()
	for round := range 10 {
		l, err := c.TryAcquire(ctx, "turns-order")
		if err != nil {
			t.Fatal(err)
		}
		g.arm()
		first := make(chan error, 2)
		go func() {
			first <- l.Extend(ctx, 5*time.Second)
			first <- l.Extend(ctx, 9001*time.Millisecond) // (comes once the first returned)
		}()
		g.held(t)
		waiting := make(chan error, 1)
		go func() { waiting <- l.Extend(ctx, 7001*time.Millisecond) }()
		if !waitFor(10*time.Second, func() bool { return countGoroutines(t, "(*Lock).take+") > 0 }) {
			t.Fatal("the second extension never waited for its turn")
		}
		g.open()
		for _, err := range []error{returned(t, first, "the first extension"), returned(t, first, "the later extension"),
			returned(t, waiting, "the waiting extension")} {
			if err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
		if got := a.take(); !slices.Equal(got, a.want) {
			t.Errorf("round %d: the extensions were sent asking %v ms, want the one waiting first: %v", round, got, a.want)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Downgrade of no hold of the lock (nil, a plain lock of the same name,
// another lock's write hold) is refused with ErrInvalid, taking no turn
// it keeps: the plain lock's Fence, Extend and Release still go out.
func TestDowngradeOfNoHoldOfItIsInvalid(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	rw, other := newRW(t, c, "turns-inv"), newRW(t, c, "turns-inv-other")
	plain, err := c.TryAcquire(ctx, "turns-inv-plain")
	if err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(t, plain)
	w, err := other.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, l := range map[string]*dlock.Lock{"nil": nil, "a plain lock": plain, "another lock's write hold": w} {
		if err := rw.Downgrade(ctx, l); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Downgrade of %s = %v, want ErrInvalid", what, err)
		}
	}
	plainRW := newRW(t, c, "turns-inv-plain")
	if err := plainRW.Downgrade(ctx, plain); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Downgrade of a plain lock of the same name = %v, want ErrInvalid", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if f, err := plain.Fence(ended); err != nil || f != fence {
		t.Errorf("Fence after the refused Downgrade = %d, %v; want %d, nil", f, err, fence)
	}
	if err := plain.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("Extend after the refused Downgrade: %v", err)
	}
	for _, l := range []*dlock.Lock{plain, w} {
		if err := l.Release(endedHeldContext(l)); err != nil {
			t.Errorf("Release after the refused Downgrade: %v", err)
		}
	}
}

// A loss that falls due while a call waits for its turn (a Release, a
// first Fence or a Downgrade, behind a Downgrade or a first Fence held in
// flight) is told when it falls due, to Done and the Lost observers, not
// when the waiting call gets its turn, which then reports the loss (a
// Fence, unless it is given the fence the held one got).
func TestALossDueWhileACallWaitsForItsTurnIsToldWhenDue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ holds, waits string }{
		{"Downgrade", "Release"}, {"Downgrade", "Fence"}, {"Fence", "Downgrade"}, {"Fence", "Fence"},
	} {
		t.Run(tc.holds+"/"+tc.waits, func(t *testing.T) {
			t.Parallel()
			// A machine too loaded to make both calls within the lease
			// tries again with a lease twice as long.
			for ttl := 300 * time.Millisecond; !lossToldWhileWaiting(t, tc.holds, tc.waits, ttl); ttl *= 2 {
				if ttl >= 5*time.Second {
					t.Fatalf("a %v lease ended before both calls were made", ttl)
				}
				t.Logf("a %v lease ended before both calls were made: again with %v", ttl, 2*ttl)
			}
		})
	}
}

// lossToldWhileWaiting runs TestALossDueWhileACallWaitsForItsTurnIsToldWhenDue
// with a lease of ttl; false if the lease ended before both calls were made.
func lossToldWhileWaiting(t *testing.T, holds, waits string, ttl time.Duration) bool {
	_, rdb := setup(t)
	g := &gate{in: make(chan struct{}), out: make(chan struct{})}
	defer g.open()
	rdb.AddHook(g)
	lost := make(chan struct{}, 1)
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(ttl),
		dlock.WithObserver(dlock.Observer{Lost: func(context.Context, *dlock.Event) { lost <- struct{}{} }}))
	ctx := t.Context()
	rw := newRW(t, c, "turns-due-"+holds+"-"+waits)
	w, err := rw.Writer().TryAcquire(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) && strings.Contains(err.Error(), tooLate) {
		return false // (its reply came after the lease had ended)
	} else if err != nil {
		t.Fatal(err)
	}
	call := func(what string) error {
		switch what {
		case "Downgrade":
			return rw.Downgrade(ctx, w)
		case "Fence":
			_, err := w.Fence(ctx)
			return err
		}
		return w.Release(ctx)
	}
	g.armed.Store(true)
	holding, waiting := make(chan error, 1), make(chan error, 1)
	go func() { holding <- call(holds) }()
	select {
	case <-g.in:
	case err := <-holding: // (sent nothing: the lease had ended)
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("the held %s = %v, sent nothing", holds, err)
		}
		return false
	}
	go func() { waiting <- call(waits) }()
	if !waitFor(10*time.Second, func() bool { return countGoroutines(t, "(*Lock).take+") > 0 || len(waiting) > 0 }) {
		t.Fatal("the second call never waited for its turn")
	}
	if len(waiting) > 0 { // (it found the lease ended before it waited)
		if err := <-waiting; !errors.Is(err, dlock.ErrNotHeld) || time.Now().Before(w.ValidUntil()) {
			t.Fatalf("the second %s = %v before it waited for its turn, with the lease valid for %v", waits, err, time.Until(w.ValidUntil()))
		}
		g.open()
		returned(t, holding, "the held "+holds)
		return false
	}
	select {
	case <-lost:
	case <-time.After(time.Until(w.ValidUntil()) + 5*time.Second):
		t.Fatal("the loss was not told to the Lost observer while the call waited for its turn")
	}
	select {
	case <-w.Done():
	default:
		t.Error("Done is open after the loss was told")
	}
	g.open()
	// (A fence Redis issued before the lease ended there is returned,
	// and given to a Fence that waited for it.)
	herr := returned(t, holding, "the held "+holds)
	shared := holds == "Fence" && waits == "Fence" && herr == nil
	if err := returned(t, waiting, "the waiting "+waits); !errors.Is(err, dlock.ErrNotHeld) && !(shared && err == nil) {
		t.Errorf("the waiting %s = %v, want ErrNotHeld", waits, err)
	}
	return true
}
