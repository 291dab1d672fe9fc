package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// While a lock's slot is being migrated, the script-free mode's
// transactions are redirected back and forth (ASK from the source, which
// lacks the keys; MOVED from the target, without ASKING), and go-redis's
// Cluster Watch gives up on the redirects with no error and without having
// run the transaction. A call must not take that for Redis's answer: a
// free lock is not refused as held by another holder, and a lease whose key
// moved already is not reported lost by its Release (it is still held, on
// the target).
func TestWithoutScriptsOnAMigratingSlotTakesNoRedirectForAnAnswer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	leakcheck.Check(t)
	nodes, cc := startCluster(t)
	ctx := t.Context()
	// A lease far longer than the test: no extension runs meanwhile.
	c := newClient(t, cc, dlock.WithoutScripts(), dlock.LeaseTTL(time.Minute))
	t.Run("a free lock", func(t *testing.T) {
		_, _, done := migrating(t, nodes, cc, "dlock:{migrating-free}")
		defer done()
		l, err := c.TryAcquire(ctx, "migrating-free")
		if errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryAcquire of a free lock whose slot is being migrated = %v, want it taken or a Redis error", err)
		}
		if l != nil {
			l.Release(ctx)
		}
	})

	t.Run("a lease whose key moved", func(t *testing.T) {
		l, err := c.TryAcquire(ctx, "migrating-held")
		if err != nil {
			t.Fatal(err)
		}
		src, dst, done := migrating(t, nodes, cc, l.Key())
		defer done()
		if _, err := src.Do(ctx, "MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS", l.Key()); err != nil {
			t.Fatal(err)
		}
		err = l.Release(ctx)
		if errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Release of a lease whose key moved to the slot's new master = %v, want nil or a Redis error: the lease is held there", err)
		}
	})
}

// migrating starts moving the slot of key from its master to another of
// the Cluster's nodes (the masters), and returns the source, the target and
// the end of the move (the slot given to the target).
func migrating(t *testing.T, nodes []*redistest.Server, cc *redis.ClusterClient, key string) (src, dst *redistest.Server, done func()) {
	t.Helper()
	ctx := t.Context()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		id, err := n.Do(ctx, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = fmt.Sprint(id)
	}
	slot := cc.ClusterKeySlot(ctx, key).Val()
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	s, d := 0, 0
	for i, n := range nodes {
		if n.Addr() == m.Options().Addr {
			s, d = i, (i+1)%len(nodes)
		}
	}
	for _, cmd := range [][]any{{nodes[d], "IMPORTING", ids[s]}, {nodes[s], "MIGRATING", ids[d]}} {
		if _, err := cmd[0].(*redistest.Server).Do(ctx, "CLUSTER", "SETSLOT", slot, cmd[1], cmd[2]); err != nil {
			t.Fatal(err)
		}
	}
	return nodes[s], nodes[d], func() {
		for _, n := range nodes {
			n.Do(context.Background(), "CLUSTER", "SETSLOT", slot, "NODE", ids[d])
		}
	}
}
