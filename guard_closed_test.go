package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A Guard whose Redis client was closed fails each call with an error that
// matches ErrClosed, as a Client's calls do after their Redis client's
// Close: the caller tells a closed client from a resource it may retry.
func TestGuardCallsThroughAClosedRedisClientMatchErrClosed(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	mine := s.Client(t)
	g := dlock.NewGuard(mine)
	mine.Close()
	for what, err := range guardCalls(t.Context(), g, "res:closed") {
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("%s through a closed Redis client: %v; want ErrClosed", what, err)
		}
	}
}

// guardCalls makes one call of each of g's kinds (Write, Do, Read) on the
// resource key and returns their errors by kind.
func guardCalls(ctx context.Context, g *dlock.Guard, key string) map[string]error {
	_, _, rerr := g.Read(ctx, key)
	return map[string]error{
		"write": g.Write(ctx, key, "v", 1, "tok"),
		"do":    g.Do(ctx, key, 1, "tok", func(redis.Pipeliner) error { return nil }),
		"read":  rerr,
	}
}
