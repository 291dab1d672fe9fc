package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// A Close whose ctx ended while an acquisition was still under way (held
// in the network) has returned: a lease that reaches its max hold after it
// is left to its TTL as after any Close, no undo started in the
// background, though the tracker never found itself idle.
func TestMaxHoldAfterACloseCutShortStartsNoUndo(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	c := newClient(t, rdb)
	warm(t, t.Context(), c, "fair", "cut-short-other")
	l, err := c.TryAcquire(t.Context(), "cut-short-cap", dlock.MaxHold(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	p.Stall() // what the Client sends from now on stays in the proxy
	res := make(chan error, 1)
	go func() {
		other, err := c.TryAcquire(t.Context(), "cut-short-other")
		if err == nil {
			other.Release(t.Context())
		}
		res <- err
	}()
	if !waitFor(5*time.Second, func() bool { return countGoroutines(t, "dlock.(*Client).attempt") > 0 && p.HeldRequests() > 0 }) {
		t.Fatal("the TryAcquire never began")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := c.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a TryAcquire held in the network = %v, want ctx's error", err)
	}
	held := p.HeldRequests()
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("the lease did not end at its max hold")
	}
	if !errors.Is(l.Err(), dlock.ErrMaxHold) {
		t.Errorf("Err at the max hold = %v, want ErrMaxHold", l.Err())
	}
	if waitFor(2*time.Second, func() bool { return p.HeldRequests() > held }) {
		t.Errorf("a request was sent at the max hold after Close returned (%d held, %d before): an undo started after Close", p.HeldRequests(), held)
	}
	p.Cut()
	<-res
	if err := c.Close(t.Context()); err != nil {
		t.Errorf("Close once the TryAcquire failed = %v, want nil", err)
	}
	if !waitFor(5*time.Second, func() bool { return liveKeys(t.Context(), direct, l.Key()) == 0 }) {
		t.Errorf("the lease at its max hold never expired")
	}
}

// Observe called after Close returns a channel closed at once, and starts
// no read and no goroutine: its Client's hubs are closed.
func TestObserveAfterCloseReturnsAClosedChannel(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb)
	e, err := c.Election("observe-after-close")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case ld, open := <-e.Observe(context.Background()): // (a ctx that never ends)
		if open {
			t.Errorf("Observe after Close sent %+v, want its channel closed", ld)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe's channel, made after Close, still open 5s on")
	}
	if n := countGoroutines(t, "dlock.(*Election).observe"); n != 0 {
		t.Errorf("%d Observe goroutines running after Close", n)
	}
}

// A Jeopardy hook may close the Client: Close, called from the hook told
// that the watchdog's extension under way went unanswered, waits for that
// extension, which ends at the lease's validity, and returns; the lease is
// then lost at its validity and nothing is left running.
func TestAJeopardyHookMayCloseTheClient(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, _ := proxied(t, -1, 5*time.Second)
	closed := make(chan error, 1)
	var c *dlock.Client
	c = newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond), dlock.WithObserver(dlock.Observer{
		Jeopardy: func(context.Context, *dlock.Event) {
			select {
			case closed <- closeNow(c):
			default: // (told again: closed once is enough)
			}
		},
	}))
	l, err := c.TryAcquire(t.Context(), "jeopardy-closes")
	if err != nil {
		t.Fatal(err)
	}
	p.Stall() // the next extension goes unanswered
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close from the Jeopardy hook = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close from the Jeopardy hook did not return in 15s")
	}
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("the lease did not end at its validity after Close")
	}
	if !errors.Is(l.Err(), dlock.ErrNotHeld) {
		t.Errorf("Err after Close from the Jeopardy hook = %v, want ErrNotHeld", l.Err())
	}
	p.Cut()
}

// A Release over a quorum after Close returns once every node answered or
// the node timeout passed, as before Close, also when a node's call does
// not end with its ctx (pipelining off, as through a driver that waits past
// its ctx: go-redis then waits for a reply up to its read timeout): one node
// whose reply never comes does not hold the caller to that timeout.
func TestQuorumReleaseAfterCloseIsCutAtTheNodeTimeout(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	const nodeTimeout, ctxTimeout = 100 * time.Millisecond, time.Second
	ps, via, direct := proxiedQuorum(t, 3) // (go-redis's read timeout: 3s or more)
	c := newRedlock(t, via, nodeTimeout, pipelined(false))
	l, err := c.TryAcquire(t.Context(), "after-close-unpiped", dlock.LeaseTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	ps[0].StallReplies() // the release runs there; its reply never comes
	ctx, cancel := context.WithTimeout(t.Context(), ctxTimeout)
	defer cancel()
	start := time.Now()
	err = l.Release(ctx)
	took := time.Since(start)
	t.Logf("Release after Close, one node's reply lost = %v (after %v)", err, took.Round(time.Millisecond))
	if took > ctxTimeout {
		t.Errorf("Release after Close took %v with a %v node timeout and a %v ctx: it waited for the node's read timeout", took, nodeTimeout, ctxTimeout)
	}
	if n, vals := keyOnNodes(t.Context(), direct[1:], "dlock:{after-close-unpiped}"); n != 0 {
		t.Errorf("the lock still held on %d of the nodes that answered: %q", n, vals)
	}
	ps[0].Cut()
}
