package drivertest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// serverClock holds a lease, the watchdog extending it every second, on a
// server whose clock then steps a second ahead: the extensions' replies
// carry the server's time through the driver, and the Observer is told.
func serverClock(t *testing.T, s Setup) {
	opts, set := redistest.FakeClock(t)
	srv := redistest.Start(t, append(opts, redistest.TCP())...)
	var extended atomic.Int32
	told := make(chan *dlock.ClockError, 8)
	c := client(t, s.Server(t, srv.Addr()), dlock.WithObserver(dlock.Observer{
		End: func(_ context.Context, e *dlock.Event) {
			if e.Op == dlock.OpExtend && e.Auto && e.Err == nil {
				extended.Add(1)
			}
		},
		Clock: func(_ context.Context, e *dlock.Event) {
			ce, _ := errors.AsType[*dlock.ClockError](e.Err)
			told <- ce
		},
	}))
	l, err := c.TryAcquire(t.Context(), "clock", dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	defer l.Release(context.Background())
	if !eventually(20*time.Second, func() bool { return extended.Load() >= 2 }) {
		t.Fatalf("the watchdog made %d extensions within 20s, want 2", extended.Load())
	}
	set("+1s")
	select {
	case ce := <-told:
		if ce == nil || ce.Ahead < 300*time.Millisecond || ce.Ahead > 1050*time.Millisecond {
			t.Errorf("after a step of 1s: told %v, want about 1s ahead", ce)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("after a step of 1s: not told within 20s (%d extensions)", extended.Load())
	}
	if err := l.Err(); err != nil {
		t.Errorf("l.Err() = %v, want nil", err)
	}
}
