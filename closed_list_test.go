package dlock_test

import (
	"errors"
	"testing"

	"github.com/dlockio/dlock"
)

// Client.List through a Redis client closed under the Client fails with
// ErrClosed, as the calls that name a lock do, on go-redis (New) as
// through a driver (NewFrom).
func TestListThroughAClosedRedisClientFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	for _, road := range []string{"New", "NewFrom"} {
		t.Run(road, func(t *testing.T) {
			c, rdb := onOwnRedisClient(t, s, road)
			rdb.Close()
			if _, err := c.List(t.Context(), "*"); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("List after the Redis client's Close = %v; want ErrClosed", err)
			}
		})
	}
}
