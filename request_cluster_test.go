package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// On a Cluster, a release request is published on the lock's shard, where
// its watching holder listens (SSUBSCRIBE), with scripts and without.
func TestReleaseRequestReachesAWatchingHolderOnACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster")
	}
	_, cc := startCluster(t)
	ctx := t.Context()
	for name, c := range map[string]*dlock.Client{
		"scripts":         newClient(t, cc, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)),
		"without scripts": newClient(t, cc, dlock.WithoutScripts(), dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)),
	} {
		for _, lock := range []string{"asked-a", "asked-b", "asked-c"} { // (names on several shards)
			l, err := c.TryAcquire(ctx, lock)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := askUntilHeard(t, c, l, "drain"); got != "drain" {
				t.Errorf("%s: the holder of %q heard %q, want %q", name, lock, got, "drain")
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s: Release(%q) = %v", name, lock, err)
			}
		}
	}
}
