package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// Close waits for a TryAcquire under way: while its request is held in the
// network, Close returns only at its ctx's end; once the call failed, at once.
func TestCloseWaitsForATryAcquireUnderWay(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, _ := proxied(t, -1, 5*time.Second)
	c := newClient(t, rdb)
	warm(t, t.Context(), c, "fair", "close-try") // (the scripts loaded: the stall holds the acquire itself)
	p.Stall()
	res := make(chan error, 1)
	go func() {
		l, err := c.TryAcquire(t.Context(), "close-try")
		if err == nil {
			l.Release(t.Context())
		}
		res <- err
	}()
	closeWaits(t, p, c, "the TryAcquire", func() bool { return countGoroutines(t, "dlock.(*Client).attempt") > 0 })
	<-res
}

// After Close, a lease that reaches its max hold is not released in the
// background (no request is sent): it expires by its TTL.
func TestCloseLeavesAMaxHoldToItsTTL(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	c := newClient(t, rdb)
	l, err := c.TryAcquire(t.Context(), "close-cap", dlock.MaxHold(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v, want nil", err)
	}
	p.Stall() // what the Client sends from now on stays in the proxy
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("the lease did not end at its max hold")
	}
	if !errors.Is(l.Err(), dlock.ErrMaxHold) {
		t.Errorf("Err at the max hold = %v, want ErrMaxHold", l.Err())
	}
	if waitFor(2*time.Second, func() bool { return p.RequestsSinceStall() > 0 }) {
		t.Errorf("a request was sent at the max hold after Close returned: an undo started after Close")
	}
	if !waitFor(5*time.Second, func() bool { return liveKeys(t.Context(), direct, l.Key()) == 0 }) {
		t.Errorf("the lease at its max hold never expired")
	}
}

// closeWaits checks that Close waits for a call (what) under way once
// underWay, whose requests p holds: under a short ctx it returns ctx's
// error; once p cut the connections (the call failed), it returns nil.
func closeWaits(t *testing.T, p *redistest.Proxy, c *dlock.Client, what string, underWay func() bool) {
	t.Helper()
	if !waitFor(5*time.Second, underWay) {
		t.Fatalf("%s never began", what)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := c.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with %s held in the network = %v, want ctx's error: it did not wait for it", what, err)
	}
	p.Cut()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close once %s failed = %v, want nil", what, err)
	}
}

// A Lost hook may close the Client: Close, called from the hook that the
// watchdog's extension runs when it finds the lease gone, returns at once.
func TestALostHookMayCloseTheClient(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	closed := make(chan error, 1)
	var c *dlock.Client
	c = newClient(t, rdb, dlock.LeaseTTL(900*time.Millisecond), dlock.WithObserver(dlock.Observer{
		Lost: func(context.Context, *dlock.Event) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			closed <- c.Close(ctx)
		},
	}))
	l, err := c.TryAcquire(t.Context(), "lost-closes")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(t.Context(), l.Key()) // the next extension finds the lease gone
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close in a Lost hook told by the watchdog = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the Lost hook was never told")
	}
}

// A Waiting hook may close the Client, as the wait starts (+1) or as it
// ends with the lock handed to it (-1): Close returns nil at once, without
// waiting for the hook's own Acquire, which then ends with ErrClosed,
// returns no Lock, and sends nothing once Close returned.
func TestAWaitingHookMayCloseTheClient(t *testing.T) {
	t.Parallel()
	for _, delta := range []int{+1, -1} {
		t.Run(fmt.Sprintf("delta=%+d", delta), func(t *testing.T) {
			leakcheck.Check(t)
			p, rdb, direct := proxied(t, -1, 5*time.Second)
			l, err := newClient(t, direct).TryAcquire(t.Context(), "waiting-closes")
			if err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			var c *dlock.Client
			c = newClient(t, rdb, dlock.WithObserver(dlock.Observer{
				Waiting: func(_ context.Context, _ string, d int) {
					if d != delta {
						l.Release(context.Background()) // (+1 of a wait that is to take the lock)
						return
					}
					quiet(t, p, direct, "dlock:{waiting-closes}:ch")
					closed <- closeNow(c)
					p.Stall() // what the Client sends from now on stays in the proxy
				},
			}))
			afterClose(t, p, c, "waiting-closes", closed)
		})
	}
}

// Close goes on while a Waiting hook runs, without waiting for it (it
// cannot tell it from one that calls Close); the hook's Acquire then
// ends with ErrClosed and sends nothing once Close returned.
func TestCloseGoesOnWhileAWaitingHookRuns(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	leakcheck.Check(t)
	if _, err := newClient(t, direct).TryAcquire(t.Context(), "waiting-runs"); err != nil {
		t.Fatal(err)
	}
	hooked, returned, closed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	c := newClient(t, rdb, dlock.WithObserver(dlock.Observer{
		Waiting: func(_ context.Context, _ string, d int) {
			if d > 0 {
				quiet(t, p, direct, "dlock:{waiting-runs}:ch")
				close(hooked)
				<-returned
			}
		},
	}))
	go func() {
		<-hooked
		closed <- closeNow(c)
		p.Stall()
		close(returned)
	}()
	afterClose(t, p, c, "waiting-runs", closed)
}

// A Deadlock hook may close the Client: Close returns nil at once, and
// the Acquire that found the deadlock ends with ErrClosed (and the
// deadlock) and returns no Lock.
func TestADeadlockHookMayCloseTheClient(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	closed := make(chan error, 2)
	hook := func(c **dlock.Client) dlock.Option {
		return dlock.WithObserver(dlock.Observer{Deadlock: func(context.Context, *dlock.Event) { closed <- closeNow(*c) }})
	}
	var c1, c2 *dlock.Client
	c1 = newClient(t, rdb, dlock.DeadlockCheck(fastCheck), hook(&c1))
	c2 = newClient(t, rdb, dlock.DeadlockCheck(fastCheck), hook(&c2))
	errs, _ := crossing(t, part{first: doOf(c1, "dl-a"), then: doOf(c1, "dl-b")}, part{first: doOf(c2, "dl-b"), then: doOf(c2, "dl-a")})
	if len(closed) != 1 {
		t.Fatalf("%d Deadlock hooks told; want 1 (errors %v)", len(closed), errs)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close in a Deadlock hook = %v, want nil", err)
	}
	for i, err := range errs {
		if err != nil && (!errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrDeadlock)) {
			t.Errorf("part %d = %v; want nil, or ErrClosed and ErrDeadlock", i, err)
		}
	}
}

// quiet waits until the hub's SUBSCRIBE to channel went through and p
// holds no request: what p holds from then on was sent later.
func quiet(t *testing.T, p *redistest.Proxy, rdb *redis.Client, channel string) {
	t.Helper()
	subscribed(t, rdb, channel)
	if !waitFor(5*time.Second, func() bool { return p.HeldRequests() == 0 }) {
		t.Fatalf("the proxy still holds %d requests after 5s", p.HeldRequests())
	}
}

// closeNow closes c under a 5s bound: a Close that waits for its own
// caller returns the bound's error.
func closeNow(c *dlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Close(ctx)
}

// afterClose checks that c's Acquire of name, held by another Client, ends
// with ErrClosed and no Lock, that Close (told on closed) returned nil,
// and that c sent nothing through p (stalled as Close returned) after it.
func afterClose(t *testing.T, p *redistest.Proxy, c *dlock.Client, name string, closed <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if l, err := c.Acquire(ctx, name); l != nil || !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire whose wait Close ended returned a Lock: %v, and %v; want none and ErrClosed", l != nil, err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	if waitFor(time.Second, func() bool { return p.RequestsSinceStall() > 0 }) {
		t.Errorf("the Acquire sent a request after Close returned")
	}
}

// Close waits for the watchdog's extension under way: while its request
// is held in the network, Close returns only at its ctx's end; once the
// call failed, at once. (The extension waits no longer than the lease's
// validity: a lease of 3s leaves it two seconds in flight, far more than
// a loaded machine takes to see it held and call Close.)
func TestCloseWaitsForTheWatchdogsExtensionUnderWay(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, _ := proxied(t, -1, 5*time.Second)
	c := newClient(t, rdb)
	l, err := c.TryAcquire(t.Context(), "close-extension", dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// What the proxy takes in from the stall on is the watchdog's
	// extension, sent a third of the lease later.
	p.Stall()
	closeWaits(t, p, c, "the watchdog's extension", func() bool { return p.RequestsSinceStall() > 0 })
	l.Release(t.Context())
}

// A Start hook of the watchdog's extension may close the Client: Close
// returns at once, and the extension is not sent.
func TestAWatchdogsStartHookMayCloseTheClient(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	closed := make(chan error, 1)
	var c *dlock.Client
	c = newClient(t, rdb, dlock.WithObserver(dlock.Observer{
		Start: func(ctx context.Context, e *dlock.Event) context.Context {
			if e.Auto {
				closed <- closeNow(c)
			}
			return ctx
		},
	}))
	l, err := c.TryAcquire(t.Context(), "start-closes", dlock.LeaseTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close in the watchdog's Start hook = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watchdog's Start hook was never called")
	}
	if !closedWithin(l.Jeopardy(), 5*time.Second) {
		t.Error("the lease was not put at risk once Close stopped its extensions")
	}
}

// A Clock hook may close the Client, over one node (the watchdog's
// extension read the clock) or a quorum (a node's call did): Close
// returns nil at once. The step (3s, on a 10s lease whose margin is about
// 0.1s) stays far beyond what slow replies on a loaded machine widen a
// reading by: a step within that width is not told, by design.
func TestAClockHookMayCloseTheClient(t *testing.T) {
	t.Parallel()
	for _, quorum := range []bool{false, true} {
		t.Run(fmt.Sprintf("quorum=%v", quorum), func(t *testing.T) {
			t.Parallel()
			leakcheck.Check(t)
			opts, set := redistest.FakeClock(t)
			nodes := []redis.UniversalClient{redistest.Start(t, opts...).Client(t)}
			closed, extended := make(chan error, 1), make(chan struct{}, 1)
			var c *dlock.Client
			obs := dlock.WithObserver(dlock.Observer{
				Clock: func(context.Context, *dlock.Event) { closed <- closeNow(c) },
				End: func(_ context.Context, e *dlock.Event) {
					if e.Auto && e.Err == nil {
						select {
						case extended <- struct{}{}:
						default:
						}
					}
				},
			})
			if quorum {
				nodes = append(nodes, redistest.Start(t).Client(t), redistest.Start(t).Client(t))
				c = newRedlock(t, nodes, time.Second, obs)
			} else {
				c = newClient(t, nodes[0], obs)
			}
			l, err := c.TryAcquire(t.Context(), "clock-closes", dlock.LeaseTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.Background())
			// Two extensions before the step: over a quorum the first may
			// have returned before node 0's reply, its reading, came back
			// (a loaded machine); a reading taken after the step would be
			// the base, and the step never seen.
			for range 2 {
				select {
				case <-extended:
				case <-time.After(20 * time.Second):
					t.Fatal("the watchdog made no extension within 20s")
				}
			}
			set("+3s")
			select {
			case err := <-closed:
				if err != nil {
					t.Errorf("Close in a Clock hook = %v, want nil", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the Clock hook was not told of a step of 3s within 20s")
			}
		})
	}
}

// An AcquireAll whose part's Waiting hook closes the Client gives back
// the part it had taken, as a Release after Close is sent: against a
// Redis that does not answer, the give-back is sent, the call returns
// within its bound, and nothing it started runs on (leakcheck); the part
// then expires.
func TestAcquireAllClosedByAWaitingHookGivesBackThePartItTook(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	leakcheck.Check(t)
	if _, err := newClient(t, direct).TryAcquire(t.Context(), "all-2"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	var c *dlock.Client
	c = newClient(t, rdb, dlock.LeaseTTL(time.Second), dlock.WithObserver(dlock.Observer{
		Waiting: func(_ context.Context, _ string, d int) {
			if d > 0 {
				quiet(t, p, direct, "dlock:{all-2}:ch")
				closed <- closeNow(c)
				p.Stall() // what the Client sends from now on stays in the proxy
			}
		},
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if m, err := c.AcquireAll(ctx, []string{"all-1", "all-2"}); m != nil || !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("AcquireAll whose wait Close ended returned a MultiLock: %v, and %v; want none and ErrClosed", m != nil, err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	if p.HeldRequests() == 0 {
		t.Errorf("AcquireAll returned without giving back the part it had taken")
	}
	if !waitFor(5*time.Second, func() bool { return liveKeys(t.Context(), direct, "dlock:{all-1}") == 0 }) {
		t.Errorf("the part taken never expired")
	}
}
