package dlockredigo_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A server restart under waiters on pub/sub (which empties the server)
// does not leave them waiting for the old holder's lease: one of them
// takes the lock, and the others keep waiting for it.
func TestWaitersOutliveARestartAndOneTakesTheLock(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	srv := redistest.Start(t, redistest.TCP())
	pool := newPool(t, srv.Addr())
	c, err := dlockredigo.New(pool, dlock.LeaseTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	ctx := within(t, 25*time.Second)
	if _, err := c.TryAcquire(ctx, "rw"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 3)
	for range 3 {
		go func() {
			l, err := c.Acquire(ctx, "rw")
			if err == nil {
				defer l.Release(context.Background())
				<-ctx.Done()
			}
			got <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Waiting != 3 {
		if time.Now().After(deadline) {
			t.Fatal("never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Restart()
	deadline = time.Now().Add(10 * time.Second)
	for c.Stats().Waiting != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("10s after the restart, %d still wait (want 2: one took the lock); stats %+v", c.Stats().Waiting, c.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-got:
		t.Fatalf("a waiter ended: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
}
