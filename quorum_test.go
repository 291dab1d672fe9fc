package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// startQuorum starts n independent servers on loopback TCP and returns them
// with a client for each. The clients do not retry, so a dead node costs
// one failed dial.
func startQuorum(t *testing.T, n int) ([]*redistest.Server, []redis.UniversalClient) {
	t.Helper()
	leakcheck.Check(t)
	var srvs []*redistest.Server
	var nodes []redis.UniversalClient
	for range n {
		s := redistest.Start(t, redistest.TCP())
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		srvs = append(srvs, s)
		nodes = append(nodes, c)
	}
	return srvs, nodes
}

func keysOn(ctx context.Context, srvs []*redistest.Server, key string) int {
	n := 0
	for _, s := range srvs {
		if exists(ctx, s, key) {
			n++
		}
	}
	return n
}

func TestRedlockSurvivesMinorityLoss(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 5)
	ctx := t.Context()
	c := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(2*time.Second))
	srvs[0].Kill()
	srvs[3].Kill()

	l, err := c.Acquire(ctx, "q")
	if err != nil {
		t.Fatalf("Acquire with 2 of 5 nodes dead = %v, want the lock", err)
	}
	if n := keysOn(ctx, srvs, "dlock:{q}"); n != 3 {
		t.Errorf("lock key on %d nodes, want the 3 alive", n)
	}
	if _, err := c.TryAcquire(ctx, "q"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("second TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := l.Extend(ctx, 3*time.Second); err != nil {
		t.Errorf("Extend with 2 of 5 nodes dead = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release with 2 of 5 nodes dead = %v", err)
	}
	if n := keysOn(ctx, srvs, "dlock:{q}"); n != 0 {
		t.Errorf("lock key left on %d nodes after Release", n)
	}

	// With a third node dead there is no majority: a clean failure.
	srvs[4].Kill()
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = c.Acquire(actx, "q")
	qe, ok := errors.AsType[*dlock.QuorumError](err)
	if !ok || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with 3 of 5 nodes dead = %v, want a QuorumError matching ErrNotAcquired, and the deadline", err)
	}
	if _, err := c.TryAcquire(ctx, "q"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with 3 of 5 nodes dead = %v, want ErrNotAcquired", err)
	}
	if qe.Held != 2 || qe.Need != 3 || len(qe.Nodes) != 5 {
		t.Errorf("QuorumError = %+v, want 2 held of 3 needed, 5 node errors", qe)
	}
	if n := keysOn(ctx, srvs, "dlock:{q}"); n != 0 {
		t.Errorf("failed acquisition left the lock key on %d surviving nodes, want 0", n)
	}
}

// A frozen node costs the per-node timeout, not the TTL or the client's
// read timeout (5s by default).
func TestRedlockFrozenNodeCostsNodeTimeout(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 5)
	ctx := t.Context()
	c := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(10*time.Second))
	for _, n := range nodes { // open the connections while everyone answers
		n.Ping(ctx)
	}
	srvs[2].Pause()
	defer srvs[2].Resume()
	for i := range 3 {
		start := time.Now()
		l, err := c.Acquire(ctx, "frozen")
		if err != nil {
			t.Fatalf("Acquire %d with one node frozen = %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d with one node frozen = %v", i, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("acquire+release %d with one node frozen took %v; the per-node timeout is 100ms", i, d)
		}
	}
	srvs[2].Resume()
}

// A holder whose majority dies is told: Done closes when its validity runs
// out, which is before the lease can expire in Redis. The loss is knowable
// from the kills on: no extension can reach a majority after them, so the
// validity read then is the one that ends the lease.
func TestRedlockHolderLosingMajoritySignalled(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	const ttl = 2 * time.Second
	c := newRedlock(t, nodes, 250*time.Millisecond, dlock.LeaseTTL(ttl),
		dlock.WithDrift(250*time.Millisecond)) // room for a loaded machine's timer delays
	start := time.Now()
	l, err := c.TryAcquire(ctx, "maj")
	if err != nil {
		t.Fatal(err)
	}
	survivor := slices.IndexFunc(srvs, func(s *redistest.Server) bool { return exists(ctx, s, l.Key()) })
	if survivor < 0 {
		t.Fatal("the lease is on no node")
	}
	for i, s := range srvs {
		if i != survivor {
			s.Kill()
		}
	}
	valid := l.ValidUntil()
	// The lease expires in Redis no sooner than a TTL after start, nor than
	// the surviving node's PTTL after it was asked (the acquisition's own
	// time, long on a loaded machine, counts in neither the lease nor this).
	asked := time.Now()
	pttl, err := srvs[survivor].Do(ctx, "PTTL", l.Key())
	if ms, _ := pttl.(int64); err != nil || ms <= 0 {
		t.Fatalf("PTTL on the surviving node = %v, %v", pttl, err)
	}
	expires := asked.Add(time.Duration(pttl.(int64)) * time.Millisecond)
	if expires.Before(start.Add(ttl)) {
		expires = start.Add(ttl)
	}
	if !valid.Before(expires) {
		t.Errorf("validity ends %v after the lease can expire in Redis", valid.Sub(expires))
	}
	// A timer the test sets for the validity's end: how late this machine
	// runs timers now, which the library's expiry timer cannot beat.
	fired := make(chan time.Time, 1)
	time.AfterFunc(time.Until(valid), func() { fired <- time.Now() })
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("Done() still open 5s after the majority died")
	}
	closedAt, probe := time.Now(), <-fired
	const hop = 50 * time.Millisecond // a goroutine's wake-up after the timer that woke it
	if !closedAt.Before(expires) && closedAt.Sub(probe) > hop {
		t.Errorf("Done closed %v after the lease could have expired in Redis, %v after the validity ran out (a timer for then fired %v late)",
			closedAt.Sub(expires), closedAt.Sub(valid), probe.Sub(valid))
	}
	if got := l.ValidUntil(); !got.Equal(valid) {
		t.Errorf("validity moved by %v without a majority", got.Sub(valid))
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Err() = %v, want ErrNotHeld", err)
	}
	l.Release(ctx)
}

func TestRedlockFencesIncreaseThroughFailures(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(2*time.Second))
	var last int64
	take := func(step string) {
		t.Helper()
		var l *dlock.Lock
		var err error
		waitFor(5*time.Second, func() bool { l, err = c.TryAcquire(ctx, "f"); return err == nil })
		if err != nil {
			t.Fatalf("%s: TryAcquire = %v", step, err)
		}
		// (As the acquisition: a node may miss the 100ms node timeout on a
		// loaded machine.)
		var f int64
		waitFor(5*time.Second, func() bool { f, err = l.Fence(ctx); return err == nil })
		if err != nil {
			t.Fatalf("%s: Fence = %v", step, err)
		}
		if f <= last {
			t.Errorf("%s: Fence() = %d, want > %d", step, f, last)
		}
		last = f
		l.Release(ctx)
	}
	take("all up")
	// Counters far ahead on a majority: any majority includes one of them,
	// and must take its fence.
	srvs[0].Do(ctx, "SET", "dlock:{f}:fence", "9000000000000000")
	srvs[1].Do(ctx, "SET", "dlock:{f}:fence", "9000000000000000")
	take("counters far ahead")
	if last <= 9000000000000000 {
		t.Errorf("fence %d did not take the highest counter of the majority", last)
	}
	srvs[0].Kill()
	take("node 0 dead") // nodes 1 and 2 got the high fence written back
	srvs[0].Restart()   // back, empty
	srvs[1].Kill()
	take("node 0 back empty, node 1 dead")
	srvs[1].Restart()
	srvs[2].Kill()
	take("node 1 back empty, node 2 dead")
}

// Goroutines and worker processes contend on a 3-node quorum while one node
// is killed and restarted empty; the counter lives on a separate server.
// The node stays down for a TTL before it comes back, as Redlock requires of
// a node without persistence: back at once, empty, it could grant a lease
// that a majority still holds elsewhere.
func TestRedlockMutualExclusion(t *testing.T) {
	t.Parallel()
	long(t)
	srvs, nodes := startQuorum(t, 3)
	resource := redistest.Start(t)
	rdb := resource.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const (
		name       = "qcounter"
		ttl        = 2 * time.Second
		goroutines = 6
		rounds     = 60
		procs      = 2
		procRounds = 100
	)
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.Addr())
	}
	var helpers []*helper
	for range procs {
		helpers = append(helpers, startHelper(t, resource, "contend", name, ttl, procRounds, "DLOCK_QUORUM="+strings.Join(addrs, ",")))
	}
	c := newRedlock(t, nodes, 200*time.Millisecond, dlock.LeaseTTL(ttl))
	var inside atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				if err := criticalSection(ctx, c, rdb, name, &inside); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	srvs[1].Kill() // mid-run
	time.Sleep(ttl + 200*time.Millisecond)
	srvs[1].Restart() // back, empty, after every lease it held has expired
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, h := range helpers {
		if err := h.wait(time.Minute); err != nil {
			t.Errorf("worker process %d: %v", i, err)
		}
	}
	want := goroutines*rounds + procs*procRounds
	if got, _ := rdb.Get(ctx, counterKey).Int(); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}
	if v, _ := rdb.Get(ctx, violationsKey).Int(); v != 0 {
		t.Errorf("%d overlapping holders seen, want 0", v)
	}
}

// List over a quorum walks every node: with the first node down it still
// lists a lock held on the others, and it fails only without a majority.
func TestRedlockListWithANodeDown(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	// A node timeout far above a loaded machine's round trip (the default,
	// TTL/50, is 200ms): a live node that answers List's reads late is not
	// the node down this test is about.
	c := newRedlock(t, nodes, 2*time.Second)
	l, err := c.TryAcquire(ctx, "listed")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// The acquire returned once a majority granted it: the lease must be
	// on nodes 1 and 2 (a grant may still be on its way) before node 0 goes.
	if !waitFor(5*time.Second, func() bool { return keysOn(ctx, srvs, l.Key()) == 3 }) {
		t.Fatal("the lease never reached all three nodes")
	}
	srvs[0].Kill()
	infos, err := c.List(ctx, "*")
	if err != nil || len(infos) != 1 || infos[0].Name != "listed" || !infos[0].Held {
		t.Errorf("List with node 0 down = %+v, %v, want the held lock", infos, err)
	}
	srvs[1].Kill()
	if _, err := c.List(ctx, "*"); err == nil {
		t.Errorf("List with 2 of 3 nodes down = nil error, want a QuorumError")
	}
}

// A quorum honours WithShardedPubSub and pipelining like a single node:
// with sharded pub/sub on every node, a release wakes a waiter whose
// backoff alone would keep it asleep for seconds.
func TestRedlockShardedPubSubWakesWaiters(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx := t.Context()
	slow := func(int) time.Duration { return 5 * time.Second }
	c := newRedlock(t, nodes, 0, dlock.WithShardedPubSub(true), pipelined(true), dlock.WithUnfair(slow))
	l, err := c.TryAcquire(ctx, "woken")
	if err != nil {
		t.Fatal(err)
	}
	waiter := newRedlock(t, nodes, 0, dlock.WithShardedPubSub(true), dlock.WithUnfair(slow))
	got := make(chan time.Duration, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := waiter.Acquire(wctx, "woken")
		if err != nil {
			got <- -1
			return
		}
		released := time.Now()
		w.Release(ctx)
		got <- time.Since(released)
	}()
	if !waitFor(5*time.Second, listeningOnAll(t, "woken", nodes...)) { // then it sleeps on its backoff
		t.Fatal("the waiter never subscribed")
	}
	start := time.Now()
	l.Release(ctx)
	select {
	case d := <-got:
		if d < 0 {
			t.Fatal("the waiter did not get the lock")
		}
		if waited := time.Since(start); waited > 2*time.Second {
			t.Errorf("waiter got the lock %v after the release, want it woken by the release message", waited)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// Was a bug: a shorter Extend that reaches a
// minority in time and is delayed to the other nodes, then a longer Extend
// that reaches all, then the delayed short extensions land: a majority now
// expires early while the holder's validity says 10s.
func TestRedlockDelayedShorterExtendCannotCutANewerLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	var proxies []*redistest.Proxy
	var nodes, directs []redis.UniversalClient
	for range 3 {
		p, rdb, direct := proxied(t, -1, 5*time.Second)
		proxies, nodes, directs = append(proxies, p), append(nodes, rdb), append(directs, direct)
	}
	c := newRedlock(t, nodes, 200*time.Millisecond, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(t.Context(), "qext")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(t.Context()))
	// The short extension's copies to nodes 1 and 2 are held for longer than
	// its lease: the holder's next extension, made within that lease, lands first.
	const short = 2 * time.Second
	proxies[1].Delay(short+500*time.Millisecond, 0)
	proxies[2].Delay(short+500*time.Millisecond, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond) // one attempt, no retries
	err = l.Extend(ctx, short)
	cancel()
	held := waitFor(time.Second, func() bool { return proxies[1].HeldRequests() > 0 && proxies[2].HeldRequests() > 0 })
	proxies[1].Delay(0, 0)
	proxies[2].Delay(0, 0)
	if err == nil || !held {
		t.Skipf("short extension = %v, held for nodes 1 and 2: %v; cannot stage the reorder", err, held)
	}
	if err := l.Extend(t.Context(), 10*time.Second); err != nil {
		t.Fatalf("Extend(10s) = %v", err)
	}
	if !waitFor(10*time.Second, func() bool { return proxies[1].HeldRequests() == 0 && proxies[2].HeldRequests() == 0 }) {
		t.Fatal("the delayed short extensions never landed")
	}
	time.Sleep(short + 300*time.Millisecond) // a lease they cut would have expired by now
	o, err := newRedlock(t, directs, 0).TryAcquire(t.Context(), "qext")
	if err != nil {
		for i, d := range directs {
			t.Logf("intruder refused (%v); node %d PTTL %v", err, i, d.PTTL(t.Context(), "dlock:{qext}").Val())
		}
		return
	}
	defer o.Release(t.Context())
	if l.Err() == nil && time.Now().Before(l.ValidUntil()) {
		t.Errorf("TWO HOLDERS over a quorum: another client won a majority while the first's ValidUntil is %v away",
			time.Until(l.ValidUntil()).Round(time.Millisecond))
	}
}

// Was a bug: a quorum attempt ignores its ctx. fanOut
// (internal/backend/quorum.go) waits on context.WithoutCancel(ctx) for up to
// the node timeout, which defaults to TTL/50: with LeaseTTL(1m) that is 1.2s,
// and an Acquire/TryAcquire with a 100ms ctx against a quorum whose majority
// is frozen returns after the node timeout, not "within a small bound of the
// deadline" (doc.go).
//
// The fix: fanOut stops waiting when the caller's ctx ends; the nodes'
// calls go on in the background.
func TestRedlockAttemptEndsWithItsContext(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	c := newRedlock(t, nodes, 0, dlock.LeaseTTL(time.Minute)) // node timeout 1.2s
	srvs[1].Pause()
	srvs[2].Pause()
	defer srvs[1].Resume()
	defer srvs[2].Resume()
	for _, op := range []string{"TryAcquire", "Acquire"} {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		start := time.Now()
		var err error
		if op == "Acquire" {
			_, err = c.Acquire(ctx, "qctx")
		} else {
			_, err = c.TryAcquire(ctx, "qctx")
		}
		took := time.Since(start)
		cancel()
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v, want ErrNotAcquired and DeadlineExceeded", op, err)
		}
		if took > 600*time.Millisecond {
			t.Errorf("%s with a 100ms ctx over a quorum with 2 of 3 nodes frozen took %v", op, took.Round(time.Millisecond))
		}
	}
}

// A quorum holder whose majority is gone (two nodes came back empty and
// another client won them) is told: Release reports ErrNotHeld, and the
// watchdog's next extension closes Done.
func TestRedlockLostMajorityIsReported(t *testing.T) {
	t.Parallel()
	for _, watchdog := range []bool{false, true} {
		srvs, nodes := startQuorum(t, 3)
		ctx := t.Context()
		a := newRedlock(t, nodes, 500*time.Millisecond, dlock.LeaseTTL(3*time.Second), dlock.WithAutoExtend(watchdog))
		l, err := a.TryAcquire(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		srvs[0].Restart() // back at once and empty: what Redlock forbids
		srvs[1].Restart()
		waitFor(5*time.Second, func() bool { return nodes[0].Ping(ctx).Err() == nil && nodes[1].Ping(ctx).Err() == nil })
		// The second client is another process's: its own connections (the
		// pools of nodes hold connections to the killed servers, which
		// fail at once), and a node timeout far above a loaded machine's
		// round trip (a first dial and script load). Either one node
		// failing splits the vote, and the lock is refused as held (by
		// node 2).
		var fresh []redis.UniversalClient
		for _, s := range srvs {
			n := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			t.Cleanup(func() { n.Close() })
			fresh = append(fresh, n)
		}
		b, err := newRedlock(t, fresh, 2*time.Second, dlock.LeaseTTL(3*time.Second)).TryAcquire(ctx, "q")
		if err != nil {
			t.Fatalf("watchdog %v: second client's TryAcquire = %v, want a majority", watchdog, err)
		}
		if watchdog && !closedWithin(l.Done(), 2500*time.Millisecond) {
			t.Errorf("watchdog on: Done() still open 2.5s after the majority was lost (extends every 1s)")
		}
		if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("watchdog %v: Release with one of three nodes left = %v, want ErrNotHeld", watchdog, err)
		}
		b.Release(ctx)
	}
}

// TestNewRedlockRefusesDefaultTTLAtOrBelowNodeTimeout: a lease time at or below the
// per-node timeout is refused per call (LeaseTTL on Acquire); as the
// Client's default (LeaseTTL given to NewRedlock) it must be refused too.
func TestNewRedlockRefusesDefaultTTLAtOrBelowNodeTimeout(t *testing.T) {
	t.Parallel()
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})) // nothing is sent
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	c, err := dlock.NewRedlock(nodes, time.Second, dlock.LeaseTTL(100*time.Millisecond))
	if err == nil {
		_, perCall := c.TryAcquire(t.Context(), "x", dlock.LeaseTTL(100*time.Millisecond))
		t.Fatalf("NewRedlock(nodes, 1s, LeaseTTL(100ms)) = nil error (the same LeaseTTL per call: %v); want ErrInvalid", perCall)
	}
	if !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("NewRedlock(nodes, 1s, LeaseTTL(100ms)) = %v; want ErrInvalid", err)
	}
}

// A lock held by another is refused alike whatever the number of nodes: a
// *NotAcquiredError that names the holder and its remaining lease, not a
// *QuorumError. With an even N (4, 6) the refusals that make a majority
// impossible (N/2) are one fewer than a majority (N/2+1): the attempt stops
// waiting once it has them, and must not report the nodes it did not wait
// for as having missed the node timeout. The attempt ends long before that
// timeout. Odd N (3, 5) is the reference.
func TestRedlockRefusalWithEvenNodes(t *testing.T) {
	t.Parallel()
	long(t)
	for _, n := range []int{3, 4, 5, 6} {
		t.Run(fmt.Sprint(n, "nodes"), func(t *testing.T) {
			_, nodes := startQuorum(t, n)
			ctx := t.Context()
			const nodeTimeout = 4 * time.Second // far above what a refusal takes on loopback
			holder := newRedlock(t, nodes, nodeTimeout, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
			held, err := holder.TryAcquire(ctx, "even", dlock.HolderMeta("the-holder"))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(context.WithoutCancel(ctx))

			for _, mode := range []struct {
				name string
				opts []dlock.Option
			}{
				{"default", nil},
				{"unfair", []dlock.Option{dlock.WithUnfair(nil)}},
				{"unfair-pipelined", []dlock.Option{dlock.WithUnfair(nil), pipelined(true)}},
				{"unpipelined", []dlock.Option{pipelined(false)}},
			} {
				opts := append([]dlock.Option{dlock.LeaseTTL(10 * time.Second)}, mode.opts...)
				c := newRedlock(t, nodes, nodeTimeout, opts...)
				check := func(call string, err error, took time.Duration) {
					t.Helper()
					checkEvenRefusal(t, mode.name+" "+call, err, took, held, nodeTimeout)
				}

				start := time.Now()
				_, err := c.TryAcquire(ctx, "even")
				check("TryAcquire", err, time.Since(start))

				start = time.Now()
				_, err = c.Acquire(ctx, "even", dlock.MaxWait(0))
				check("Acquire(MaxWait(0))", err, time.Since(start))

				// A wait that ends carries the last refusal, not a missing majority.
				start = time.Now()
				_, err = c.Acquire(ctx, "even", dlock.MaxWait(300*time.Millisecond))
				took := time.Since(start)
				if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
					t.Errorf("%s Acquire(MaxWait(300ms)) = %v, carries a *QuorumError (%v): no majority was missing", mode.name, err, qe)
				}
				if ne, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || ne.Holder != held.Token() {
					t.Errorf("%s Acquire(MaxWait(300ms)) = %v, want the last refusal, naming the holder", mode.name, err)
				}
				if took >= nodeTimeout {
					t.Errorf("%s Acquire(MaxWait(300ms)) took %v", mode.name, took)
				}

				start = time.Now()
				_, err = c.TryAcquireAll(ctx, []string{"even", "even-free"})
				check("TryAcquireAll", err, time.Since(start))
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The refused attempts left the holder's lease as it was.
			if err := held.Release(ctx); err != nil {
				t.Errorf("holder's Release after the refusals = %v", err)
			}
		})
	}
}

// checkEvenRefusal: call (named what) was refused by the quorum because held
// holds "even": a *NotAcquiredError naming the holder, its meta and its
// remaining lease, no *QuorumError, no word of the node timeout, and well
// within that timeout.
func checkEvenRefusal(t *testing.T, what string, err error, took time.Duration, held *dlock.Lock, nodeTimeout time.Duration) {
	t.Helper()
	if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
		t.Errorf("%s = a *QuorumError (%v), want a refusal", what, qe)
	}
	if strings.Contains(fmt.Sprint(err), "node timeout") {
		t.Errorf("%s: %v, names the node timeout, which never passed (the call took %v)", what, err, took)
	}
	ne, ok := errors.AsType[*dlock.NotAcquiredError](err)
	switch {
	case !ok || !errors.Is(err, dlock.ErrNotAcquired):
		t.Errorf("%s = %v, want a *NotAcquiredError", what, err)
	case ne.Holder != held.Token() || ne.Meta != "the-holder" || ne.Name != "even":
		t.Errorf("%s: refusal %+v, want holder %q, meta %q, name %q", what, ne, held.Token(), "the-holder", "even")
	case ne.TTL <= 30*time.Second || ne.TTL > time.Minute:
		t.Errorf("%s: refusal TTL %v, want the holder's remaining lease (~1m)", what, ne.TTL)
	}
	if took >= nodeTimeout {
		t.Errorf("%s took %v, want a refusal well within the node timeout %v", what, took, nodeTimeout)
	}
}

// A wait whose end cuts its last attempt short reports the last answered
// attempt, which found the lock held: not a missing majority whose nodes
// "did not answer within the node timeout" when the wait merely stopped
// waiting for them. Two of three nodes answer 200ms late (the proxy holds
// the requests): the first attempt is answered after 200ms and undone on
// every node (one was not waited for) by 400ms; the second, sent 10ms
// later, is still out when MaxWait ends at 500ms. (Another wait of the Client listens on the lock's
// channel already, so the wait does not subscribe through the delay.)
func TestRedlockWaitEndingMidAttemptReportsTheRefusal(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	const nodeTimeout = 2 * time.Second
	holder := newRedlock(t, direct, nodeTimeout, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false))
	held, err := holder.TryAcquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.WithoutCancel(ctx))

	nodes := []redis.UniversalClient{direct[0]}
	var proxies []*redistest.Proxy
	for _, s := range srvs[1:] {
		p := redistest.NewProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		var wg sync.WaitGroup
		for range 8 { // connections made before the delay: only commands are held
			wg.Go(func() { rdb.Ping(ctx) })
		}
		wg.Wait()
		proxies = append(proxies, p)
		nodes = append(nodes, rdb)
	}
	c := newRedlock(t, nodes, nodeTimeout, dlock.LeaseTTL(10*time.Second),
		dlock.WithUnfair(func(int) time.Duration { return 10 * time.Millisecond }))
	bctx, stop := context.WithCancel(ctx)
	other := make(chan struct{})
	go func() {
		defer close(other)
		c.Acquire(bctx, "cut")
	}()
	defer func() { stop(); <-other; c.Close(context.WithoutCancel(ctx)) }()
	if !waitFor(5*time.Second, listeningOnAll(t, "cut", direct...)) {
		t.Fatal("the other wait never subscribed")
	}
	for _, p := range proxies {
		p.Delay(200*time.Millisecond, 0)
	}

	start := time.Now()
	_, err = c.Acquire(ctx, "cut", dlock.MaxWait(500*time.Millisecond))
	took := time.Since(start)
	t.Logf("Acquire took %v: %v", took, err)
	if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
		t.Errorf("Acquire = %v, carries a *QuorumError (%v) of an attempt cut short", err, qe)
	}
	if strings.Contains(fmt.Sprint(err), "node timeout") {
		t.Errorf("Acquire = %v, names the node timeout, which never passed (the call took %v)", err, took)
	}
	if ne, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || ne.Holder != held.Token() || ne.TTL <= 0 {
		t.Errorf("Acquire = %v, want the last refusal, naming the holder and its lease", err)
	}
}

// Over a quorum, a lease's holder metadata shows in Inspect as it does on
// one node — also when the lease was taken by a later attempt, after an
// earlier one won too few nodes and was given back (the Lock then takes a
// new token). Found by the fault checker's check (k) in quorum rounds.
func TestRedlockInspectShowsHolderMetaAfterRetry(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx := t.Context()
	// The node timeout is set well above a round trip: the default, TTL/50
	// (40ms), is how long Inspect waits for the nodes' answers, which a
	// loaded machine can outlast on every node.
	c := newRedlock(t, nodes, time.Second, dlock.LeaseTTL(2*time.Second), dlock.WithUnfair(nil), dlock.HolderMeta("job-7"))
	// Two of the three nodes hold the lock for someone else: the first
	// attempt wins node 0 alone, and gives it back.
	var others []*dlock.Lock
	for _, n := range nodes[1:] {
		l, err := newClient(t, n, dlock.LeaseTTL(2*time.Second), dlock.WithUnfair(nil)).Acquire(ctx, "qm")
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, l)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		for _, l := range others {
			l.Release(context.Background())
		}
	}()
	l, err := c.Acquire(ctx, "qm")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	info, err := c.Inspect(ctx, "qm")
	if err != nil {
		t.Fatal(err)
	}
	if info.Token != l.Token() || info.Meta != "job-7" || l.Meta() != "job-7" {
		t.Errorf("Inspect shows token %q meta %q; the lease has token %q, Lock.Meta %q; want meta %q",
			info.Token, info.Meta, l.Token(), l.Meta(), "job-7")
	}
}

// An undo over a quorum with a node that refuses connections asks that
// node again on its own, in the background, not the whole quorum: the
// nodes that did their part get one undo each. (It re-ran the fan-out on
// every node up to five times, so a node down multiplied the undo traffic
// of the healthy ones.)
func TestQuorumUndoRetriesOnlyTheNodeThatFailed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The scripts loaded on every node, by a Client closed before node 2's
	// calls are counted: a node that answered its release after the node
	// timeout still runs it then, and Close waits for that.
	warmer := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(5*time.Second), dlock.WithUnfair(nil))
	warm, err := warmer.TryAcquire(ctx, "qu-warm")
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx)
	if err := warmer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(5*time.Second), dlock.WithUnfair(nil))
	other, err := newClient(t, nodes[1], dlock.WithUnfair(nil)).TryAcquire(ctx, "qu")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.WithoutCancel(ctx))
	srvs[0].Kill() // node 0 refuses connections
	nodes[2].ConfigResetStat(ctx)
	// Node 2 grants, node 1 refuses, node 0 fails: one of three, undone.
	if _, err := c.TryAcquire(ctx, "qu"); err == nil {
		t.Fatal("TryAcquire won a majority with one node down and one held")
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := c.Close(dctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := nodes[2].Exists(ctx, "dlock:{qu}").Val(); n != 0 {
		t.Errorf("the undone attempt's lock is still on node 2")
	}
	stats := nodes[2].Info(ctx, "commandstats").Val()
	calls := 0
	for _, cmd := range []string{"evalsha", "eval"} {
		if i := strings.Index(stats, "cmdstat_"+cmd+":calls="); i >= 0 {
			n, _ := strconv.Atoi(strings.SplitN(stats[i+len("cmdstat_"+cmd+":calls="):], ",", 2)[0])
			calls += n
		}
	}
	if calls != 2 {
		t.Errorf("node 2 ran %d scripts for one attempt and its undo, want 2\n%s", calls, stats)
	}
}

// A quorum node whose clock runs ahead of the others (independent masters
// are not clock-synchronised) lifts a fence to its time, and Lock.Fence
// writes that fence back to a majority. The counters must outlive any
// plausible disagreement of the clocks: if they expired after a minute, as a
// single node's do, a later majority without that node would issue fences
// from its own, earlier clock — lower than a fence an earlier lease used.
// (The skewed node's fence is written into its counter directly, as
// TestFenceStrictlyIncreases does: libfaketime crashes redis-server here.)
func TestQuorumFenceOutlivesASkewedNode(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	// (A node timeout far above a loaded machine's round trip: TTL/50,
	// 100ms, is not, and an attempt a node missed leaves its grant on the
	// others to be undone, which the next attempt may meet.)
	c := newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second))
	name := "skewed-fence"
	counter := "dlock:{" + name + "}:fence"

	tm, err := nodes[0].Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Node 0's clock is 2 minutes ahead, and a fence it issued was written
	// back to a majority (nodes 0 and 1), as Fence does: every majority
	// sees it, whichever two nodes answer first.
	ahead := tm.Add(2 * time.Minute).UnixMicro()
	for _, n := range nodes[:2] {
		n.Set(ctx, counter, strconv.FormatInt(ahead, 10), time.Minute)
	}

	l1, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	f1 := fenceOf(t, l1)
	if f1 <= ahead {
		t.Fatalf("Fence of the first lease = %d, want > %d (the skewed node's)", f1, ahead)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A majority's counters live a day (a minute would let fences fall
	// back). Not necessarily every node's: one slow to answer may not have
	// held the lease yet when the fence was issued.
	dayLong := func() (n int, pttls []time.Duration) {
		for _, node := range nodes {
			d := node.PTTL(ctx, counter).Val()
			pttls = append(pttls, d)
			if d >= 23*time.Hour {
				n++
			}
		}
		return n, pttls
	}
	if !waitFor(2*time.Second, func() bool { n, _ := dayLong(); return n >= 2 }) {
		_, pttls := dayLong()
		t.Errorf("fence counters live %v on the three nodes, want a day on a majority", pttls)
	}

	srvs[0].Pause() // a majority without the skewed node
	defer srvs[0].Resume()
	var l2 *dlock.Lock
	for range 20 {
		if l2, err = c.TryAcquire(ctx, name); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryAcquire on the majority of nodes 1, 2 = %v", err)
	}
	defer l2.Release(ctx)
	var f2 int64
	for range 20 { // as the acquisition: two nodes may be slow to answer
		if f2, err = l2.Fence(ctx); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Fence on the majority of nodes 1, 2 = %v", err)
	}
	if f2 <= f1 {
		t.Errorf("Fence of the later lease = %d, not above the earlier lease's %d", f2, f1)
	}
}

// proxiedQuorum starts n servers, each behind a proxy; it returns the
// proxies, clients through them (no retries) and clients straight to the
// servers.
func proxiedQuorum(t *testing.T, n int) ([]*redistest.Proxy, []redis.UniversalClient, []*redis.Client) {
	t.Helper()
	var ps []*redistest.Proxy
	var via []redis.UniversalClient
	var direct []*redis.Client
	for range n {
		s := redistest.Start(t, redistest.TCP())
		p := redistest.NewProxy(t, s.Addr())
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		via = append(via, c)
		direct = append(direct, s.Client(t))
	}
	return ps, via, direct
}

func keyOnNodes(ctx context.Context, direct []*redis.Client, key string) (n int, vals []string) {
	for _, d := range direct {
		v, err := d.Get(ctx, key).Result()
		if err == nil && !strings.HasPrefix(v, "~") { // a tombstone is a free lock
			n++
		}
		vals = append(vals, v)
	}
	return n, vals
}

// firstLease takes name on a quorum just started. A new Client's first
// calls dial each node, and on a loaded machine a node may not answer them
// within a short node timeout: that attempt is tried again, as it is not
// what the test is about.
func firstLease(t *testing.T, c *dlock.Client, name string) *dlock.Lock {
	t.Helper()
	var l *dlock.Lock
	var err error
	if !waitFor(5*time.Second, func() bool { l, err = c.TryAcquire(t.Context(), name); return err == nil }) {
		t.Fatalf("TryAcquire(%s) = %v", name, err)
	}
	return l
}

// A waiter polling a lock held by another, with one quorum node dead: the
// dead node's connection is refused after the others' refusals settled an
// attempt (go-redis retries a dial), so the attempt is undone. The undo
// waits for the dead node's call and sends it nothing (the request never
// left), so no undo is retried there in the background: no goroutines pile
// up, none outlives Acquire.
func TestRedlockRefusedWaiterLeavesNoUndoGoroutines(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	ttl := 10 * time.Second
	holder := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(ttl))
	l := firstLease(t, holder, "pile")
	srvs[2].Kill()
	base := countGoroutines(t, "backend.Retry+")
	fast := func(int) time.Duration { return 10 * time.Millisecond }
	waiter := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(ttl), dlock.WithUnfair(fast))
	before, _ := srvs[0].Do(ctx, "INFO", "commandstats")
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			_, err := waiter.Acquire(actx, "pile")
			cancel()
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("Acquire = %v", err)
			}
		})
	}
	wg.Wait()
	time.Sleep(3 * time.Second)
	afterStats, _ := srvs[0].Do(ctx, "INFO", "commandstats")
	t.Logf("node 0 commandstats before:\n%v\nafter 10 waiters x 1.5s + 3s:\n%v", before, afterStats)
	after := countGoroutines(t, "backend.Retry+") - base
	t.Logf("background clean-up goroutines 3s after 10 Acquire waits of 1.5s each were refused throughout (no node ever granted): %d", after)
	later := countGoroutines(t, "backend.Retry+") - base
	t.Logf("... and at the next count: %d", later)
	if after > 5 {
		t.Errorf("%d background undo goroutines left behind by one Acquire that was refused on every answering node (nothing to undo)", after)
	}
	l.Release(ctx)
	// let the goroutines drain so the leakcheck does not fire
	waitFor(12*time.Second, func() bool { return countGoroutines(t, "backend.Retry+") <= base })
}

// Quorum + pipelining: requests to two nodes are delayed past the per-node
// timeout; the grants land after the attempt was declared failed. Nothing
// may stay behind, and another client must get the lock.
func TestRedlockLateGrantsAfterFailedQuorumLeaveNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, dir := range []string{"request", "reply"} {
		t.Run(dir, func(t *testing.T) {
			ps, via, direct := proxiedQuorum(t, 3)
			ctx := t.Context()
			c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(3*time.Second))
			if w, err := c.TryAcquire(ctx, "warm-"+dir); err == nil { // scripts loaded
				w.Release(ctx)
			}
			name := "late-" + dir
			for _, p := range ps[:2] {
				if dir == "request" {
					p.Delay(400*time.Millisecond, 0)
				} else {
					p.Delay(0, 400*time.Millisecond)
				}
			}
			_, err := c.TryAcquire(ctx, name)
			for _, p := range ps[:2] {
				p.Delay(0, 0)
			}
			if err == nil {
				t.Fatalf("TryAcquire with 2 of 3 delayed past the node timeout succeeded")
			}
			time.Sleep(1500 * time.Millisecond)
			if n, vals := keyOnNodes(ctx, direct, "dlock:{"+name+"}"); n != 0 {
				t.Errorf("lock key on %d nodes after a failed attempt (%v): lease for nobody", n, vals)
			}
			other := newRedlock(t, via, 0, dlock.LeaseTTL(3*time.Second))
			l, err := other.TryAcquire(ctx, name)
			if err != nil {
				t.Errorf("another client TryAcquire after the failed attempt = %v", err)
			} else {
				l.Release(ctx)
			}
		})
	}
}

// Mutual exclusion under random delays around the node timeout, pipelined.
func TestRedlockExclusionUnderJitterAroundNodeTimeout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	ps, via, _ := proxiedQuorum(t, 3)
	ctx := t.Context()
	stop := make(chan struct{})
	var jw sync.WaitGroup
	jw.Go(func() {
		delays := []time.Duration{0, 0, 60 * time.Millisecond, 90 * time.Millisecond, 150 * time.Millisecond}
		for i := 0; ; i++ {
			select {
			case <-stop:
				for _, p := range ps {
					p.Delay(0, 0)
				}
				return
			case <-time.After(40 * time.Millisecond):
			}
			p := ps[i%3]
			d := delays[(i*7)%len(delays)]
			if i%2 == 0 {
				p.Delay(d, 0)
			} else {
				p.Delay(0, d)
			}
		}
	})
	var inside, violations, acquired atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(6 * time.Second)
	for w := range 4 {
		c := newRedlock(t, via, 80*time.Millisecond, dlock.LeaseTTL(2*time.Second),
			dlock.WithUnfair(func(int) time.Duration { return 20 * time.Millisecond }))
		wg.Go(func() {
			for i := 0; i < 200 && time.Now().Before(deadline); i++ {
				actx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
				l, err := c.Acquire(actx, "jitter")
				cancel()
				if err != nil {
					continue
				}
				acquired.Add(1)
				if inside.Add(1) > 1 {
					violations.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
				if l.Err() != nil {
					// lost: do not count it
				}
				inside.Add(-1)
				l.Release(context.WithoutCancel(ctx))
				_ = w
			}
		})
	}
	wg.Wait()
	close(stop)
	jw.Wait()
	t.Logf("acquisitions: %d", acquired.Load())
	if v := violations.Load(); v != 0 {
		t.Errorf("%d overlapping holders", v)
	}
	time.Sleep(3 * time.Second) // background undos drain
}

// An old, shorter extension delayed past the node timeout lands after a
// newer, longer one: it must be ignored (sequence numbers).
func TestRedlockDelayedShortExtendAfterLongExtendIgnored(t *testing.T) {
	t.Parallel()
	ps, via, direct := proxiedQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(3*time.Second), dlock.WithAutoExtend(false))
	l, err := tryAcquireInTime(ctx, c, "ext")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.Delay(500*time.Millisecond, 0)
	}
	// One attempt, or two: Extend retries a Redis error while its ctx
	// lasts. Its outcome unknown, the validity is left at 2s from its send:
	// the time the next Extend has for a majority of 100ms node timeouts
	// over fresh connections (1s was used up on a loaded machine).
	sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	if err := l.Extend(sctx, 2*time.Second); err == nil {
		t.Logf("delayed Extend(2s) reported success?")
	}
	cancel()
	for _, p := range ps {
		p.Delay(0, 0)
	}
	if err := l.Extend(ctx, 8*time.Second); err != nil {
		t.Fatalf("Extend(8s) = %v", err)
	}
	time.Sleep(800 * time.Millisecond) // the delayed Extend(2s) has landed
	long := 0                          // the lease is safe while a majority keeps the longer expiry
	for i, d := range direct {
		pttl := d.PTTL(ctx, "dlock:{ext}").Val()
		t.Logf("node %d PTTL = %v", i, pttl)
		if pttl >= 5*time.Second {
			long++
		}
	}
	if long < 2 {
		t.Errorf("%d of 3 nodes keep the Extend(8s) expiry after the old Extend(2s) landed; the holder believes %v", long, time.Until(l.ValidUntil()))
	}
	l.Release(ctx)
}

// A failed attempt's undo retries in the background while the same Lock
// goes on with a new token and gets the lock: the new lease must survive
// all retries of the old token's undo.
func TestRedlockUndoRetriesSpareTheSameLocksNewLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	ttl := 3 * time.Second
	holder := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(ttl))
	h := firstLease(t, holder, "newtok")
	srvs[2].Kill()
	waiter := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(ttl),
		dlock.WithUnfair(func(int) time.Duration { return 20 * time.Millisecond }))
	got := make(chan *dlock.Lock, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := waiter.Acquire(actx, "newtok")
		if err != nil {
			t.Errorf("waiter Acquire = %v", err)
		}
		got <- l
	}()
	time.Sleep(500 * time.Millisecond) // many failed attempts, their undos retrying
	h.Release(ctx)
	l := <-got
	if l == nil {
		return
	}
	// For the old undos' lifetime, the new lease must stay on the nodes. A
	// read that no majority answered within the node timeout (a loaded
	// machine) tells nothing: the next one does, and a lease once gone
	// cannot come back, so the last read, after that lifetime, must answer.
	held := func() bool {
		info, err := waiter.Inspect(ctx, "newtok")
		if err == nil && (!info.Held || info.Token != l.Token()) {
			t.Fatalf("new lease gone while old undos retried: %+v", info)
		}
		return err == nil
	}
	for end := time.Now().Add(ttl + 500*time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		held()
	}
	if !waitFor(2*time.Second, held) {
		t.Fatal("no majority answered Inspect after the old undos' lifetime")
	}
	l.Release(ctx)
}

// A release queued in a node's batcher behind in-flight pipelines is
// abandoned at the node timeout and never sent: the node keeps the lease.
func TestRedlockReleaseQueuedBehindSlowPipelinesLeavesNoLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	ps, via, direct := proxiedQuorum(t, 3)
	ctx := t.Context()
	ttl := 6 * time.Second
	c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "rel")
	if err != nil {
		t.Fatal(err)
	}
	ps[0].Delay(600*time.Millisecond, 0) // node 0 slow
	var wg sync.WaitGroup
	for i := range 8 { // occupy node 0's flushers
		wg.Go(func() {
			if o, err := c.TryAcquire(ctx, fmt.Sprint("busy-", i)); err == nil {
				o.Release(ctx)
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // 4 pipelines in flight on node 0 until ~600ms
	err = l.Release(ctx)
	t.Logf("Release = %v", err)
	wg.Wait()
	ps[0].Delay(0, 0)
	time.Sleep(1500 * time.Millisecond) // everything in flight has landed
	n, vals := keyOnNodes(ctx, direct, "dlock:{rel}")
	if err == nil && n > 0 {
		t.Errorf("Release returned nil, yet the lease is still on %d node(s) %v %v after everything landed (held until TTL)", n, vals, direct[0].PTTL(ctx, "dlock:{rel}").Val())
	}
	// consequence: with node 1 unreachable, the released lock cannot be taken
	ps[1].Stall()
	other := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(ttl))
	if o, err := other.TryAcquire(ctx, "rel"); err == nil {
		o.Release(ctx)
	} else if n > 0 {
		t.Errorf("with 2 of 3 nodes up, the lock released %v ago cannot be taken: %v", 1500*time.Millisecond, err)
	}
	ps[1].Cut()
	time.Sleep(2 * time.Second)
}

// A release that fails on one node (its connection cut while the request
// was held) is retried there in the background: Release reports success
// once a majority let go, and the node that missed it must not keep the
// lock until the lease expires (with one more node down, nobody could take
// it).
func TestQuorumReleaseRetriedOnANodeThatFailed(t *testing.T) {
	t.Parallel()
	ps, via, direct := proxiedQuorum(t, 3)
	ctx := t.Context()
	ttl := 20 * time.Second
	// The node timeout is how long Release waits for the stalled node 2,
	// and far above a loaded machine's round trip: nodes 0 and 1, which
	// answer, must count (at 100ms all three went unanswered under load).
	c := newRedlock(t, via, time.Second, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false))
	l := takeWithin(t, ctx, c, "cut")
	if !waitFor(5*time.Second, func() bool { n, _ := keyOnNodes(ctx, direct, "dlock:{cut}"); return n == 3 }) {
		t.Fatal("the lease never reached all three nodes") // TryAcquire returns once two have it
	}
	ps[2].Stall() // node 2 gets the release only after the cut: never
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with 2 of 3 nodes answering: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	ps[2].Cut() // the held release is dropped; go-redis reports the broken connection
	gone := waitFor(5*time.Second, func() bool {
		n, _ := keyOnNodes(ctx, direct, "dlock:{cut}")
		return n == 0
	})
	if !gone {
		_, vals := keyOnNodes(ctx, direct, "dlock:{cut}")
		t.Fatalf("node 2 still holds the released lease %v (pttl %v): the failed release was not retried",
			vals, direct[2].PTTL(ctx, "dlock:{cut}").Val())
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release retried in the background on a node where it failed must not
// end a newer lease that someone else took there meanwhile: the node's copy
// of the released lease expired (or the node came back empty), another
// client took the lock on every node, and only then does the retry reach
// the node. release.lua compares tokens, so the newer lease must survive
// on all three nodes, the retry must stop (Close returns), and no goroutine
// may be left.
func TestRedlockRetriedReleaseSparesANewerLease(t *testing.T) {
	t.Parallel()
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
			c := newRedlock(t, via, 300*time.Millisecond, dlock.LeaseTTL(2*time.Second), dlock.WithAutoExtend(false))
			l := takeWithin(t, ctx, c, name)
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
			var (
				l2  *dlock.Lock
				err error
			)
			if !waitFor(10*time.Second, func() bool {
				l2, err = other.TryAcquire(ctx, name)
				return err == nil
			}) {
				t.Fatalf("the next client never took the lock: %v", err)
			}
			on := func(i int) bool { return holderOf(direct[i].Get(ctx, key).Val()) == l2.Token() }
			// (TryAcquire returns once a majority granted: the third grant may land later.)
			if !waitFor(10*time.Second, func() bool { return on(0) && on(1) && on(2) }) {
				t.Fatal("the newer lease never reached every node")
			}
			ps[2].Cut() // the held release is dropped: it is retried now
			dctx, dcancel := context.WithTimeout(ctx, 40*time.Second)
			defer dcancel()
			if err := c.Close(dctx); err != nil {
				t.Fatalf("Close with the retried release = %v, want it to end", err)
			}
			for i, d := range direct {
				if !on(i) {
					t.Errorf("node %d holds %q after the retried release, want the newer lease %s", i, d.Get(ctx, key).Val(), l2.Token())
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
func TestRedlockReleaseRetryGivesUpOnABlackHole(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	ps, via, direct := proxiedQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The node timeout is how long each Release waits for the stalled node
	// 2, and far above a loaded machine's round trip: each acquisition
	// needs two nodes' answers within it, and each Release one of nodes 0
	// and 1 (at 300ms, two answers late on a loaded machine fail an
	// acquisition or a Release before node 2 is at issue).
	c := newRedlock(t, via, time.Second, dlock.LeaseTTL(20*time.Second), dlock.WithAutoExtend(false))
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

// takeWithin takes name with the quorum Client c, trying again for up to
// ten seconds while nodes do not answer within c's short node timeout (a
// first call dials each node and loads its scripts, which a loaded machine
// can make slower than the timeout that the test is about).
func takeWithin(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var l *dlock.Lock
		if l, err = c.TryAcquire(ctx, name); err == nil {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// Inspect over a quorum names the type the nodes hold a name as: a name
// held on them as a reentrant lock or a semaphore, by Clients of one node
// each, is a "hash" or a "zset", not a plain lock's "string".
func TestRedlockInspectNamesTheTypeANameIsHeldAs(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx := t.Context()
	q := newRedlock(t, nodes, 0)
	for _, n := range nodes {
		re := asOwner(t, newClient(t, n, dlock.WithReentrant(true)), "owner")
		if _, err := re.TryAcquire(ctx, "q-hash"); err != nil {
			t.Fatal(err)
		}
		if _, err := newSemaphore(t, newClient(t, n), "q-zset", 2).TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"q-hash": "hash", "q-zset": "zset"} {
		info, err := q.Inspect(ctx, name)
		if err != nil || !info.Held || info.Type != want {
			t.Errorf("Inspect(%q) = held %v, type %q, %v; want held, type %q", name, info.Held, info.Type, err, want)
		}
	}
}

// Close waits for a node's call that a fan-out stopped waiting for (here
// an extension that a majority answered while the third node's reply is
// held): the call is the Client's background work, counted on the tracker
// Close waits on, and so it is over before the Client's Redis clients are
// closed.
func TestRedlockCloseWaitsForANodesLateCall(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	p := redistest.NewProxy(t, srvs[2].Addr())
	stuck := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { stuck.Close() })
	c := newRedlock(t, []redis.UniversalClient{direct[0], direct[1], stuck}, 0)
	l, err := c.TryAcquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	p.StallReplies()
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend with a majority answering = %v, want nil", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with node 2's extension in flight = %v, want %v: it did not wait for the late call", err, context.DeadlineExceeded)
	}
	p.Cut() // node 2's extension fails at once
	cctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		t.Errorf("Close once node 2's extension ended = %v, want nil", err)
	}
}

// Close does not wait for a List under way: a walk of the keyspace is no
// clean-up of the Client's, and Close returns once its own clean-up is
// done, while the List, stuck on a node whose SCAN reply is held, goes on
// until that node's read timeout ends it.
func TestRedlockCloseDoesNotWaitForAListUnderWay(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	p := redistest.NewProxy(t, srvs[2].Addr())
	stuck := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { stuck.Close() })
	if err := stuck.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A node that answers past the node timeout leaves work of the Client's
	// in the background (the rest of its call, a retried release), which
	// Close waits for and the stalled proxy would hold: the node timeout
	// is far above a loaded machine's round trip (the default, TTL/50, is
	// 200ms), so that nothing but the List is under way once it stalls.
	c := newRedlock(t, []redis.UniversalClient{direct[0], direct[1], stuck}, 2*time.Second)
	l, err := c.TryAcquire(ctx, "listed")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	direct[2].ConfigResetStat(ctx)
	p.StallReplies()
	listed := make(chan error, 1)
	go func() {
		_, err := c.List(ctx, "*")
		listed <- err
	}()
	scanned := func() bool {
		info, err := direct[2].Info(ctx, "commandstats").Result()
		return err == nil && strings.Contains(info, "cmdstat_scan:calls=")
	}
	if !waitFor(5*time.Second, scanned) {
		t.Fatal("node 2 never ran the List's SCAN")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	err = c.Close(cctx)
	took := time.Since(start)
	p.Cut() // the List's SCAN on node 2 fails at once
	if err != nil {
		t.Errorf("Close with a List under way = %v after %v, want nil: it waited for the List", err, took)
	}
	select {
	case <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("List never returned")
	}
}

// Over a quorum, a Lock whose lease another Lock resumed on a majority,
// while one node missed the resume and still answers yes, is told so at
// its next extension (ErrNotHeld, naming the resume), its Release leaves
// the resumed lease alone, and no other client takes the lock meanwhile.
func TestRedlockSupersededOnAMajorityIsToldAndSparesTheResume(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	p := redistest.NewProxy(t, srvs[2].Addr())
	missed := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { missed.Close() })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { missed.Ping(ctx) })
	}
	wg.Wait()
	nodes := []redis.UniversalClient{direct[0], direct[1], missed}
	opts := []dlock.Option{dlock.LeaseTTL(5 * time.Second), dlock.WithAutoExtend(false)}
	old := newRedlock(t, nodes, 200*time.Millisecond, opts...)
	next := newRedlock(t, nodes, 200*time.Millisecond, opts...)
	third := newRedlock(t, direct, 200*time.Millisecond, opts...)
	const name = "q-sup"
	l0, err := old.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p.Stall() // node 2 misses the resume
	r, err := next.TryAcquire(ctx, name, dlock.Resume(l0.Token()))
	p.Cut()
	if err != nil {
		t.Fatalf("resume on nodes 0 and 1 = %v", err)
	}
	defer r.Release(ctx)
	err = l0.Extend(ctx, 5*time.Second)
	t.Logf("old Extend: %v", err)
	if !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "resumed") {
		t.Errorf("the superseded Lock's Extend = %v, want ErrNotHeld naming the resume", err)
	}
	l0.Release(ctx)
	if err := r.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("the resumed Lock's Extend after the superseded Lock's Release = %v", err)
	}
	if l3, err := third.TryAcquire(ctx, name); err == nil {
		l3.Release(ctx)
		t.Error("another client took the lock the resumed Lock holds")
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("the resumed Lock's Release = %v", err)
	}
}

// A List or an Inspect over a quorum with one node whose replies are held
// ends with its context, not at that node's read timeout: a SCAN is waited
// for up to the caller's deadline, not past it (the answers of a majority
// already show every lock a majority holds), and an Inspect waits no longer
// than its context either. The held node's calls end on their own once its
// connection is cut.
func TestRedlockListWithAStalledNodeEndsWithItsContext(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	p := redistest.NewProxy(t, srvs[2].Addr())
	stuck := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { stuck.Close() })
	if err := stuck.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newRedlock(t, []redis.UniversalClient{direct[0], direct[1], stuck}, 0, dlock.LeaseTTL(time.Minute)) // node timeout 1.2s
	l, err := c.TryAcquire(ctx, "listed")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p.StallReplies()
	defer p.Cut() // the held node's calls fail at once

	for _, op := range []string{"List", "Inspect"} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		var infos []dlock.Info
		if op == "List" {
			infos, err = c.List(cctx, "*")
		} else {
			var info dlock.Info
			info, err = c.Inspect(cctx, "listed")
			infos = []dlock.Info{info}
		}
		took := time.Since(start)
		cancel()
		if took > 2*time.Second {
			t.Errorf("%s with a 300ms ctx and node 2's replies held took %v, want it to end with its ctx, not at the node's 10s read timeout", op, took.Round(time.Millisecond))
		}
		// Its ctx may end before the walk inspects the lock; if it does not
		// fail, it shows the lock held.
		if err == nil && (len(infos) != 1 || infos[0].Name != "listed" || !infos[0].Held) {
			t.Errorf("%s with node 2's replies held = %+v, nil, want the held lock or an error", op, infos)
		}
	}
}

// A resumed Lock's release that a majority of nodes carried out releases
// the lock, even if one node still records the old holder's numbered
// extension (the resume's extension has not landed there yet, or was
// lost): that node's "another Lock resumed it" does not outweigh the
// majority. Only a release refused so on enough nodes is superseded.
func TestRedlockResumedReleaseCarriedByAMajorityIsReleased(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx := t.Context()
	l := firstLease(t, newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false)), "laggard")
	r, err := newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false)).TryAcquire(ctx, "laggard", dlock.Resume(l.Token()))
	if err != nil {
		t.Fatal(err)
	}
	marker := l.Key() + ":r:" + l.Token()
	if err := nodes[2].Set(ctx, marker, "e1", 10*time.Second).Err(); err != nil { // (the old holder's number, no resumer's)
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed Lock, carried out on 2 of 3 nodes = %v, want nil", err)
	}
	for i, n := range nodes[:2] {
		if v, _ := n.Exists(ctx, l.Key()).Result(); v != 0 {
			t.Errorf("node %d still holds the lock after the release", i)
		}
	}
}
