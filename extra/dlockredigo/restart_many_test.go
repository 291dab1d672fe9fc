package dlockredigo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// After a restart, a pool full of idle connections the server closed
// does not fail acquisitions made at once: each learns of a dead
// connection once, and a second dead one must not fail it either.
func TestConcurrentAcquisitionsAfterARestartFilledThePoolWithDeadConnections(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	srv := redistest.Start(t, redistest.TCP())
	pool := newPool(t, srv.Addr())
	c, err := dlockredigo.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	ctx := within(t, 20*time.Second)
	var held []interface{ Close() error }
	for range 16 {
		rc, err := pool.GetContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Do("PING"); err != nil {
			t.Fatal(err)
		}
		held = append(held, rc)
	}
	for _, rc := range held {
		rc.Close()
	}
	srv.Restart()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.TryAcquire(ctx, fmt.Sprint("many-", i))
			if err != nil {
				errs <- err
				return
			}
			l.Release(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("TryAcquire after a restart: %v", err)
	}
}
