package dlockredigo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A pool closed while a waiter waits ends the wait with the driver's ErrClosed within
// the holder's lease, not at the waiter's context; the Client then closes.
func TestPoolClosedUnderAWaiterEndsTheWait(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	srv := redistest.Start(t, redistest.TCP())
	pool := newPool(t, srv.Addr())
	c, err := dlockredigo.New(pool, dlock.LeaseTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := within(t, 20*time.Second)
	if _, err := c.TryAcquire(ctx, "pc"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "pc")
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatal("never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pool.Close()
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("wait under a closed pool: %v, want driver.ErrClosed", err)
		}
	case <-time.After(6 * time.Second):
		t.Fatal("the waiter still waits 6s after the pool closed (lease 1s)")
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(cctx); err != nil && !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}
