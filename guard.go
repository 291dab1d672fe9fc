package dlock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/script"
)

// Guard writes resources kept in Redis (a hash per key) only for a fence not
// older than the newest the resource accepted, so a holder that lost its lock
// and writes late is refused.
type Guard struct {
	rdb redis.Cmdable
}

// NewGuard returns a Guard for resources in rdb, which may be any Redis.
func NewGuard(rdb redis.Cmdable) *Guard { return &Guard{rdb: rdb} }

// Write sets the resource at key to value for the lease with fence and token
// ([Lock.Fence], [Lock.Token]); [ErrStaleFence] if a higher fence, or the same
// fence of another lease, wrote before.
func (g *Guard) Write(ctx context.Context, key, value string, fence int64, token string) error {
	if key == "" {
		return fmt.Errorf("%w: empty resource key", ErrInvalid)
	}
	v, err := script.Guard.Run(ctx, g.rdb, []string{key}, value, fence, token).Int64Slice()
	if err != nil {
		return fmt.Errorf("dlock: guarded write %q: %w", key, backend.RedisErr(err))
	}
	if len(v) != 2 {
		return fmt.Errorf("dlock: guarded write %q: unexpected reply %v", key, v)
	}
	if v[0] != 1 {
		return fmt.Errorf("%w: write to %q with fence %d refused, %d was accepted before", ErrStaleFence, key, fence, v[1])
	}
	return nil
}

// Read returns the resource's value and fence; "" and 0 if never written.
func (g *Guard) Read(ctx context.Context, key string) (string, int64, error) {
	v, err := g.rdb.HMGet(ctx, key, "v", "fence").Result()
	if err != nil {
		return "", 0, fmt.Errorf("dlock: guarded read %q: %w", key, backend.RedisErr(err))
	}
	value, _ := v[0].(string)
	fs, _ := v[1].(string)
	if fs == "" {
		return value, 0, nil
	}
	fence, err := strconv.ParseInt(fs, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("dlock: guarded read %q: the fence field is not an integer", key)
	}
	return value, fence, nil
}
