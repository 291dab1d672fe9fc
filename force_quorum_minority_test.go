package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A Redlock ForceRelease that reports no error has left the forced lease
// unable to hold a majority. Five nodes: the holder's lease was granted by
// nodes 0-2 (a majority: its TryAcquire returned), while its requests to
// nodes 3 and 4 are still on their way. The force ends the lease on nodes
// 0 and 1, fails on node 2 (it cannot reach it, or node 2 answers with an
// error reply: the forcer's user may not run scripts there), and finds
// nothing yet on nodes 3 and 4: four answers, a majority. Then the
// holder's requests land on nodes 3 and 4 (no marker refuses them there:
// the force read no lease on them), and the lease is on nodes 2, 3 and 4,
// a majority. A force that reported success must not leave the lease
// extendable, nor the lock closed to a new holder; one that cannot say so
// must report an error (try again).
func TestRedlockForceReleaseReportsNoErrorOnlyWhenTheLeaseCannotRegainAMajority(t *testing.T) {
	t.Parallel()
	for _, node2 := range []string{"unreachable", "error reply"} {
		t.Run(node2, func(t *testing.T) {
			t.Parallel()
			forceWithANodeFailedAndLateGrants(t, node2 == "error reply")
		})
	}
}

func forceWithANodeFailedAndLateGrants(t *testing.T, errorReply bool) {
	leakcheck.Check(t)
	ctx := t.Context()
	const n = 5
	var srvs []*redistest.Server
	var holderNodes, forcerNodes, otherNodes []redis.UniversalClient
	var delayed []*redistest.Proxy
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := range n {
		s := redistest.Start(t, redistest.TCP())
		srvs = append(srvs, s)
		hAddr := s.Addr()
		if i >= 3 { // the holder reaches nodes 3 and 4 through a proxy that will delay its requests
			p := redistest.NewProxy(t, s.Addr())
			delayed = append(delayed, p)
			hAddr = p.Addr()
		}
		holderNodes = append(holderNodes, client(hAddr))
		fAddr := s.Addr()
		if i == 2 && !errorReply { // the forcer cannot reach node 2
			fAddr = "127.0.0.1:1" // (nothing listens there)
		}
		fc := client(fAddr)
		if i == 2 && errorReply { // node 2 answers the forcer's scripts NOPERM
			if _, err := s.Do(ctx, "ACL", "SETUSER", "operator", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval", "-script"); err != nil {
				t.Fatal(err)
			}
			fc = redis.NewClient(&redis.Options{Addr: fAddr, Username: "operator", Password: "pw", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { fc.Close() })
		}
		forcerNodes = append(forcerNodes, fc)
		otherNodes = append(otherNodes, client(s.Addr()))
	}
	holder := newRedlock(t, holderNodes, 300*time.Millisecond, dlock.WithAutoExtend(false))
	defer holder.Close(context.WithoutCancel(ctx))
	forcer := newRedlock(t, forcerNodes, 300*time.Millisecond)
	defer forcer.Close(context.WithoutCancel(ctx))
	other := newRedlock(t, otherNodes, 300*time.Millisecond)
	defer other.Close(context.WithoutCancel(ctx))

	// Every client's connections and scripts first, undelayed.
	for _, c := range []*dlock.Client{holder, other} {
		w := firstLease(t, c, "force-minority-warm")
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	forcer.ForceRelease(ctx, "force-minority-warm") // (node 2 fails it)

	for _, p := range delayed {
		p.Delay(2*time.Second, 0)
	}
	l, err := holder.TryAcquire(ctx, "force-minority", dlock.LeaseTTL(30*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire = %v", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	key := dlock.DefaultPrefix + "{force-minority}"
	ok, ferr := forcer.ForceRelease(ctx, "force-minority")
	t.Logf("ForceRelease = %v, %v", ok, ferr)
	// The holder's requests to nodes 3 and 4 land.
	if !waitFor(10*time.Second, func() bool { return exists(ctx, srvs[3], key) && exists(ctx, srvs[4], key) }) {
		t.Fatal("the holder's delayed requests did not land on nodes 3 and 4")
	}
	for _, p := range delayed {
		p.Delay(0, 0)
	}
	if ferr != nil { // (told to try again: the operator forces again)
		if ok || !strings.Contains(ferr.Error(), "node 2") {
			t.Errorf("ForceRelease = %v, %v; want false and an error that names node 2", ok, ferr)
		}
		return
	}
	t.Logf("after the force reported %v, nil: the lease is on %d of %d nodes", ok, keysOn(ctx, srvs, key), n)
	if err := l.Extend(ctx, 30*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the forced holder's Extend after a ForceRelease that reported no error = %v; want ErrNotHeld", err)
	}
	if nl, err := other.TryAcquire(ctx, "force-minority"); err != nil {
		t.Errorf("a new holder's TryAcquire after a ForceRelease that reported no error = %v; want the lock", err)
	} else {
		nl.Release(ctx)
	}
}
