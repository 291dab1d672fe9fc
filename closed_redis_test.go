package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/redistest"
)

// A Client whose Redis client was closed under it fails its calls, a held
// Lock's too, with the one ErrClosed, as after its own Close: on go-redis (New) and through a
// driver (NewFrom), whose closed Conn says it the driver's way.
func TestCallsThroughAClosedRedisClientFailWithErrClosed(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	for _, road := range []string{"New", "NewFrom"} {
		t.Run(road, func(t *testing.T) {
			c, rdb := onOwnRedisClient(t, s, road)
			l, err := c.TryAcquire(t.Context(), "closed-held-"+road)
			if err != nil {
				t.Fatal(err)
			}
			rdb.Close()
			if err := l.Extend(t.Context(), time.Second); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("Extend after the Redis client's Close = %v; want ErrClosed", err)
			}
			if err := l.Release(t.Context()); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("Release after the Redis client's Close = %v; want ErrClosed", err)
			}
			if _, err := c.TryAcquire(t.Context(), "closed-under-"+road); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("TryAcquire after the Redis client's Close = %v; want ErrClosed", err)
			}
			if _, err := c.Inspect(t.Context(), "closed-under-"+road); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("Inspect after the Redis client's Close = %v; want ErrClosed", err)
			}
		})
	}
}

// onOwnRedisClient returns a Client on a go-redis client of its own for s,
// which the test may close under it: made with New, or with NewFrom
// through the go-redis driver (road "NewFrom").
func onOwnRedisClient(t *testing.T, s *redistest.Server, road string) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	var c *dlock.Client
	var err error
	if road == "New" {
		c, err = dlock.New(rdb)
	} else {
		c, err = dlock.NewFrom(goredisdriver.Conn(rdb))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(t.Context()) })
	return c, rdb
}
