package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/script"
)

// Guard writes resources in Redis only with a fence not below the newest seen.
type Guard struct {
	rdb redis.Cmdable
}

// NewGuard returns a Guard for resources in rdb, which may be any Redis.
func NewGuard(rdb redis.Cmdable) *Guard { return &Guard{rdb: rdb} }

// Write sets key's resource to value for the lease of fence and token
// ([Lock.Fence], [Lock.Token]). [ErrStaleFence]: a higher fence, or another
// lease's same fence, wrote before; [ErrInvalid]: no positive fence or token.
func (g *Guard) Write(ctx context.Context, key, value string, fence int64, token string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty resource key", ErrInvalid)
	case fence <= 0 || token == "":
		return fmt.Errorf("%w: write to %q: a positive fence and a token are needed (fence %d, token %q)", ErrInvalid, key, fence, token)
	}
	v, err := script.Guard.Run(ctx, g.rdb, []string{key}, value, fence, token).Int64Slice()
	switch {
	case err != nil:
		return fmt.Errorf("dlock: guarded write %q: %w", key, resourceErr(err))
	case len(v) != 2:
		return fmt.Errorf("dlock: guarded write %q: unexpected reply %v", key, v)
	case v[0] != 1:
		return staleWrite(key, fence, v[1])
	}
	return nil
}

// staleWrite is the refusal of a write to key with fence: high was accepted.
func staleWrite(key string, fence, high int64) error {
	return fmt.Errorf("%w: write to %q with fence %d refused, %d was accepted before", ErrStaleFence, key, fence, high)
}

// doTries bounds how often Do reads the resource's fence again after a
// concurrent write to it aborted the transaction.
const doTries = 16

// Do runs the commands fn queues in one MULTI, guarded as [Guard.Write] at
// resource (else [ErrStaleFence], fn not called). fn's keys must not include
// resource and, on a Cluster, must share its slot. It returns the first error;
// [ErrInvalid]: bad input. See docs/guarantees.md.
func (g *Guard) Do(ctx context.Context, resource string, fence int64, token string, fn func(redis.Pipeliner) error) error {
	// (A Redis client that runs transactions: *redis.Client,
	// *redis.ClusterClient, *redis.Ring.)
	w, ok := g.rdb.(interface {
		Watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error
	})
	switch {
	case resource == "":
		return fmt.Errorf("%w: empty resource key", ErrInvalid)
	case fence <= 0 || token == "" || fn == nil:
		return fmt.Errorf("%w: guarded do %q: a positive fence, a token and a func are needed", ErrInvalid, resource)
	case !ok:
		return fmt.Errorf("%w: guarded do %q: the Guard's Redis client cannot WATCH", ErrInvalid, resource)
	}
	for range doTries {
		var fnErr, readErr error // (a try that aborted ran fn without error)
		queued := false          // (fn's commands went to a MULTI that may have run)
		err := w.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.HMGet(ctx, resource, "fence", "token").Result()
			if err != nil {
				readErr = err
				return err
			}
			fs, _ := cur[0].(string)
			high, _ := strconv.ParseInt(fs, 10, 64)
			if holder, ok := cur[1].(string); fence < high || fence == high && ok && holder != token {
				return staleWrite(resource, fence, high)
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.HSet(ctx, resource, "fence", fence, "token", token)
				fnErr = fn(p)
				queued = fnErr == nil
				return fnErr
			})
			return err
		}, resource)
		switch _, reply := errors.AsType[redis.Error](err); {
		case errors.Is(err, redis.TxFailedErr): // (a write to the fence since it was read)
			continue
		case err == nil && !queued: // (a Cluster client that gave up following redirects, its slot being migrated, without running it)
			return fmt.Errorf("dlock: guarded do %q: %w", resource, backend.ErrRedirected)
		case err == nil || fnErr != nil || errors.Is(err, ErrStaleFence):
			return err
		case readErr != nil:
			return fmt.Errorf("dlock: guarded do %q: %w", resource, resourceErr(readErr))
		case queued && !reply:
			return fmt.Errorf("dlock: guarded do %q: no reply to EXEC, the commands may have been applied: %w", resource, err)
		default: // (the transaction's, or a queued command's own error, as Redis gave it)
			return fmt.Errorf("dlock: guarded do %q: %w", resource, backend.MatchClosed(err))
		}
	}
	return fmt.Errorf("dlock: guarded do %q: the fence changed during each of %d tries", resource, doTries)
}

// Read returns the resource's value and fence; "" and 0 if never written.
func (g *Guard) Read(ctx context.Context, key string) (string, int64, error) {
	v, err := g.rdb.HMGet(ctx, key, "v", "fence").Result()
	if err != nil {
		return "", 0, fmt.Errorf("dlock: guarded read %q: %w", key, resourceErr(err))
	}
	value, _ := v[0].(string)
	fs, _ := v[1].(string)
	fence, err := strconv.ParseInt(fs, 10, 64)
	if err != nil && fs != "" { // (none: never written, fence 0)
		return "", 0, fmt.Errorf("dlock: guarded read %q: the fence field is not an integer", key)
	}
	return value, fence, nil
}

// resourceErr is Redis's error err about a Guard's resource key: one that
// holds another type than the Guard's hash is foreign ([ErrWrongType]); a
// closed Redis client's matches ErrClosed.
func resourceErr(err error) error {
	if strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return backend.Detailed("the resource key holds a value of another type", ErrWrongType, err)
	}
	return backend.RedisErr(err)
}
