package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A fair waiter whose Redis client is closed under it while it waits in the
// queue ends its wait with ErrClosed, as an unfair waiter does, not with
// its MaxWait run out and the holder named: the closed client is why it
// cannot be served.
func TestFairWaiterWhoseRedisClientClosesEndsWithErrClosed(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	holder := newClient(t, rdb)
	name := "closed-under-fair-waiter"
	if _, err := holder.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	mine := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { mine.Close() })
	c := newClient(t, mine)
	t.Cleanup(func() { c.Close(ctx) })
	res := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name, dlock.LeaseTTL(30*time.Second), dlock.MaxWait(3*time.Second))
		res <- err
	}()
	if !waitFor(2*time.Second, func() bool { i, _ := holder.Inspect(ctx, name); return i.Queued == 1 }) {
		t.Fatal("the waiter never queued")
	}
	mine.Close()
	select {
	case err := <-res:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("the wait ended with %v; want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait outlived its MaxWait")
	}
}
