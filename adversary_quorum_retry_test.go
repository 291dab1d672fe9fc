package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A release retried in the background on a node where it failed must not
// end a newer lease that someone else took there meanwhile: the node's copy
// of the released lease expired (or the node came back empty), another
// client took the lock on every node, and only then does the retry reach
// the node. release.lua compares tokens, so the newer lease must survive
// on all three nodes, the retry must stop (Close returns), and no goroutine
// may be left.
func TestQuorumAttackRetriedReleaseSparesANewerLease(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, how := range []string{"expired", "restarted"} {
		t.Run(how, func(t *testing.T) {
			leakcheck.Check(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var (
				servers []*redistest.Server
				ps      []*redistest.Proxy
				via     []redis.UniversalClient
				direct  []redis.UniversalClient
			)
			for range 3 {
				s := redistest.Start(t, redistest.TCP())
				p := redistest.NewProxy(t, s.Addr())
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
				t.Cleanup(func() { c.Close() })
				servers, ps, via = append(servers, s), append(ps, p), append(via, c)
				direct = append(direct, s.Client(t))
			}
			name := "newer-" + how
			key := "dlock:{" + name + "}"
			c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(time.Second), dlock.WithAutoExtend(false))
			l, err := c.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if !waitFor(5*time.Second, func() bool { n, _ := keyOnNodes(ctx, toClients(direct), key); return n == 3 }) {
				t.Fatal("the lease never reached node 2")
			}
			ps[2].Stall() // node 2 gets the release only after the cut: never
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release with 2 of 3 nodes answering: %v", err)
			}
			if how == "restarted" {
				servers[2].Restart()
			}
			n2 := direct[2].(*redis.Client)
			if !waitFor(10*time.Second, func() bool { return n2.Exists(ctx, key).Val() == 0 }) {
				t.Fatal("node 2's copy of the released lease never expired")
			}
			other := newRedlock(t, direct, time.Second, dlock.LeaseTTL(20*time.Second), dlock.WithAutoExtend(false))
			var l2 *dlock.Lock
			if !waitFor(10*time.Second, func() bool {
				l2, err = other.TryAcquire(ctx, name)
				return err == nil
			}) {
				t.Fatalf("the next client never took the lock: %v", err)
			}
			ps[2].Cut() // the held release is dropped: it is retried now
			dctx, dcancel := context.WithTimeout(ctx, 40*time.Second)
			defer dcancel()
			if err := c.Close(dctx); err != nil {
				t.Fatalf("Close with the retried release = %v, want it to end", err)
			}
			for i, d := range direct {
				if v := d.Get(ctx, key).Val(); holderOf(v) != l2.Token() {
					t.Errorf("node %d holds %q after the retried release, want the newer lease %s", i, v, l2.Token())
				}
			}
			if err := l2.Extend(ctx, 20*time.Second); err != nil {
				t.Errorf("the newer lease's Extend = %v", err)
			}
			if err := l2.Release(ctx); err != nil {
				t.Errorf("the newer lease's Release = %v", err)
			}
		})
	}
}

// A node that stays stalled (a black hole: nothing answers, nothing is
// refused) gets the release retried a bounded number of times: Close
// returns by itself while the node is still stalled, and nothing keeps
// running after.
func TestQuorumAttackReleaseRetryGivesUpOnABlackHole(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	ps, via, direct := proxiedQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(20*time.Second), dlock.WithAutoExtend(false))
	var locks []*dlock.Lock
	for i := range 20 {
		l, err := c.TryAcquire(ctx, "hole-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	if !waitFor(5*time.Second, func() bool { n, _ := keyOnNodes(ctx, direct, "dlock:{hole-t}"); return n == 3 }) {
		t.Fatal("the leases never reached node 2")
	}
	ps[2].Stall()
	start := time.Now()
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release with 2 of 3 nodes answering: %v", err)
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 45*time.Second)
	defer dcancel()
	if err := c.Close(dctx); err != nil {
		t.Fatalf("Close while a node stays stalled = %v, want the retries to give up", err)
	}
	t.Logf("the background work on the stalled node ended %v after the releases began", time.Since(start).Round(time.Second))
	if n, _ := keyOnNodes(ctx, direct[:2], "dlock:{hole-a}"); n != 0 {
		t.Errorf("the answering nodes still hold a released lease")
	}
	ps[2].Cut()
}

func toClients(us []redis.UniversalClient) []*redis.Client {
	var cs []*redis.Client
	for _, u := range us {
		cs = append(cs, u.(*redis.Client))
	}
	return cs
}
