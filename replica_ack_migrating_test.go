package dlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// With replica acknowledgement, a lock's script and its WAIT go to the
// master of its slot on one connection, not through the Cluster client's
// redirects. While the slot is being migrated, Redis runs the script on
// neither master (ASK, TRYAGAIN: its keys are not all on one); a call that
// meets that tries again after a pause, a few times, and succeeds once the
// move has ended. Here the first such reply ends the move.
func TestReplicaAckRidesOutASlotMigration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster with replicas")
	}
	leakcheck.Check(t)
	nodes := redistest.StartCluster(t, 3, 1)
	masters := nodes[:3]
	var addrs []string
	for _, n := range masters {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	// The move to end at the next ASK or TRYAGAIN a master answers.
	var mu sync.Mutex
	var end func()
	endMove := func() {
		mu.Lock()
		defer mu.Unlock()
		if end != nil {
			end()
			end = nil
		}
	}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(redirected{endMove}) })
	ctx := t.Context()
	c := newClient(t, cc, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false), dlock.WithReplicaAck(1, 2*time.Second))

	t.Run("a free lock", func(t *testing.T) {
		_, dst, done := migrating(t, masters, cc, "dlock:{acked-migrating-free}")
		mu.Lock()
		end = done
		mu.Unlock()
		l, err := c.TryAcquire(ctx, "acked-migrating-free")
		if err != nil {
			t.Fatalf("TryAcquire with replica ack of a free lock whose slot is being migrated = %v, want it taken once the move ends", err)
		}
		if !exists(ctx, dst, l.Key()) {
			t.Errorf("the lock taken is not on the slot's new master")
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	})

	t.Run("a lease whose key moved", func(t *testing.T) {
		l, err := c.TryAcquire(ctx, "acked-migrating-held")
		if err != nil {
			t.Fatal(err)
		}
		src, dst, done := migrating(t, masters, cc, l.Key())
		if _, err := src.Do(ctx, "MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS", l.Key()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		end = done
		mu.Unlock()
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Errorf("Extend with replica ack of a lease whose slot is being migrated = %v, want nil once the move ends", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
		if exists(ctx, dst, l.Key()) {
			t.Errorf("the released lock is still on the slot's new master")
		}
	})
}

// redirected is a go-redis hook that calls f when a pipeline's reply is an
// ASK or a TRYAGAIN.
type redirected struct{ f func() }

func (redirected) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (redirected) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r redirected) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && (strings.HasPrefix(e.Error(), "ASK ") || strings.HasPrefix(e.Error(), "TRYAGAIN")) {
				r.f()
				break
			}
		}
		return err
	}
}
