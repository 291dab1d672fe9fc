package drivertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// deadlock: a and b nest two names in opposite orders; exactly one of them
// is told of the deadlock (its records are plain SET, GET and DEL through
// the driver), and the other completes.
func deadlock(t *testing.T, a, b *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	var in sync.WaitGroup
	in.Add(2)
	nest := func(c *dlock.Client, first, second string) error {
		return c.Do(ctx, first, func(ctx context.Context, _ *dlock.Lock) error {
			in.Done()
			in.Wait()
			return c.Do(ctx, second, func(context.Context, *dlock.Lock) error { return nil },
				dlock.DeadlockCheck(100*time.Millisecond))
		})
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = nest(a, "dt-order", "dt-inventory") })
	wg.Go(func() { errs[1] = nest(b, "dt-inventory", "dt-order") })
	wg.Wait()
	n := 0
	for _, err := range errs {
		if errors.Is(err, dlock.ErrDeadlock) {
			n++
		} else if err != nil {
			t.Errorf("want nil or ErrDeadlock, got %v", err)
		}
	}
	if n != 1 {
		t.Errorf("errors %v; want exactly one ErrDeadlock", errs)
	}
}
