package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// Leadership.Proclaim changes the leader's value within its term: Leader
// and observers see it, with the same token and fence; it outlives the
// lease's first extensions; the next leader shows its own value; a
// resigned term cannot proclaim.
func TestLeadershipProclaim(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond))
	e, err := c.Election("proclaim")
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := e.Observe(octx)
	next := func(want string) dlock.Leader {
		t.Helper()
		deadline := time.After(3 * time.Second)
		for {
			select {
			case ld := <-seen:
				if ld.Value == want {
					return ld
				}
			case <-deadline:
				t.Fatalf("observers never saw the value %q", want)
			}
		}
	}
	first := next("a")

	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	got := next("a2")
	if got.Token != first.Token || got.Fence != first.Fence || got.Fence != a.Fence() {
		t.Errorf("after Proclaim: token %q fence %d, want the term's %q %d", got.Token, got.Fence, first.Token, a.Fence())
	}
	if a.Value() != "a2" {
		t.Errorf("Leadership.Value = %q, want a2", a.Value())
	}
	time.Sleep(2 * time.Second) // past the 1.5s lease: several extensions of it
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "a2" || ld.Fence != a.Fence() {
		t.Errorf("Leader after the lease's extensions = %+v, %v; want a2 in the same term", ld, err)
	}

	b := make(chan *dlock.Leadership, 1)
	go func() {
		ld, err := e.Campaign(ctx, "b")
		if err != nil {
			t.Errorf("second Campaign: %v", err)
		}
		b <- ld
	}()
	if !waitFor(3*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{proclaim}:q").Val() == 1 }) {
		t.Fatal("the second candidate never queued")
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Proclaim(ctx, "a3"); !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Proclaim after Resign = %v, want ErrReleased", err)
	}
	if got := next("b"); got.Fence <= first.Fence {
		t.Errorf("the next term's fence %d is not above %d", got.Fence, first.Fence)
	}
	if ld := <-b; ld != nil {
		if err := ld.Proclaim(ctx, "bad\x00value"); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Proclaim of a control character = %v, want ErrInvalid", err)
		}
		ld.Resign(ctx)
	}
}

// A resigned term's proclaimed value goes with it, whether the lock is
// freed or handed to the next candidate: nothing is left in Redis once the
// lock and its markers are gone.
func TestProclaimedValueGoesWithTheTerm(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("proclaim-left")
	if err != nil {
		t.Fatal(err)
	}
	const valueKey = "dlock:{proclaim-left}:v"
	for _, handover := range []bool{false, true} {
		a, err := e.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Proclaim(ctx, "a2"); err != nil {
			t.Fatal(err)
		}
		if n, _ := rdb.Exists(ctx, valueKey).Result(); n != 1 {
			t.Fatalf("the proclaimed value is not at %s", valueKey)
		}
		next := make(chan *dlock.Leadership, 1)
		if handover {
			go func() {
				ld, err := e.Campaign(ctx, "b")
				if err != nil {
					t.Errorf("second Campaign: %v", err)
				}
				next <- ld
			}()
			if !waitFor(3*time.Second, func() bool { n, _ := rdb.LLen(ctx, "dlock:{proclaim-left}:q").Result(); return n == 1 }) {
				t.Fatal("the second candidate never queued")
			}
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := rdb.Exists(ctx, valueKey).Result(); n != 0 {
			t.Errorf("handover %v: the resigned term's value is still at %s (pttl %v)", handover, valueKey, rdb.PTTL(ctx, valueKey).Val())
		}
		if handover {
			b := <-next
			if ld, err := e.Leader(ctx); err != nil || ld.Value != "b" {
				t.Errorf("the next leader shows %+v, %v; want b", ld, err)
			}
			if b != nil {
				b.Resign(ctx)
			}
		}
	}
}

// TestProclaimValueKeyFollowsAShortenedLease: docs/election.md says the
// value key "lasts as long as the lease (each extension lengthens both)".
// A leader whose lease is extended shorter (Lock.Extend, an ordered
// extension) must not leave the value key at its old, longer expiry: once
// the shortened lease ends, the value key "<token> <value>" is gone too.
func TestProclaimValueKeyFollowsAShortenedLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	e, _ := c.Election("pv")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := ld.Lock().Extend(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !waitFor(2*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{pv}").Val() == 0 }) {
		t.Fatal("the shortened lease did not end")
	}
	time.Sleep(50 * time.Millisecond)
	if pttl := rdb.PTTL(ctx, "dlock:{pv}:v").Val(); pttl > 0 {
		t.Errorf("the lease ended, but its value key %q lives on for %v (the old lease time)", rdb.Get(ctx, "dlock:{pv}:v").Val(), pttl)
	}
	// What Leader shows is right nonetheless (the token does not match).
	if got, err := e.Leader(ctx); err != nil || got.Token != "" {
		t.Errorf("Leader after the lease ended = %+v, %v", got, err)
	}
}

// TestProclaimValueKeyGoesWithResign: Resign ends the term and takes the
// value key a Proclaim made with it, rather than leaving it until the
// lease time it was given, past the lease it belongs to.
func TestProclaimValueKeyGoesWithResign(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, _ := c.Election("pr")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{pr}:v").Val(); pttl > 0 {
		t.Errorf("after Resign the value key %q lives on for %v", rdb.Get(ctx, "dlock:{pr}:v").Val(), pttl)
	}
}

// TestProclaimByALeaderThatLostItsLeaseIsRefused: a leader that lost its lease cannot proclaim (ErrNotHeld), and the
// next leader shows its own campaign value, not the old proclaimed one.
func TestProclaimByALeaderThatLostItsLeaseIsRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(200*time.Millisecond), dlock.WithAutoExtend(false))
	e, _ := c.Election("sp")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(3*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{sp}").Val() == 0 }) {
		t.Fatal("the 200ms lease never lapsed")
	}
	c2 := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e2, _ := c2.Election("sp")
	ld2, err := e2.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer ld2.Resign(ctx)
	if err := ld.Proclaim(ctx, "stale"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("a stale leader's Proclaim = %v, want ErrNotHeld", err)
	}
	if got, err := e2.Leader(ctx); err != nil || got.Value != "b" || got.Fence != ld2.Fence() {
		t.Errorf("Leader = %+v, %v; want b with fence %d", got, err, ld2.Fence())
	}
	if ld2.Fence() <= ld.Fence() {
		t.Errorf("the next term's fence %d is not above %d", ld2.Fence(), ld.Fence())
	}
}

// A Proclaim whose reply was lost may still land after a later Proclaim
// of the same leader: the value the later one set must stay, not the
// earlier one's come back.
func TestProclaimLandingLateDoesNotUndoALaterProclaim(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 0)
	ctx := t.Context()
	e := newElection(t, newClient(t, rdb), "late-proclaim")
	ld, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(context.WithoutCancel(ctx))
	// Each Proclaim that runs announces itself on the lock's channel.
	sub := direct.Subscribe(ctx, "dlock:{late-proclaim}:ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	p.Delay(time.Second, 0) // the first Proclaim reaches Redis after the second
	pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = ld.Proclaim(pctx, "stale")
	cancel()
	if err == nil {
		t.Fatal("the delayed Proclaim returned nil before it could reach Redis")
	}
	p.Delay(0, 0)
	if err := ld.Proclaim(ctx, "current"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second Proclaim's announcement, then the late copy's
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := sub.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for both Proclaims to run: %v", err)
		}
	}
	got, err := newElection(t, newClient(t, direct), "late-proclaim").Leader(ctx)
	if err != nil || got.Value != "current" {
		t.Errorf("Leader = %q, %v after a later Proclaim(%q); want %q, not the late copy's %q", got.Value, err, "current", "current", "stale")
	}
}

// A Lock that resumed a leadership numbers its Proclaims afresh: its first
// one still replaces the value of the Lock it took over from, however many
// times that one proclaimed, and so does a value written as
// "<token> <value>", without a number.
func TestProclaimAfterResumeReplacesTheOldLocksValue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	e := newElection(t, newClient(t, rdb), "proclaim-resumed")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a1", "a2", "a3"} {
		if err := ld.Proclaim(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	ld2, err := newElection(t, newClient(t, rdb), "proclaim-resumed").Campaign(ctx, "a", dlock.Resume(ld.Lock().Token()))
	if err != nil {
		t.Fatal(err)
	}
	defer ld2.Resign(context.WithoutCancel(ctx))
	if ld2.Value() != "a3" {
		t.Errorf("resumed leadership's value %q, want a3", ld2.Value())
	}
	if err := ld2.Proclaim(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "b1" {
		t.Errorf("Leader after the resumed Lock's Proclaim = %q, %v; want b1", got.Value, err)
	}
	const valueKey = "dlock:{proclaim-resumed}:v"
	pttl := rdb.PTTL(ctx, valueKey).Val()
	if err := rdb.Set(ctx, valueKey, ld2.Lock().Token()+" old", pttl).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "old" {
		t.Errorf("Leader of an unnumbered value = %q, %v; want old", got.Value, err)
	}
	if err := ld2.Proclaim(ctx, "b2"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "b2" {
		t.Errorf("Leader after a Proclaim over an unnumbered value = %q, %v; want b2", got.Value, err)
	}
}
