package dlock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A guarded Do on a Cluster whose resource's slot is being migrated does
// not report commands it never ran: go-redis's Cluster Watch, redirected
// back and forth (ASK from the source, which lacks the key; MOVED from the
// target, without ASKING), gives up with no error and without running the
// transaction, and Do returned nil as if its commands were applied.
func TestGuardDoOnAMigratingSlotReportsNoCommandsItDidNotRun(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	nodes, cc := startCluster(t)
	ctx := t.Context()
	const resource, data = "res:{moving}", "res:{moving}:data"
	_, _, done := migrating(t, nodes, cc, resource)
	defer done()
	err := dlock.NewGuard(cc).Do(ctx, resource, 1, "token", func(p redis.Pipeliner) error {
		return p.Set(ctx, data, "v", 0).Err()
	})
	if err != nil {
		return // (not applied, and said so)
	}
	for _, n := range nodes {
		if v, _ := n.Do(ctx, "EXISTS", data); v == int64(1) {
			return // applied
		}
	}
	t.Error("Guard.Do returned nil on a slot being migrated, and its commands were not applied anywhere")
}
