package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// TestAdvAcquireAllCancelledWhileAPartIsInFlight: AcquireAll holds m1 and
// its request for m2 is in flight to a Redis that froze (SIGSTOP); the
// context ends. AcquireAll returns within a few seconds with an error that
// matches the context's and names m2, and once Redis answers again nothing
// is left held: m1 given back, m2's request (which lands on resume) undone.
func TestAdvAcquireAllCancelledWhileAPartIsInFlight(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			srv, rdb := setup(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var froze sync.Once
			c := newClient(t, rdb, waiting(fair), dlock.WithObserver(dlock.Observer{
				Start: func(ctx context.Context, e *dlock.Event) context.Context {
					if e.Name == "m2" && e.Op == dlock.OpAcquire {
						froze.Do(func() {
							srv.Pause()
							time.AfterFunc(100*time.Millisecond, cancel)
						})
					}
					return ctx
				},
			}))
			start := time.Now()
			_, err := c.AcquireAll(ctx, []string{"m2", "m1"})
			took := time.Since(start)
			srv.Resume()
			if took > 3*time.Second {
				t.Errorf("AcquireAll returned %v after its context ended", took-100*time.Millisecond)
			}
			var nae *dlock.NotAcquiredError
			if !errors.Is(err, context.Canceled) || !errors.As(err, &nae) || nae.Name != "m2" {
				t.Errorf("AcquireAll = %v; want context.Canceled and a *NotAcquiredError naming m2", err)
			}
			if !waitFor(5*time.Second, func() bool {
				return liveKeys(context.Background(), rdb, "dlock:{m1}", "dlock:{m2}", "dlock:{m2}:q", "dlock:{m2}:qw") == 0
			}) {
				t.Errorf("5s after Redis answered again: m1 %q, m2 %q still there", rdb.Get(context.Background(), "dlock:{m1}").Val(), rdb.Get(context.Background(), "dlock:{m2}").Val())
			}
			other := newClient(t, rdb, waiting(fair))
			for _, n := range []string{"m1", "m2"} {
				if l, err := other.TryAcquire(context.Background(), n); err != nil {
					t.Errorf("TryAcquire(%s) after = %v", n, err)
				} else {
					l.Release(context.Background())
				}
			}
			c.Close(context.Background())
		})
	}
}

// TestAdvConcurrentReleaseHonoursItsContext: while one Release of a Lock
// waits on a Redis that froze, a second Release with a 100ms context
// waits for the first (up to go-redis's timeouts, 10s here) instead of
// returning when its context ends.
func TestAdvConcurrentReleaseHonoursItsContext(t *testing.T) {
	srv, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute)) // outlives the freeze
	l, err := c.TryAcquire(t.Context(), "adv-rel")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	first := make(chan error, 1)
	go func() { first <- l.Release(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // the first is in flight
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	start := time.Now()
	err = l.Release(ctx)
	took := time.Since(start)
	cancel()
	if took > time.Second {
		t.Errorf("a second Release with a 100ms context returned after %v (%v): it waited for the first, whatever its context", took.Round(time.Millisecond), err)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the second Release = %v, want an error matching its context's", err)
	}
	srv.Resume()
	if err := <-first; err != nil {
		t.Logf("the first Release: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("a Release once Redis answers again = %v, want nil", err)
	}
	if n := liveKeys(context.Background(), rdb, l.Key()); n != 0 {
		t.Errorf("the lock is still held after its Release")
	}
}
