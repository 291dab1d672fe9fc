package dlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A foreign value at a Guard's resource key is named as the resource's, and
// a queued command's own failure in Do comes back as Redis gave it, not as
// a lock held as another kind.
func TestGuardNamesTheResourceKeyAndQueuedCommandsErrorsAsTheyAre(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	g := dlock.NewGuard(rdb)
	rdb.Set(ctx, "res:foreign", "a string", 0)

	for what, err := range guardCalls(ctx, g, "res:foreign") {
		if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), "the resource key holds a value of another type") ||
			strings.Contains(err.Error(), "lock key") {
			t.Errorf("%s on a foreign resource key: %v; want ErrWrongType naming the resource key", what, err)
		}
	}

	rdb.Set(ctx, "res:other", "a string", 0)
	err := g.Do(ctx, "res:ok", 1, "tok", func(p redis.Pipeliner) error {
		p.LPush(ctx, "res:other", "x") // the caller's own command, on a string
		return nil
	})
	if err == nil || errors.Is(err, dlock.ErrWrongType) || strings.Contains(err.Error(), "lock key") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Do whose queued command failed: %v; want Redis's own error, not a lock's", err)
	}
}
