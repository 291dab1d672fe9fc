package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// The max hold (MaxHold, MaxHold), in every mode and with pipelining
// on and off.

// At the cap the lease ends exactly there, however the watchdog would have
// gone on: its validity was cut to the cap, Done closes then, not before,
// Err says ErrNotHeld and ErrMaxHold, the Lost hook hears it — and the lock
// is released at once, so a waiter (fair: by handover) takes it right
// after, never before. Release afterwards reports the cap. A Lock nobody
// watches is ended and released the same.
func TestMaxHoldEndsTheLeaseAndReleasesIt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	const (
		ttl     = 1500 * time.Millisecond // a third of it between extensions
		maxHold = 5 * time.Second
	)
	for _, m := range modesAt(t, rdb, true, time.Second) {
		for _, pipelining := range []bool{true, false} {
			for _, watched := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/pipelining=%v/watched=%v", m.name, pipelining, watched), func(t *testing.T) {
					t.Parallel() // (each on a name of its own)
					ctx := m.ctx(t.Context())
					name := fmt.Sprintf("maxhold-%s-%v-%v", m.name, pipelining, watched)
					var (
						mu     sync.Mutex
						lostTo []error
					)
					obs := dlock.Observer{}
					if watched {
						obs.Lost = func(_ context.Context, e *dlock.Event) { mu.Lock(); lostTo = append(lostTo, e.Err); mu.Unlock() }
					}
					c := m.new(t, dlock.LeaseTTL(ttl), pipelined(pipelining), dlock.WithObserver(obs))
					lag := redistest.TimerLag()
					t.Cleanup(func() { lag() })
					before := time.Now()
					l, err := c.TryAcquire(ctx, name, dlock.MaxHold(maxHold))
					if err != nil {
						t.Fatal(err)
					}
					deadline, ok := l.Deadline()
					if !ok || deadline.Before(before.Add(maxHold)) || deadline.After(time.Now().Add(maxHold)) {
						t.Fatalf("Deadline() = %v, %v; want %v after the call", deadline.Sub(before), ok, maxHold)
					}
					type got struct {
						at time.Time
						l  *dlock.Lock
					}
					waiter := make(chan got, 1)
					go func() {
						w, err := asOwner(t, m.new(t, dlock.LeaseTTL(10*time.Second)), "waiter").Acquire(ctx, name)
						if err != nil {
							t.Error(err)
						}
						waiter <- got{time.Now(), w}
					}()
					var doneAt time.Time
					if watched {
						if !closedWithin(l.Done(), 15*time.Second) {
							t.Fatal("Done still open 15s after a 5s max hold")
						}
						doneAt = time.Now()
					}
					w := <-waiter
					if w.l == nil {
						return
					}
					defer w.l.Release(ctx)
					if err := l.Err(); !errors.Is(err, dlock.ErrMaxHold) && lostToLag(t, err, lag(), ttl) {
						return // (lost before its max hold: nothing to check of it)
					}
					maxHoldEndedAt(t, ctx, rdb, m.name, l, deadline, w.at, doneAt)
					if watched {
						mu.Lock()
						if len(lostTo) != 1 || !errors.Is(lostTo[0], dlock.ErrMaxHold) {
							t.Errorf("Lost hook calls = %v, want one with ErrMaxHold", lostTo)
						}
						mu.Unlock()
					}
				})
			}
		}
	}
}

// maxHoldEndedAt: l (in mode) ended at its max hold's deadline exactly:
// the waiter took the lock (at waiterAt) and Done closed (at doneAt, zero
// if not watched) no earlier; its validity was cut there; Err and Release
// report the cap; a single node's lease was released at the cap.
func maxHoldEndedAt(t *testing.T, ctx context.Context, rdb *redis.Client, mode string, l *dlock.Lock, deadline, waiterAt, doneAt time.Time) {
	t.Helper()
	if waiterAt.Before(deadline) {
		t.Errorf("the waiter took the lock %v before the holder's max hold ended", deadline.Sub(waiterAt))
	}
	if !doneAt.IsZero() && doneAt.Before(deadline) {
		t.Errorf("Done closed %v before the max hold's deadline", deadline.Sub(doneAt))
	}
	if vu := l.ValidUntil(); !vu.Equal(deadline) {
		t.Errorf("ValidUntil() = deadline %+v, want the lease cut at the max hold exactly", vu.Sub(deadline))
	}
	err := l.Err()
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Err() = %v, want ErrNotHeld and ErrMaxHold", err)
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Release after the max hold = %v, want ErrMaxHold", err)
	}
	if mode == "plain" || mode == "fair" {
		// Released at the cap, not left to expire: the release leaves the
		// lease's marker, "1" if it came before Redis's expiry (the drift
		// margin after the cap: a few ms), "0" on a machine too loaded
		// for that; a lease left to expire leaves none. The release runs in
		// the background: a loaded machine may run it after the waiter got
		// in (at Redis's expiry) and Release returned.
		var v string
		if !waitFor(3*time.Second, func() bool { v = rdb.Get(t.Context(), l.Key()+":r:"+l.Token()).Val(); return v == "1" || v == "0" }) {
			t.Errorf("the capped lease's marker = %q, want \"1\" or \"0\" (released at the cap)", v)
		}
	}
}

// A max hold below the TTL gives a lease of the max hold: Redis's expiry
// and the validity both end there, and the watchdog extends nothing.
func TestMaxHoldBelowTTLIsTheLease(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		ctx := m.ctx(t.Context())
		c := m.new(t, dlock.LeaseTTL(10*time.Second), dlock.MaxHold(500*time.Millisecond))
		l, err := c.TryAcquire(ctx, "short-"+m.name)
		if err != nil {
			t.Fatal(err)
		}
		// Redis's lease: the max hold and the drift margin of a lease that
		// long (500ms/100 + 2ms), not the TTL's.
		if left, err := l.TTL(ctx); err != nil || left <= 0 || left > 508*time.Millisecond {
			t.Errorf("%s: TTL() = %v, %v; want at most the max hold and its drift margin, 508ms", m.name, left, err)
		}
		if deadline, _ := l.Deadline(); !l.ValidUntil().Equal(deadline) || time.Until(deadline) > 500*time.Millisecond {
			t.Errorf("%s: ValidUntil %v, Deadline %v from now; want both the max hold's", m.name, time.Until(l.ValidUntil()), time.Until(deadline))
		}
		if !closedWithin(l.Done(), 5*time.Second) || !errors.Is(l.Err(), dlock.ErrMaxHold) {
			t.Errorf("%s: Err() = %v, want the lease ended by its max hold", m.name, l.Err())
		}
		// MaxHold(0) lifts the Client's cap for one lease.
		free, err := c.TryAcquire(ctx, "uncapped-"+m.name, dlock.MaxHold(0))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := free.Deadline(); ok {
			t.Errorf("%s: MaxHold(0) on a Client MaxHold: Deadline() ok, want no cap", m.name)
		}
		free.Release(ctx)
	}
}

// An Extend beyond the max hold is cut to it, with an error wrapping
// ErrMaxHold (the lease still held); one that ends before it is plain; at
// the cap already, it sends nothing. Without a watchdog the lease ends and
// is released at the cap all the same.
func TestExtendStopsAtMaxHold(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		for _, pipelining := range []bool{true, false} {
			ctx := m.ctx(t.Context())
			what := fmt.Sprintf("%s, pipelining %v", m.name, pipelining)
			c := m.new(t, dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false), pipelined(pipelining))
			name := fmt.Sprintf("extend-cap-%s-%v", m.name, pipelining)
			lag := redistest.TimerLag()
			t.Cleanup(func() { lag() })
			l, err := tryAcquireInTime(ctx, c, name, dlock.MaxHold(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			deadline, _ := l.Deadline()
			if err := l.Extend(ctx, 400*time.Millisecond); err != nil {
				t.Errorf("%s: Extend(400ms), before the cap = %v, want nil", what, err)
			}
			sent := time.Now()
			err = l.Extend(ctx, 10*time.Second)
			trip := time.Since(sent)
			if lerr := l.Err(); lerr != nil && lostToLag(t, lerr, lag(), 400*time.Millisecond) {
				continue // (lapsed between the Extends: nothing to check at the cap)
			}
			if !errors.Is(err, dlock.ErrMaxHold) || errors.Is(err, dlock.ErrNotHeld) || l.Err() != nil {
				t.Errorf("%s: Extend(10s) past the cap = %v (Err %v), want ErrMaxHold and still held", what, err, l.Err())
			}
			if vu := l.ValidUntil(); !vu.Equal(deadline) {
				t.Errorf("%s: ValidUntil after the cut Extend is %v from the deadline, want at it", what, vu.Sub(deadline))
			}
			// Redis's lease ends at the cap, plus the drift margin of a lease
			// of at most 1s (12ms) and the request's trip (at most the call's
			// round trip, trip): far from the 10s asked for.
			until := time.Until(deadline)
			if left, err := l.TTL(ctx); err != nil || left > until+12*time.Millisecond+max(trip, 38*time.Millisecond) {
				t.Errorf("%s: TTL() after the cut Extend = %v, %v; want Redis's lease to end at the cap (%v away)", what, left, err, until)
			}
			if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrMaxHold) {
				t.Errorf("%s: Extend at the cap = %v, want ErrMaxHold", what, err)
			}
			other := asOwner(t, m.new(t), "other")
			w, err := other.Acquire(ctx, name, dlock.MaxWait(5*time.Second))
			if err != nil {
				t.Fatalf("%s: a waiter's Acquire = %v, want the lock at the cap", what, err)
			}
			if time.Now().Before(deadline) {
				t.Errorf("%s: a waiter took the lock before the cap", what)
			}
			w.Release(ctx)
			if err := l.Err(); !errors.Is(err, dlock.ErrMaxHold) {
				t.Errorf("%s: Err() = %v, want ErrMaxHold", what, err)
			}
		}
	}
}

// Do cancels fn's context at the max hold with a cause that says so, and
// returns an error that says so; a waiter takes the lock right after.
func TestDoCancelsAtMaxHold(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		for _, pipelining := range []bool{true, false} {
			ctx := m.ctx(t.Context())
			what := fmt.Sprintf("%s, pipelining %v", m.name, pipelining)
			name := fmt.Sprintf("do-cap-%s-%v", m.name, pipelining)
			c := m.new(t, pipelined(pipelining))
			var cause error
			waited := make(chan error, 1)
			err := c.Do(ctx, name, func(ctx context.Context, l *dlock.Lock) error {
				go func() {
					w, err := asOwner(t, m.new(t), "waiter").Acquire(context.WithoutCancel(ctx), name, dlock.MaxWait(10*time.Second))
					if err == nil {
						w.Release(context.WithoutCancel(ctx))
					}
					waited <- err
				}()
				select {
				case <-ctx.Done():
					cause = context.Cause(ctx)
				case <-time.After(10 * time.Second):
				}
				return nil
			}, dlock.MaxHold(500*time.Millisecond))
			if !errors.Is(cause, dlock.ErrMaxHold) || !errors.Is(cause, dlock.ErrNotHeld) {
				t.Errorf("%s: fn's context cause = %v, want ErrMaxHold and ErrNotHeld", what, cause)
			}
			if !errors.Is(err, dlock.ErrMaxHold) {
				t.Errorf("%s: Do = %v, want ErrMaxHold", what, err)
			}
			if err := <-waited; err != nil {
				t.Errorf("%s: the waiter's Acquire = %v, want the lock after the max hold", what, err)
			}
		}
	}
}

// A reentrant hold's max hold ends that hold, a lease of its own: the
// owner's other hold keeps the lock.
func TestMaxHoldOfAReentrantHoldEndsThatHold(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(300*time.Millisecond))
	owner := asOwner(t, c, "request")
	outer, err := owner.TryAcquire(ctx, "re-cap")
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	inner, err := owner.TryAcquire(ctx, "re-cap", dlock.MaxHold(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(inner.Done(), 5*time.Second) || !errors.Is(inner.Err(), dlock.ErrMaxHold) {
		t.Fatalf("the capped inner hold: Err() = %v, want ended by its max hold", inner.Err())
	}
	if !waitFor(5*time.Second, func() bool {
		info, _ := c.Inspect(ctx, "re-cap")
		return len(info.Owners) == 1 && info.Owners[0].Holds == 1
	}) {
		info, _ := c.Inspect(ctx, "re-cap")
		t.Errorf("after the inner hold's max hold: Inspect = %+v, want the owner with one hold left", info)
	}
	if err := outer.Err(); err != nil {
		t.Errorf("the outer hold: Err() = %v, want still held", err)
	}
	if _, err := asOwner(t, c, "another").TryAcquire(ctx, "re-cap"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another owner's TryAcquire = %v, want ErrNotAcquired while the outer hold lives", err)
	}
}

// A watchdog that rests at the cap (its extension was cut there) starts
// again when an Extend to a shorter lease moves the validity off the cap:
// the lease is then kept until the cap, not lost when that Extend's
// validity runs out.
func TestWatchdogAtTheCapStartsAgainAfterAShorterExtend(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(3*time.Second))
	l, err := c.TryAcquire(t.Context(), "watchdog-off-the-cap", dlock.MaxHold(3500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	deadline, _ := l.Deadline()
	if !waitFor(3*time.Second, func() bool { return l.ValidUntil().Equal(deadline) }) {
		t.Fatalf("the watchdog's first run did not extend the lease to its cap (ValidUntil %v before it)", deadline.Sub(l.ValidUntil()))
	}
	if err := l.Extend(t.Context(), 1500*time.Millisecond); err != nil {
		t.Fatalf("Extend(1.5s) = %v, want nil", err)
	}
	vu := l.ValidUntil()
	if !vu.Before(deadline) {
		t.Fatalf("ValidUntil after Extend(1.5s) is %v before the cap, want off it", deadline.Sub(vu))
	}
	// The watchdog runs again a third of the new lease later, and moves the
	// validity towards the cap.
	if !waitFor(1400*time.Millisecond, func() bool { return l.ValidUntil().After(vu) }) {
		t.Errorf("after Extend(1.5s) moved the validity off the cap, the watchdog did not extend it again (Err() = %v)", l.Err())
	}
}
