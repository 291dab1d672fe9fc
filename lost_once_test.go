package dlock_test

import (
	"context"
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
