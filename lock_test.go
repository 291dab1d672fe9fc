package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

func TestTryAcquireRelease(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		t.Run(map[bool]string{false: "unfair", true: "fair"}[fair], func(t *testing.T) { testTryAcquireRelease(t, fair) })
	}
}

func testTryAcquireRelease(t *testing.T, fair bool) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), waiting(fair))

	l, err := c.TryAcquire(ctx, "jobs")
	if err != nil {
		t.Fatalf("TryAcquire(jobs) = %v, want nil", err)
	}
	if got, want := l.Key(), "dlock:{jobs}"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
	if got := holderOf(rdb.Get(ctx, l.Key()).Val()); got != l.Token() {
		t.Errorf("GET %s = %q, want the lock's token %q", l.Key(), got, l.Token())
	}
	if len(l.Token()) < 22 {
		t.Errorf("Token() = %q, want at least 128 random bits", l.Token())
	}
	if pttl := rdb.PTTL(ctx, l.Key()).Val(); pttl <= 0 || pttl > 5*time.Second {
		t.Errorf("PTTL %s = %v, want in (0, 5s]", l.Key(), pttl)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Errorf("TTL() = %v, %v, want > 0, nil", ttl, err)
	}
	if fenceOf(t, l) <= 0 {
		t.Errorf("Fence() = %d, want > 0", fenceOf(t, l))
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err() while held = %v, want nil", err)
	}
	if _, err := c.TryAcquire(ctx, "jobs"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("second TryAcquire(jobs) = %v, want ErrNotAcquired", err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release() = %v, want nil", err)
	}
	if n := liveKeys(ctx, rdb, l.Key()); n != 0 {
		t.Errorf("EXISTS %s after Release = %d, want 0", l.Key(), n)
	}
	if !closedWithin(l.Done(), 0) {
		t.Error("Done() open after Release")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Err() after Release = %v, want ErrReleased", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("second Release() = %v, want nil (idempotent)", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Extend after Release = %v, want ErrReleased", err)
	}
	l2, err := c.TryAcquire(ctx, "jobs")
	if err != nil {
		t.Fatalf("TryAcquire(jobs) after Release = %v, want nil", err)
	}
	defer l2.Release(ctx)
	if fenceOf(t, l2) <= fenceOf(t, l) {
		t.Errorf("next Fence() = %d, want > %d", fenceOf(t, l2), fenceOf(t, l))
	}
}

// The value and the expiry must be set by one command, so that no crash
// between two commands can leave a lock key without expiry.
func TestValueAndExpirySetAtomically(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()

	conn, err := net.Dial(s.Network(), s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	conn.Write([]byte("MONITOR\r\n"))
	if line, _ := r.ReadString('\n'); !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR = %q", line)
	}

	l, err := newClient(t, rdb).TryAcquire(ctx, "atomic")
	if err != nil {
		t.Fatalf("TryAcquire = %v", err)
	}
	defer l.Release(ctx)

	var cmds []string
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	for range 20 {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		if strings.Contains(line, `"dlock:{atomic}"`) {
			cmds = append(cmds, line)
		}
		if strings.Contains(line, `"SET" "dlock:{atomic}"`) {
			break
		}
	}
	var set string
	for _, c := range cmds {
		if strings.Contains(c, `"SET" "dlock:{atomic}"`) {
			set = c
		}
		if strings.Contains(c, `"PEXPIRE"`) || strings.Contains(c, `"EXPIRE"`) {
			t.Errorf("lock expiry set by a separate command: %s", c)
		}
	}
	if !strings.Contains(set, `"PX"`) {
		t.Errorf("SET of the lock key = %q, want one SET … PX …", set)
	}
}

func TestDeadHolderStopsBlockingAfterTTL(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	holder := startHelper(t, s, "hold", "dead", 500*time.Millisecond, 0)
	if !holder.waitLine("held", 10*time.Second) {
		t.Fatal("helper process did not take the lock")
	}
	holder.kill() // no Release: the lease must run out by itself

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := newClient(t, rdb).Acquire(ctx, "dead")
	if err != nil {
		t.Fatalf("Acquire(dead) after the holder died = %v, want nil", err)
	}
	l.Release(ctx)
}

func TestExpiredHolderCannotReleaseNextHolder(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		t.Run(map[bool]string{false: "unfair", true: "fair"}[fair], func(t *testing.T) { testExpiredHolder(t, fair) })
	}
}

func testExpiredHolder(t *testing.T, fair bool) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), waiting(fair))

	a, err := c.TryAcquire(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, a.Key(), time.Millisecond) // A's lease runs out
	var b *dlock.Lock
	waitFor(2*time.Second, func() bool { b, err = c.TryAcquire(ctx, "shared"); return err == nil })
	if err != nil {
		t.Fatalf("TryAcquire after expiry = %v, want nil", err)
	}
	defer b.Release(ctx)

	if err := a.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("expired holder's Release() = %v, want ErrNotHeld", err)
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("expired holder's Extend() = %v, want ErrNotHeld", err)
	}
	if got := holderOf(rdb.Get(ctx, b.Key()).Val()); got != b.Token() {
		t.Errorf("after the old holder's Release: GET = %q, want the new holder's token %q", got, b.Token())
	}
	if err := b.Err(); err != nil {
		t.Errorf("new holder Err() = %v, want nil", err)
	}
}

// A Lock that nobody watches has no expiry timer: reading its state after
// the deadline must still report the loss, and Done must come back closed.
func TestUnwatchedLockExpires(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond))
	for _, read := range []string{"Err", "Done", "Extend", "Release"} {
		t.Run(read, func(t *testing.T) {
			l, err := tryAcquireInTime(ctx, c, "unwatched:"+read)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(l.ValidUntil()) + 10*time.Millisecond)
			switch read {
			case "Err":
				err = l.Err()
			case "Done":
				if !closedWithin(l.Done(), 0) {
					t.Fatal("Done() after the deadline is open, want closed")
				}
				err = l.Err()
			case "Extend":
				err = l.Extend(ctx, time.Second)
			case "Release":
				err = l.Release(ctx)
			}
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s after the validity deadline = %v, want ErrNotHeld", read, err)
			}
			if !closedWithin(l.Done(), 0) {
				t.Error("Done() open after the loss was reported")
			}
		})
	}
}

// Done is the Lock's Context's Done: watching it arms the expiry timer,
// which closes it at the validity deadline though nobody reads the state
// after, and a Release closes it, the Context's cause saying which.
func TestDoneClosesWithItsContextAtTheDeadlineOrRelease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond))
	l, err := tryAcquireInTime(ctx, c, "done:deadline")
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	if done != l.Context().Done() || done != l.Done() {
		t.Error("Done() is not the one channel its Context's Done returns")
	}
	if !closedWithin(done, 2*time.Second) {
		t.Fatal("Done() still open 2s into a 100ms lease nobody read, want closed by the expiry timer")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrNotHeld) {
		t.Errorf("Context's cause after the deadline = %v, want ErrNotHeld", cause)
	}
	r, err := newClient(t, rdb, dlock.WithAutoExtend(false)).TryAcquire(ctx, "done:release")
	if err != nil {
		t.Fatal(err)
	}
	done = r.Done()
	if closedWithin(done, 0) {
		t.Fatal("Done() of a held Lock is closed, want open")
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if !closedWithin(done, 0) {
		t.Error("Done() open after Release returned, want closed")
	}
	if cause := context.Cause(r.Context()); cause != dlock.ErrReleased {
		t.Errorf("Context's cause after Release = %v, want ErrReleased", cause)
	}
}

// A Lost hook may read the Lock it is told of: its Done and Context, made
// there for the first time, come back closed with the loss.
func TestLostHookMayCallDoneAndContextOfItsLock(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var l *dlock.Lock
	ready, told := make(chan struct{}), make(chan error, 1)
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond),
		dlock.WithObserver(dlock.Observer{Lost: func(context.Context, *dlock.Event) {
			<-ready
			if !closedWithin(l.Done(), 0) {
				told <- errors.New("Done() open")
				return
			}
			told <- context.Cause(l.Context())
		}}))
	l, err := tryAcquireInTime(t.Context(), c, "hooked-done")
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	select {
	case err := <-told:
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("in the Lost hook: Done closed and Context's cause = %v, want ErrNotHeld", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lost hook not done 5s after a 100ms lease ran out")
	}
}

// A loss found due by the first call of Done or Context of a Lock that no
// timer watches is told from that call, and its Lost hook may call Done
// and Context of the Lock: they come back closed with the loss, and the
// first call returns.
func TestLostHookToldByTheFirstDoneOrContextMayCallThem(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	for _, first := range []string{"Done", "Context"} {
		c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond))
		name := "hooked-first-" + first
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		told := make(chan error, 1)
		// Added after the acquisition, the hook arms no expiry timer: the
		// loss is declared by the first call below.
		c.Observe(dlock.Observer{Lost: func(context.Context, *dlock.Event) {
			if !closedWithin(l.Done(), 0) {
				told <- errors.New("Done() open")
				return
			}
			told <- context.Cause(l.Context())
		}})
		if !waitFor(2*time.Second, func() bool { return time.Now().After(l.ValidUntil()) }) {
			t.Fatal("the validity has not run out")
		}
		returned := make(chan (<-chan struct{}), 1)
		go func() {
			if first == "Done" {
				returned <- l.Done()
			} else {
				returned <- l.Context().Done()
			}
		}()
		select {
		case done := <-returned:
			if !closedWithin(done, 0) {
				t.Errorf("%s: the first call's channel is open, want closed with the loss", first)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the first call has not returned 5s after the lease ran out", first)
		}
		select {
		case err := <-told:
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s first, in the Lost hook: Done closed and Context's cause = %v, want ErrNotHeld", first, err)
			}
		default:
			t.Errorf("%s first: the Lost hook was not told from the first call", first)
		}
	}
}

// A loss found due by Release is told before Release takes its turn: a
// Lost hook that releases its Lock, told from there, does not wait for a
// turn its own caller holds; it gets the loss, and the Release that told
// it finds the lock released.
func TestLostHookToldByReleaseMayReleaseItsLock(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond))
	l, err := c.TryAcquire(ctx, "hooked-release")
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan error, 1)
	// Added after the acquisition, the hook arms no expiry timer: the loss
	// is declared by the Release below.
	c.Observe(dlock.Observer{Lost: func(context.Context, *dlock.Event) {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		told <- l.Release(hctx)
	}})
	if !waitFor(2*time.Second, func() bool { return time.Now().After(l.ValidUntil()) }) {
		t.Fatal("the validity has not run out")
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release once the Lost hook released the lock = %v, want nil (a repeat)", err)
	}
	select {
	case err := <-told:
		if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("in the Lost hook: Release = %v, want the loss (ErrNotHeld)", err)
		}
	default:
		t.Error("the Lost hook was not told from Release")
	}
}

// Fence returns a fence it issued without reading the Lock's state: a
// loss due meanwhile is not declared there, under Fence's turn, so a Lost
// hook that calls Fence of its Lock, told later, gets that fence and does
// not wait for the turn its own caller holds.
func TestLostHookMayCallFenceOfItsLockOnceIssued(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond))
	l, err := c.TryAcquire(ctx, "hooked-fence")
	if err != nil {
		t.Fatal(err)
	}
	f := fenceOf(t, l)
	type result struct {
		f   int64
		err error
	}
	told := make(chan result, 1)
	// Added after the acquisition, the hook arms no expiry timer: the loss
	// is declared when the state is next read.
	c.Observe(dlock.Observer{Lost: func(context.Context, *dlock.Event) {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		f, err := l.Fence(hctx)
		told <- result{f, err}
	}})
	if !waitFor(2*time.Second, func() bool { return time.Now().After(l.ValidUntil()) }) {
		t.Fatal("the validity has not run out")
	}
	if got, err := l.Fence(ctx); got != f || err != nil {
		t.Errorf("Fence once the validity ran out = %d, %v; want the fence issued, %d, nil", got, err, f)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Err once the validity ran out = %v, want ErrNotHeld", err)
	}
	select {
	case r := <-told:
		if r.f != f || r.err != nil {
			t.Errorf("in the Lost hook: Fence = %d, %v; want the fence issued, %d, nil", r.f, r.err, f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lost hook not done 5s after the loss was read")
	}
}

// With a Lost hook the expiry timer is armed at once: the hook hears of an
// expiry when it happens, though nobody reads the Lock's state.
func TestLostHookFiresAtExpiry(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	lost := make(chan error, 1)
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(100*time.Millisecond),
		dlock.WithObserver(dlock.Observer{Lost: func(_ context.Context, e *dlock.Event) { lost <- e.Err }}))
	l, err := tryAcquireInTime(t.Context(), c, "hooked-expiry")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Observer.Lost got %v, want ErrNotHeld", err)
		}
		if late := time.Since(l.ValidUntil()); late < 0 {
			t.Errorf("Hooks.Lost ran %v before the validity deadline", -late)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Hooks.Lost not called 5s after a 100ms lease ran out")
	}
}

// The watchdog is a timer, not a goroutine: holding many auto-extended
// locks must not hold a goroutine each.
func TestHeldLocksCostNoGoroutines(t *testing.T) {
	// Serial: it counts every goroutine in the process (a lease's timers start theirs unlabelled).
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb) // auto-extend on
	before := runtime.NumGoroutine()
	var held []*dlock.Lock
	for i := range 200 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("many:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if grew := runtime.NumGoroutine() - before; grew > 20 {
		t.Errorf("holding 200 locks added %d goroutines, want none per lock", grew)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// An acquisition whose reply arrives after the TTL (the server was frozen
// while it ran) must not be handed out as held.
func TestSlowAcquireIsNotHeld(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond))
	// Load the Client's scripts and open a pooled connection while the
	// server answers, so that the freeze holds the attempt itself (a
	// Client's first attempt loads its scripts first, off the clock).
	if warm, err := c.TryAcquire(ctx, "slow-warm"); err == nil {
		warm.Release(ctx)
	}

	s.Pause()
	go func() { time.Sleep(700 * time.Millisecond); s.Resume() }()
	l, err := c.TryAcquire(ctx, "slow")
	if err == nil {
		l.Release(ctx)
		t.Fatal("TryAcquire whose reply took longer than the TTL = nil error, want ErrNotAcquired")
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("slow TryAcquire = %v, want ErrNotAcquired", err)
	}
	if n := liveKeys(ctx, rdb, "dlock:{slow}"); n != 0 {
		t.Errorf("EXISTS after a slow attempt = %d, want 0 (undone)", n)
	}
}

// An Observer's End hears of each acquisition and of each release once: a
// failed TryAcquire ends with an error, a repeated Release is not told.
func TestObserverAcquiredReleased(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var acquired, released []string
	c := newClient(t, rdb, dlock.WithObserver(dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		switch {
		case e.Err != nil:
		case e.Op == dlock.OpAcquire:
			acquired = append(acquired, e.Name)
		case e.Op == dlock.OpRelease && e.Held > 0:
			released = append(released, e.Name)
		}
	}}))
	l, err := c.Acquire(ctx, "hooked")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "hooked"); err == nil {
		t.Fatal("second TryAcquire succeeded")
	}
	l.Release(ctx)
	l.Release(ctx) // idempotent: no second Released call
	if fmt.Sprint(acquired) != "[hooked]" || fmt.Sprint(released) != "[hooked]" {
		t.Errorf("the Observer saw acquired %v, released %v; want one of each", acquired, released)
	}
}

func TestLossSignalledWhenKeyDeleted(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var hooked error
	lostHook := make(chan struct{})
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.WithObserver(dlock.Observer{
		Lost: func(_ context.Context, e *dlock.Event) { hooked = e.Err; close(lostHook) },
	}))
	l, err := c.TryAcquire(ctx, "stolen")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, l.Key())
	if !closedWithin(l.Done(), 2*time.Second) {
		t.Fatal("Done() still open 2s after the key was deleted")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Err() = %v, want ErrNotHeld", err)
	}
	<-lostHook
	if !errors.Is(hooked, dlock.ErrNotHeld) {
		t.Errorf("Observer.Lost got %v, want ErrNotHeld", hooked)
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after loss = %v, want ErrNotHeld", err)
	}
}

// A holder cut off from Redis must learn of it before Redis can let another
// client in: its deadline is before the request was sent + TTL, and Done
// closes then, as late as this machine runs timers.
func TestLossSignalledBeforeServerExpiry(t *testing.T) {
	t.Parallel()
	for _, autoExtend := range []bool{true, false} {
		t.Run(map[bool]string{true: "watchdog", false: "no-watchdog"}[autoExtend], func(t *testing.T) {
			s, rdb := setup(t)
			ctx := t.Context()
			const ttl = time.Second
			// A wide drift margin: the expiry timer may run a little later
			// than the test's own timer due at the same moment.
			c := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WithDrift(250*time.Millisecond), dlock.WithAutoExtend(autoExtend))
			sent := &firstSend{at: make(chan time.Time, 1)}
			rdb.AddHook(sent)
			l, err := c.TryAcquire(ctx, "frozen")
			if err != nil {
				t.Fatal(err)
			}
			serverExpiry := (<-sent.at).Add(ttl) // Redis set the expiry after the request was sent
			if validUntil := l.ValidUntil(); !validUntil.Before(serverExpiry) {
				t.Fatalf("ValidUntil %v after the earliest server-side expiry", validUntil.Sub(serverExpiry))
			}
			// A timer of the test's own, due at the holder's deadline, tells
			// how late this machine runs timers.
			late := make(chan time.Duration, 1)
			time.AfterFunc(time.Until(l.ValidUntil()), func() { late <- time.Since(l.ValidUntil()) })
			done := l.Done()
			s.Pause()
			defer s.Resume()
			if !closedWithin(done, 5*time.Second) {
				t.Fatal("Done() still open 5s after the server froze")
			}
			closedAt := time.Now()
			if lag := <-late; !closedAt.Before(serverExpiry.Add(lag)) {
				t.Errorf("Done closed %v after the earliest server-side expiry (a timer due at the holder's deadline ran %v late)", closedAt.Sub(serverExpiry), lag)
			}
			if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Err() = %v, want ErrNotHeld", err)
			}
			s.Resume()
			l.Release(ctx)
		})
	}
}

func TestWrongTypeKey(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	rdb.HSet(ctx, "dlock:{typed}", "f", "v")
	c := newClient(t, rdb)
	if _, err := c.TryAcquire(ctx, "typed"); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("TryAcquire on a hash key = %v, want ErrWrongType", err)
	} else if want := `the key holds a reentrant lock (a hash), or another program's value, not a plain lock`; !strings.Contains(err.Error(), want) {
		t.Errorf("TryAcquire on a hash key = %q, want it to say %q", err, want)
	}
	for _, fair := range []bool{false, true} {
		rdb.SAdd(ctx, "dlock:{set}", "x")
		_, err := newClient(t, rdb, waiting(fair)).TryAcquire(ctx, "set")
		if want := `the key holds a set, another program's value, not a plain lock`; !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), want) {
			t.Errorf("fair=%v: TryAcquire on a set key = %v, want ErrWrongType saying %q", fair, err, want)
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(short, "typed"); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Acquire on a hash key = %v, want ErrWrongType", err)
	}
	if got := rdb.HGet(ctx, "dlock:{typed}", "f").Val(); got != "v" {
		t.Errorf("foreign key changed: HGET f = %q, want v", got)
	}
	// dlock's own kinds are named: a read-write lock's name asked for as a
	// plain lock, a lock's as a reentrant lock.
	rw, err := c.RWMutex("rw-named")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	if _, err := c.TryAcquire(ctx, "rw-named"); !errors.Is(err, dlock.ErrWrongType) ||
		!strings.Contains(err.Error(), "the key holds a read-write lock (a sorted set), not a plain lock") {
		t.Errorf("TryAcquire of a read-write lock's name = %v, want ErrWrongType naming the read-write lock", err)
	}
	l, err := c.TryAcquire(ctx, "plain-named")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = newClient(t, rdb, dlock.WithReentrant(true)).TryAcquire(ctx, "plain-named")
	if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), "the key holds a lock (a string), or another program's value, not a reentrant lock") {
		t.Errorf("a reentrant TryAcquire of a lock's name = %v, want ErrWrongType naming the lock", err)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	for name, lock := range map[string]string{"empty name": "", "oversized name": strings.Repeat("n", dlock.MaxNameLen+1),
		"name beginning with }": "}x"} {
		if _, err := c.TryAcquire(ctx, lock); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: TryAcquire = %v, want ErrInvalid", name, err)
		}
		if _, err := c.Acquire(ctx, lock); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Acquire = %v, want ErrInvalid", name, err)
		}
		if err := c.Do(ctx, lock, func(context.Context, *dlock.Lock) error { return nil }); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Do = %v, want ErrInvalid", name, err)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("DBSIZE after invalid calls = %d, want 0", n)
	}
	if l, err := c.TryAcquire(ctx, strings.Repeat("n", dlock.MaxNameLen)); err != nil {
		t.Errorf("TryAcquire with a name of MaxNameLen bytes = %v, want nil", err)
	} else {
		l.Release(ctx)
	}

	l, err := c.TryAcquire(ctx, "ttl")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, ttl := range []time.Duration{0, -time.Second, 10 * time.Millisecond} {
		if err := l.Extend(ctx, ttl); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Extend(%v) = %v, want ErrInvalid", ttl, err)
		}
	}
}

// New and NewRedlock refuse, naming it, every invalid option and every
// option that does not apply to the Client they make; a Client that exists
// is valid.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	nodes := []redis.UniversalClient{rdb, rdb, rdb} // never dialled here
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { cluster.Close() })
	newRL := func(opts ...dlock.Option) (*dlock.Client, error) { return dlock.NewRedlock(nodes, 0, opts...) }
	newC := func(opts ...dlock.Option) (*dlock.Client, error) { return dlock.New(rdb, opts...) }
	tests := []struct {
		name string
		new  func(...dlock.Option) (*dlock.Client, error)
		opts []dlock.Option
		want string // the option the message names, once
	}{
		{"zero TTL", newC, []dlock.Option{dlock.LeaseTTL(0)}, "LeaseTTL(0s)"},
		{"negative TTL", newC, []dlock.Option{dlock.LeaseTTL(-time.Second)}, "LeaseTTL(-1s)"},
		{"TTL below MinTTL", newC, []dlock.Option{dlock.LeaseTTL(10 * time.Millisecond)}, "LeaseTTL(10ms)"},
		{"negative drift", newC, []dlock.Option{dlock.WithDrift(-time.Millisecond)}, "WithDrift(-1ms)"},
		{"drift above TTL", newC, []dlock.Option{dlock.LeaseTTL(time.Second), dlock.WithDrift(time.Second)}, "WithDrift(1s)"},
		{"brace in prefix", newC, []dlock.Option{dlock.WithPrefix("a{")}, `WithPrefix("a{")`},
		{"negative replicas", newC, []dlock.Option{dlock.WithReplicaAck(-1, time.Second)}, "WithReplicaAck(-1, 1s)"},
		{"no ack timeout", newC, []dlock.Option{dlock.WithReplicaAck(1, 0)}, "WithReplicaAck(1, 0s)"},
		{"nil option", newC, []dlock.Option{dlock.LeaseTTL(time.Second), nil}, "option 2"},
		{"negative node timeout", func(o ...dlock.Option) (*dlock.Client, error) { return dlock.NewRedlock(nodes, -time.Second, o...) }, nil, "node timeout -1s"},
		{"quorum: TTL below MinTTL", newRL, []dlock.Option{dlock.LeaseTTL(time.Millisecond)}, "LeaseTTL(1ms)"},
		{"quorum: reentrant", newRL, []dlock.Option{dlock.WithReentrant(true)}, "WithReentrant(true)"},
		{"quorum: replica ack", newRL, []dlock.Option{dlock.WithReplicaAck(1, time.Second)}, "WithReplicaAck(1, 1s)"},
		{"New(nil)", func(o ...dlock.Option) (*dlock.Client, error) { return dlock.New(nil, o...) }, nil, "New"},
		{"NewRedlock(nil)", func(o ...dlock.Option) (*dlock.Client, error) { return dlock.NewRedlock(nil, 0, o...) }, nil, "NewRedlock"},
		{"NewRedlock(a nil node)", func(o ...dlock.Option) (*dlock.Client, error) {
			return dlock.NewRedlock([]redis.UniversalClient{rdb, nil, rdb}, 0, o...)
		}, nil, "NewRedlock"},
		{"New(a nil *redis.Client)", func(o ...dlock.Option) (*dlock.Client, error) { return dlock.New((*redis.Client)(nil), o...) }, nil, "New"},
		{"NewRedlock(a nil *redis.Client)", func(o ...dlock.Option) (*dlock.Client, error) {
			return dlock.NewRedlock([]redis.UniversalClient{rdb, (*redis.ClusterClient)(nil), rdb}, 0, o...)
		}, nil, "NewRedlock"},
		{"NewFrom(nil)", func(o ...dlock.Option) (*dlock.Client, error) { return dlock.NewFrom(nil, o...) }, nil, "NewFrom"},
		{"NewRedlockFrom(a nil node)", func(o ...dlock.Option) (*dlock.Client, error) {
			return dlock.NewRedlockFrom([]driver.Conn{nil}, 0, o...)
		}, nil, "NewRedlockFrom:"},
	}
	for _, tt := range tests {
		c, err := tt.new(tt.opts...)
		if c != nil || !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: = %v, %v; want no Client and ErrInvalid", tt.name, c, err)
			continue
		}
		if msg := err.Error(); strings.Count(msg, tt.want) != 1 || prefixes(msg) != 1 || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line naming %s once, with one dlock: prefix", tt.name, msg, tt.want)
		}
	}
	if _, err := dlock.New(rdb, dlock.LeaseTTL(10*time.Millisecond)); err == nil ||
		err.Error() != "dlock: invalid argument: LeaseTTL(10ms): the TTL must be at least 30ms" {
		t.Errorf("New(LeaseTTL(10ms)) = %v", err)
	}

	validOptionsMakeAClient(t, rdb, nodes, cluster)
}

// validOptionsMakeAClient: options that turn off what a Client does not
// do anyway, and unfair waiting with or without a backoff on any Client,
// are fine.
func validOptionsMakeAClient(t *testing.T, rdb *redis.Client, nodes []redis.UniversalClient, cluster *redis.ClusterClient) {
	t.Helper()
	slow := func(int) time.Duration { return time.Second }
	for name, new := range map[string]func() (*dlock.Client, error){
		"backoff, unfair": func() (*dlock.Client, error) { return dlock.New(rdb, dlock.WithUnfair(slow)) },
		"backoff, reentrant": func() (*dlock.Client, error) {
			return dlock.New(rdb, dlock.WithReentrant(true), dlock.WithUnfair(slow))
		},
		"default backoff, quorum": func() (*dlock.Client, error) { return dlock.NewRedlock(nodes, 0, dlock.WithUnfair(nil)) },
		"reentrant, not fair": func() (*dlock.Client, error) {
			return dlock.New(rdb, dlock.WithUnfair(nil), dlock.WithReentrant(true))
		},
		"reentrant, fair by default": func() (*dlock.Client, error) { return dlock.New(rdb, dlock.WithReentrant(true)) },
		"no replica ack on a Cluster": func() (*dlock.Client, error) {
			return dlock.New(cluster, dlock.WithReplicaAck(0, 0), dlock.WithShardedPubSub(false))
		},
		"replica ack on a Cluster": func() (*dlock.Client, error) {
			return dlock.New(cluster, dlock.WithReplicaAck(1, time.Second))
		},
		"quorum: backoff, features off": func() (*dlock.Client, error) {
			return dlock.NewRedlock(nodes, time.Second, dlock.WithUnfair(slow), dlock.WithReentrant(false),
				pipelined(false), dlock.WithShardedPubSub(false), dlock.WithReplicaAck(0, 0))
		},
	} {
		if c, err := new(); c == nil || err != nil {
			t.Errorf("%s: = %v, %v; want a Client", name, c, err)
		}
	}
}

func TestRedisDown(t *testing.T) {
	t.Parallel()
	long(t)
	s, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	l, err := c.TryAcquire(ctx, "down")
	if err != nil {
		t.Fatal(err)
	}
	s.Kill()

	if err := l.Release(ctx); err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release with Redis down = %v, want a connection error", err)
	}
	if _, err := c.TryAcquire(ctx, "other"); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with Redis down = %v, want a connection error", err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// An error from Redis ends the wait at once: the connection error, or,
	// if the dial outlasted the context, the context's end with it.
	_, err = c.Acquire(short, "other")
	switch {
	case !strings.Contains(fmt.Sprint(err), "dial"):
		t.Errorf("Acquire with Redis down = %v, want the dial error", err)
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrNotAcquired):
		t.Errorf("Acquire with Redis down = %v: the context ended it, want ErrNotAcquired too", err)
	}

	// The failed Release can be retried once Redis is back.
	s.Restart()
	// go-redis reports its last dial error until a background dial succeeds.
	waitFor(5*time.Second, func() bool { return rdb.Ping(ctx).Err() == nil })
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release retried after a restart that lost the key = %v, want ErrNotHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release once more = %v, want nil", err)
	}
}

// Errors read once: one "dlock:" prefix, the lock's name once, the cause
// last; and they still match the sentinel errors.
func TestErrorsReadOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, _ := setup(t)
	opts := s.Options()
	opts.MaxRetries = -1 // (fail fast once the server is dead)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	const name = "the-lock"
	once := func(what string, err error, is ...error) {
		t.Helper()
		readsOnce(t, name, what, err, is...)
	}

	c := newClient(t, rdb, dlock.WithUnfair(nil))
	rdb.HSet(ctx, "dlock:{"+name+"}", "f", "v")
	_, err := c.TryAcquire(ctx, name)
	once("TryAcquire on a foreign key", err, dlock.ErrWrongType)
	_, err = c.ForceRelease(ctx, name)
	once("ForceRelease of a foreign key", err, dlock.ErrWrongType)
	rdb.Del(ctx, "dlock:{"+name+"}")

	holder, err := newClient(t, rdb).TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, name)
	once("TryAcquire of a held lock", err, dlock.ErrNotAcquired)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Acquire(short, name)
	cancel()
	once("Acquire of a held lock, given up", err, dlock.ErrNotAcquired, context.DeadlineExceeded)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}

	l, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	s.Kill()
	_, err = c.TryAcquire(ctx, name)
	once("TryAcquire against a dead server", err)
	if !strings.Contains(err.Error(), `dlock: acquire "`+name+`": `) {
		t.Errorf("TryAcquire against a dead server = %q, want it to start with the operation and the name", err)
	}
	_, err = c.Acquire(ctx, name)
	once("Acquire against a dead server", err)
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = c.Acquire(short, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) { // the dial may outlast the wait, or not
		once("Acquire against a dead server", err)
	} else {
		once("Acquire against a dead server, given up", err, dlock.ErrNotAcquired)
	}
	once("Extend against a dead server", l.Extend(ctx, time.Second))
	once("Release against a dead server", l.Release(ctx))
	_, err = c.Inspect(ctx, name)
	once("Inspect against a dead server", err)
	_, err = c.ForceRelease(ctx, name)
	once("ForceRelease against a dead server", err)

	// Over a quorum, the nodes' errors are listed after the tally.
	srvs, nodes := startQuorum(t, 3)
	for _, n := range srvs {
		n.Kill()
	}
	_, err = newRedlock(t, nodes, 0).TryAcquire(ctx, name)
	once("quorum TryAcquire against dead nodes", err, dlock.ErrNotAcquired)
	if qe, ok := errors.AsType[*dlock.QuorumError](err); !ok || qe.Op != "acquire" {
		t.Errorf("quorum TryAcquire against dead nodes = %v, want a QuorumError", err)
	}
}

// readsOnce: err (what returned it) reads once: one "dlock:" prefix,
// first, and name once; and it matches each of is.
func readsOnce(t *testing.T, name, what string, err error, is ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s = nil, want an error", what)
		return
	}
	msg := err.Error()
	if prefixes(msg) != 1 || strings.Count(msg, name) != 1 || !strings.HasPrefix(msg, "dlock: ") {
		t.Errorf("%s = %q, want one dlock: prefix, first, and the name once", what, msg)
	}
	for _, target := range is {
		if !errors.Is(err, target) {
			t.Errorf("%s = %q, want it to match %v", what, msg, target)
		}
	}
}

// prefixes counts the "dlock:" prefixes in an error's text (not the end
// of "NewRedlock:").
func prefixes(msg string) int {
	return strings.Count(msg, "dlock:") - strings.Count(msg, "Redlock:")
}

func TestAcquireCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	holder, err := newClient(t, rdb).TryAcquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	c := newClient(t, rdb)
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "busy")
		errc <- err
	}()
	if !waitFor(5*time.Second, func() bool { return subscribers(t, rdb, "dlock:{busy}:ch") == 1 }) {
		t.Fatal("the waiter never subscribed to the release channel")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Acquire = %v, want ErrNotAcquired and context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Acquire did not return within 2s of its context's cancellation")
	}
	if !waitFor(2*time.Second, func() bool { return subscribers(t, rdb, "dlock:{busy}:ch") == 0 }) {
		t.Error("the release channel still has a subscriber after the waiter gave up")
	}
	if got := holderOf(rdb.Get(ctx, holder.Key()).Val()); got != holder.Token() {
		t.Errorf("lock key = %q after the waiter gave up, want the holder's token", got)
	}

	// A deadline works the same way.
	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel()
	if _, err := c.Acquire(dctx, "busy"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
}

func subscribers(t *testing.T, rdb *redis.Client, channel string) int64 {
	t.Helper()
	m, err := rdb.PubSubNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Errorf("PUBSUB NUMSUB: %v", err)
	}
	return m[channel]
}

// A waiter must be woken by the release message: its backoff and the
// holder's TTL are both far longer than the test's deadline.
func TestWaiterWokenByRelease(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		t.Run(map[bool]string{false: "unfair", true: "fair"}[fair], func(t *testing.T) { testWaiterWoken(t, fair) })
	}
}

func testWaiterWoken(t *testing.T, fair bool) {
	_, rdb := setup(t)
	ctx := t.Context()
	holder, err := newClient(t, rdb, dlock.LeaseTTL(time.Minute), waiting(fair)).TryAcquire(ctx, "wake")
	if err != nil {
		t.Fatal(err)
	}
	opts := []dlock.Option{dlock.LeaseTTL(time.Minute), waiting(fair)}
	if !fair { // (a fair waiter never backs off: it sleeps 20s, a third of its queue entry's life)
		opts = append(opts, dlock.WithUnfair(func(int) time.Duration { return time.Hour }))
	}
	c := newClient(t, rdb, opts...)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(wctx, "wake")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(5*time.Second, func() bool { return subscribers(t, rdb, "dlock:{wake}:ch") == 1 }) {
		t.Fatal("the waiter never subscribed")
	}
	time.Sleep(20 * time.Millisecond) // let it go to sleep after its second attempt
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("waiter's Acquire = %v, want the lock (woken by the release)", err)
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond))

	var fence int64
	err := c.Do(ctx, "do", func(ctx context.Context, l *dlock.Lock) error {
		if l == nil || l.Name() != "do" || l.Err() != nil {
			return fmt.Errorf("Do gave fn the Lock %v, want the held lock", l)
		}
		fence = fenceOf(t, l)
		if got := holderOf(rdb.Get(ctx, l.Key()).Val()); got != l.Token() {
			t.Errorf("inside Do: GET = %q, want the lock's token", got)
		}
		return nil
	})
	if err != nil || fence == 0 {
		t.Errorf("Do = %v (fence %d), want nil", err, fence)
	}
	if n := liveKeys(ctx, rdb, "dlock:{do}"); n != 0 {
		t.Errorf("lock still exists after Do returned")
	}

	errBoom := errors.New("boom")
	if err := c.Do(ctx, "do", func(context.Context, *dlock.Lock) error { return errBoom }); err != errBoom {
		t.Errorf("Do with failing fn = %v, want fn's error", err)
	}

	// Losing the lock cancels fn's context with cause ErrNotHeld.
	err = c.Do(ctx, "do", func(ctx context.Context, l *dlock.Lock) error {
		rdb.Del(ctx, l.Key())
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrNotHeld) {
				t.Errorf("context.Cause = %v, want ErrNotHeld", cause)
			}
			return ctx.Err()
		case <-time.After(5 * time.Second):
			t.Error("fn's context not cancelled 5s after the lock was lost")
			return nil
		}
	})
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Do after losing the lock = %v, want ErrNotHeld", err)
	}
}

// The acquire script runs but its reply is lost with the connection. With
// go-redis retrying, the retry finds the lock already ours and returns the
// same lease; without retries, the failed call removes the lease it may
// have taken, so nothing is left to block others.
func TestDroppedConnectionMidAcquire(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{3, -1} {
		t.Run(fmt.Sprintf("MaxRetries=%d", retries), func(t *testing.T) {
			s := redistest.Start(t, redistest.TCP())
			leakcheck.Check(t)
			direct := s.Client(t)
			p := redistest.NewProxy(t, s.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: retries})
			t.Cleanup(func() { rdb.Close() })
			ctx := t.Context()
			c := newClient(t, rdb, dlock.WithAutoExtend(false))
			// Load the scripts and pool a connection through the proxy.
			if l, err := c.TryAcquire(ctx, "warm-up"); err != nil {
				t.Fatal(err)
			} else {
				l.Release(ctx)
			}

			p.StallReplies()
			type result struct {
				l   *dlock.Lock
				err error
			}
			got := make(chan result, 1)
			go func() {
				l, err := c.TryAcquire(ctx, "dropped")
				got <- result{l, err}
			}()
			if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, direct, "dlock:{dropped}") == 1 }) {
				t.Fatal("the acquire never ran on the server")
			}
			p.Cut() // the reply is lost with the connection
			r := <-got
			switch {
			case retries > 0 && r.err != nil:
				t.Fatalf("TryAcquire with retries = %v, want the lock (the retry finds it ours)", r.err)
			case retries > 0:
				if got := holderOf(direct.Get(ctx, "dlock:{dropped}").Val()); got != r.l.Token() {
					t.Errorf("after the retried acquire the key holds %q, want our token", got)
				}
				if f := fenceOf(t, r.l); f <= 0 {
					t.Errorf("retried acquire: Fence = %d, want one issued", f)
				}
				r.l.Release(ctx)
			case r.err == nil:
				r.l.Release(ctx)
				t.Fatal("TryAcquire without retries succeeded, want the connection error")
			default:
				if n := liveKeys(ctx, direct, "dlock:{dropped}"); n != 0 {
					t.Errorf("failed acquire left the lock key behind")
				}
			}
		})
	}
}

func TestDoErrorAfterALossIsOneLineCauseLast(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	ctx := t.Context()
	c := newClient(t, redistest.Start(t).Client(t))
	check := func(call string, err, loss error) {
		t.Helper()
		want := "context canceled: " + fmt.Sprint(loss)
		if err == nil || err.Error() != want || !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s = %q, want %q matching context.Canceled and ErrNotHeld", call, err, want)
		}
	}
	var loss error
	err := c.Do(ctx, "one-line", func(fctx context.Context, l *dlock.Lock) error {
		if ok, err := c.ForceRelease(ctx, "one-line"); !ok || err != nil {
			t.Errorf("ForceRelease = %v, %v", ok, err)
		}
		<-fctx.Done()
		loss = context.Cause(fctx)
		return fctx.Err()
	})
	check("Do whose lock was forced away", err, loss)
	err = c.DoAll(ctx, []string{"one-a", "one-b"}, func(fctx context.Context, m *dlock.MultiLock) error {
		if ok, err := c.ForceRelease(ctx, "one-b"); !ok || err != nil {
			t.Errorf("ForceRelease = %v, %v", ok, err)
		}
		<-fctx.Done()
		loss = context.Cause(fctx)
		return fctx.Err()
	})
	if !strings.Contains(fmt.Sprint(err), "\n") {
		check("DoAll whose part was forced away", err, loss)
	} else {
		t.Errorf("DoAll whose part was forced away = %q, want one line", err)
	}
}

// Every Lock method from many goroutines at
// once, with a fast watchdog, shorter and longer Extends, Release in the
// middle, under -race; in every mode (quorum included).
func TestLockMethodsConcurrently(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(150*time.Millisecond)) // watchdog every 50ms
			ctx := m.ctx(t.Context())
			for round := range 5 {
				l, err := c.Acquire(ctx, fmt.Sprintf("conc-%s-%d", m.name, round))
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				stop := time.Now().Add(300 * time.Millisecond)
				for g := range 6 {
					wg.Go(func() {
						for i := 0; i < 200 && time.Now().Before(stop); i++ {
							switch (g + i) % 7 {
							case 0:
								l.Extend(ctx, time.Duration(60+20*(i%5))*time.Millisecond)
							case 1:
								l.Err()
							case 2:
								l.ValidUntil()
							case 3:
								<-closedOrNot(l.Done())
							case 4:
								l.TTL(ctx)
							case 5:
								_ = l.Token() + l.Key() + l.Name()
							case 6:
								if g == 0 && i > 30 {
									l.Release(ctx)
								}
							}
						}
					})
				}
				wg.Wait()
				if err := l.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("Release = %v", err)
				}
				if err := l.Err(); err == nil {
					t.Errorf("Err() nil after Release")
				}
			}
		})
	}
}

func closedOrNot(ch <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	close(out)
	select {
	case <-ch:
	default:
	}
	return out
}

// Do releases the lock when fn panics (net/http recovers handler panics: the
// lock must not stay held until the process exits), and the panic goes on.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	t.Parallel()
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

// A call with a done context fails fast, matches ErrNotAcquired and the
// context's error, and never takes the lock — with pipelining on and off.
func TestDoneContextTakesNothing(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
