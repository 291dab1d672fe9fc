package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A lease that runs out while its server is frozen is lost once: the
// expiry timer tells Lost (which panics here), and the watchdog's
// extension that fails after the server wakes neither tells it again nor
// counts a second loss.
func TestLeaseRunOutUnderAFrozenServerIsLostOnce(t *testing.T) {
	t.Parallel()
	s, rdb := setupTCP(t)
	var losts atomic.Int64
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second), dlock.WithObserver(dlock.Observer{
		Lost: func(context.Context, *dlock.Event) { losts.Add(1); panic("lost") },
	}))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "frozen")
	if err != nil {
		t.Fatal(err)
	}
	s.Pause()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		s.Resume()
		t.Fatal("the lease never ended while the server was frozen")
	}
	s.Resume()
	// Wait until the watchdog's call in flight has its answer: the Client
	// can then take the lock again.
	if !waitFor(10*time.Second, func() bool {
		l2, err := c.TryAcquire(ctx, "frozen")
		if err != nil {
			return false
		}
		l2.Release(ctx)
		return true
	}) {
		t.Fatal("the lock was never free again")
	}
	if !waitFor(2*time.Second, func() bool { st := c.Stats(); return st.Lost >= 1 && st.ObserverPanics >= 1 }) {
		t.Fatal("no loss counted")
	}
	if n, st := losts.Load(), c.Stats(); n != 1 || st.Lost != 1 || st.ObserverPanics != 1 {
		t.Errorf("Lost called %d times; Stats.Lost %d, ObserverPanics %d; want 1 each", n, st.Lost, st.ObserverPanics)
	}
}

// A lost lease's error reads "dlock: not held", the lock's name and why,
// and matches ErrMaxHold too when the max hold ended it.
func TestALostLeasesErrorSaysTheNameAndWhy(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		opts    []dlock.LockOption
		why     string
		maxHold bool
	}{
		{"lost-text-validity", []dlock.LockOption{dlock.LeaseTTL(300 * time.Millisecond)}, "the lease's validity ran out before it was extended", false},
		{"lost-text-maxhold", []dlock.LockOption{dlock.LeaseTTL(time.Second), dlock.MaxHold(400 * time.Millisecond)}, "held for its max hold of 400ms", true},
	} {
		c := newClient(t, rdb, dlock.WithAutoExtend(tc.maxHold))
		l, err := c.TryAcquire(ctx, tc.name, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if !closedWithin(l.Done(), 10*time.Second) {
			t.Fatalf("%s: the lease never ended", tc.name)
		}
		err = l.Err()
		if want := `dlock: not held: "` + tc.name + `": ` + tc.why; err == nil || err.Error() != want {
			t.Errorf("Err() = %v, want %s", err, want)
		}
		if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrMaxHold) != tc.maxHold {
			t.Errorf("%s: Err() = %v: ErrNotHeld %v, ErrMaxHold %v; want true, %v", tc.name, err,
				errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrMaxHold), tc.maxHold)
		}
		l.Release(ctx)
	}
}
