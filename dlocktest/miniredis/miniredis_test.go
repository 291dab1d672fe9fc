package miniredis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

func newClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *miniredis.Miniredis) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c, err := dlock.New(rdb, append([]dlock.Option{dlock.LeaseTTL(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

// Acquire, exclusion, fence, release and Inspect work as on Redis.
func TestLocksWork(t *testing.T) {
	for _, fair := range []bool{true, false} {
		var opts []dlock.Option
		if !fair {
			opts = append(opts, dlock.WithUnfair(nil))
		}
		c, _ := newClient(t, opts...)
		ctx := t.Context()
		l, err := c.TryAcquire(ctx, "a")
		if err != nil {
			t.Fatalf("fair=%v: TryAcquire = %v", fair, err)
		}
		if f, err := l.Fence(ctx); err != nil || f <= 0 {
			t.Errorf("fair=%v: Fence = %d, %v", fair, f, err)
		}
		if _, err := c.TryAcquire(ctx, "a"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("fair=%v: second TryAcquire = %v, want ErrNotAcquired", fair, err)
		}
		if info, err := c.Inspect(ctx, "a"); err != nil || info.Token != l.Token() {
			t.Errorf("fair=%v: Inspect = %+v, %v", fair, info, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("fair=%v: Release = %v", fair, err)
		}
		l, err = c.TryAcquire(ctx, "a")
		if err != nil {
			t.Fatalf("fair=%v: TryAcquire after release = %v", fair, err)
		}
		l.Release(ctx)
	}
}

// The clock moves only on FastForward: a lease nobody extends outlives its
// TTL in real time, and is gone after a FastForward past it.
func TestExpiryOnlyOnFastForward(t *testing.T) {
	c, m := newClient(t, dlock.WithAutoExtend(false))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // past the 1s TTL, in real time
	if _, err := c.TryAcquire(ctx, "a"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire after the TTL passed in real time = %v, want ErrNotAcquired (miniredis has not expired it)", err)
	}
	m.FastForward(2 * time.Second)
	other, err := c.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("TryAcquire after FastForward = %v, want the lock free", err)
	}
	other.Release(ctx)
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after FastForward = %v, want ErrNotHeld", err)
	}
}

// With the watchdog on, a FastForward past the TTL makes the holder lose
// the lease at its next extension.
func TestLossAfterFastForward(t *testing.T) {
	c, m := newClient(t)
	l, err := c.TryAcquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	m.FastForward(2 * time.Second)
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the holder was not told of the loss within 3s (the watchdog extends every TTL/3)")
	}
	if !errors.Is(l.Err(), dlock.ErrNotHeld) {
		t.Errorf("Err = %v, want ErrNotHeld", l.Err())
	}
}
