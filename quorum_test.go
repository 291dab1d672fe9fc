package dlock_test

import (
	"context"
	"errors"
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

func TestRedlockHolderLosingMajoritySignalled(t *testing.T) {
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	const ttl = time.Second
	c := newRedlock(t, nodes, 50*time.Millisecond, dlock.LeaseTTL(ttl),
		dlock.WithDrift(250*time.Millisecond)) // room for a loaded machine's timer delays
	start := time.Now()
	l, err := c.TryAcquire(ctx, "maj")
	if err != nil {
		t.Fatal(err)
	}
	srvs[0].Kill()
	srvs[1].Kill()
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("Done() still open 5s after the majority died")
	}
	if closedAt := time.Now(); !closedAt.Before(start.Add(ttl)) {
		t.Errorf("Done closed %v after the lease could have expired", closedAt.Sub(start.Add(ttl)))
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Err() = %v, want ErrNotHeld", err)
	}
	l.Release(ctx)
}

func TestRedlockFencesIncreaseThroughFailures(t *testing.T) {
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
		if fenceOf(t, l) <= last {
			t.Errorf("%s: Fence() = %d, want > %d", step, fenceOf(t, l), last)
		}
		last = fenceOf(t, l)
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
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, nodes, 0)
	l, err := c.TryAcquire(ctx, "listed")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
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
	time.Sleep(300 * time.Millisecond) // the waiter has tried once and sleeps
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
