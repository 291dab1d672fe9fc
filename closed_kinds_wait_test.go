package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A waiter of each kind whose Redis client is closed under it while it
// waits through the pub/sub hub ends its wait with ErrClosed, well before
// its MaxWait, and leaves no goroutine behind.
func TestWaiterOfEachKindWhoseRedisClientClosesEndsWithErrClosed(t *testing.T) {
	type take func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (func(context.Context) error, error)
	lease := func(l *dlock.Lock, err error) (func(context.Context) error, error) {
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	lock := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (func(context.Context) error, error) {
		return lease(c.Acquire(ctx, name, opts...))
	}
	sem := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (func(context.Context) error, error) {
		return lease(newSemaphore(t, c, name, 1).Acquire(ctx, opts...))
	}
	write := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (func(context.Context) error, error) {
		return lease(newRW(t, c, name).Writer().Acquire(ctx, opts...))
	}
	campaign := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (func(context.Context) error, error) {
		ld, err := newElection(t, c, name).Campaign(ctx, "v", opts...)
		if err != nil {
			return nil, err
		}
		return ld.Resign, nil
	}
	all := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (func(context.Context) error, error) {
		m, err := c.AcquireAll(ctx, []string{name, name + "-2"}, opts...)
		if err != nil {
			return nil, err
		}
		return m.Release, nil
	}
	for _, tc := range []struct {
		kind string
		take take
		opts []dlock.Option
	}{
		{"fair lock", lock, nil},
		{"unfair lock", lock, []dlock.Option{dlock.WithUnfair(nil)}},
		{"reentrant lock", lock, []dlock.Option{dlock.WithReentrant(true)}},
		{"semaphore", sem, nil},
		{"write lock", write, nil},
		{"campaign", campaign, nil},
		{"all of two names", all, nil},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			s, rdb := setup(t)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			const name = "closed-under-waiter"
			holder := newClient(t, rdb, tc.opts...)
			release, err := tc.take(ctx, holder, name, dlock.LeaseTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer release(ctx)
			mine := redis.NewClient(&redis.Options{Addr: s.Addr()})
			t.Cleanup(func() { mine.Close() })
			c := newClient(t, mine, tc.opts...)
			t.Cleanup(func() { c.Close(ctx) })
			res := make(chan error, 1)
			go func() {
				_, err := tc.take(ctx, c, name, dlock.LeaseTTL(30*time.Second), dlock.MaxWait(20*time.Second))
				res <- err
			}()
			if !waitFor(5*time.Second, func() bool { return len(rdb.PubSubChannels(ctx, "dlock:{"+name+"*}:ch").Val()) > 0 }) {
				select {
				case err := <-res:
					t.Fatalf("the waiter never listened for a release: its wait ended with %v", err)
				default:
					t.Fatalf("the waiter never listened for a release; channels: %v", rdb.PubSubChannels(ctx, "*").Val())
				}
			}
			mine.Close()
			select {
			case err := <-res:
				if !errors.Is(err, dlock.ErrClosed) {
					t.Errorf("the wait ended with %v; want ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the wait went on 5s after its client was closed")
			}
		})
	}
}

// Observe's channel closes once the Redis client under its Client is
// closed: no read can succeed after it, and the observer stops reading.
func TestObserveEndsWhenItsRedisClientIsClosed(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := newElection(t, newClient(t, rdb), "closed-observed").Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	mine := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { mine.Close() })
	ch := newElection(t, newClient(t, mine), "closed-observed").Observe(ctx)
	if ld := <-ch; ld.Value != "v" {
		t.Fatalf("Observe's first leader = %+v; want the one who proclaimed v", ld)
	}
	mine.Close()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("Observe's channel was still open 5s after its Redis client was closed")
		}
	}
}
