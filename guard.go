package dlock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/script"
)

// Guard protects resources kept in Redis with fencing tokens: it writes a
// value only if the writer's fence is not older than the newest the resource
// has accepted. A holder that lost its lock during a pause, and writes late,
// is refused, whatever the clocks did.
//
// Each resource is a hash at its key with the fields v (the value), fence
// and token (of the newest accepted write). The same rule for a SQL table:
//
//	UPDATE resource SET value = $1, fence = $2, token = $3
//	WHERE id = $4 AND (fence < $2 OR (fence = $2 AND token = $3))
//
// and treat "0 rows updated" as a stale write.
type Guard struct {
	rdb redis.Cmdable
}

// NewGuard returns a Guard for resources in rdb, which may be another Redis
// than the one holding the locks.
func NewGuard(rdb redis.Cmdable) *Guard { return &Guard{rdb: rdb} }

// Write sets the resource at key to value on behalf of the holder of a lock
// with the given fencing token and owner token (Lock.Fence, Lock.Token). It
// returns an error wrapping ErrStaleFence if a write with a higher fence, or
// the same fence from another owner, was accepted before.
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

// Read returns the value of the resource at key and the fence of the write
// that set it. A resource never written has the value "" and fence 0.
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
