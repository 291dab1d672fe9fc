package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Leadership.Proclaim changes the leader's value within its term: Leader
// and observers see it, with the same token and fence; it outlives the
// lease's first extensions; the next leader shows its own value; a
// resigned term cannot proclaim.
func TestLeadershipProclaim(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond))
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
	time.Sleep(time.Second) // several extensions of the 300ms lease
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
	time.Sleep(50 * time.Millisecond)
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
