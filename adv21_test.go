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
