package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// Replica acknowledgement on a Cluster whose lock slot is being migrated:
// the edges of the retries (their count, the script cache of the slot's
// new master, a context that ends during a pause). One Cluster for all.
func TestReplicaAckMigrationEdges(t *testing.T) {
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
	// The move ends at the at-th ASK or TRYAGAIN a master answers (0: never).
	var mu sync.Mutex
	var seen, at int
	var end func()
	onRedirect := func() {
		mu.Lock()
		defer mu.Unlock()
		seen++
		if end != nil && seen == at {
			end()
			end = nil
		}
	}
	arm := func(n int, done func()) {
		mu.Lock()
		defer mu.Unlock()
		seen, at, end = 0, n, done
	}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(redirected{onRedirect}) })
	ctx := t.Context()
	c := newClient(t, cc, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false), dlock.WithReplicaAck(1, 2*time.Second))

	// The docs: a call that meets a move under way tries again after
	// pauses, for up to ¾ s. A move that ends at the fifth redirect (the
	// last paused try) ends within that; the next try goes to the new
	// master, whose script cache may not have the script yet (a master that
	// never ran it, or one restarted): a NOSCRIPT there must be cured as on
	// any other try, not handed to the caller raw.
	t.Run("a move that ends at the last paused try, onto a master without the script", func(t *testing.T) {
		name := "acked-late-end-noscript"
		_, dst, done := migrating(t, masters, cc, "dlock:{"+name+"}")
		if _, err := dst.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		arm(5, done)
		start := time.Now()
		l, err := c.TryAcquire(ctx, name)
		took := time.Since(start)
		if err != nil {
			arm(0, nil)
			done()
			t.Fatalf("TryAcquire with replica ack, the move ended at the 5th redirect (after %v) = %v, want the lock: the move ended within the retries", took, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	})

	// A context that ends during a pause between redirects: the caller is
	// told its context ended (ErrNotAcquired and ctx's error), promptly,
	// and the call leaves nothing held.
	t.Run("a context that ends during the pauses", func(t *testing.T) {
		name := "acked-ctx-ends"
		src, dst, done := migrating(t, masters, cc, "dlock:{"+name+"}")
		arm(0, nil)
		defer done()
		short, cancel := context.WithTimeout(ctx, 120*time.Millisecond)
		defer cancel()
		start := time.Now()
		l, err := c.TryAcquire(short, name)
		took := time.Since(start)
		if l != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("TryAcquire whose ctx ends during a migration's pause = %v, %v; want nil and ErrNotAcquired, context.DeadlineExceeded", l, err)
		}
		if took > 1500*time.Millisecond {
			t.Errorf("TryAcquire took %v past its 120ms ctx", took)
		}
		for _, s := range []*redistest.Server{src, dst} {
			if exists(ctx, s, "dlock:{"+name+"}") {
				t.Errorf("a lock key is left on %s", s.Addr())
			}
		}
	})

	// An extension whose context ends during a pause is told the context's
	// end (as one whose go-redis call it cut short), not a redirect the
	// library chose to wait out.
	t.Run("an extension whose context ends during the pauses", func(t *testing.T) {
		name := "acked-ext-ctx-ends"
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		src, dst, done := migrating(t, masters, cc, l.Key())
		if _, err := src.Do(ctx, "MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS", l.Key()); err != nil {
			t.Fatal(err)
		}
		arm(0, nil)
		short, cancel := context.WithTimeout(ctx, 120*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = l.Extend(short, time.Minute)
		took := time.Since(start)
		done()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Extend whose ctx ends during a migration's pause = %v, want an error matching context.DeadlineExceeded", err)
		}
		if err != nil && (strings.Contains(err.Error(), ": ASK ") || strings.Contains(err.Error(), ": TRYAGAIN")) {
			t.Errorf("Extend's error carries Redis's raw redirect: %v", err)
		}
		if took > 1500*time.Millisecond {
			t.Errorf("Extend took %v past its 120ms ctx", took)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release once the move ended = %v", err)
		}
	})

	// The docs (guarantees): a call whose context ends mid-flight returns
	// at once. With replica ack on a Cluster the script and its WAIT go to
	// the slot's master on a go-redis connection of its own, which does not
	// watch ctx: a stalled replica holds WAIT for the whole ack timeout
	// (2s here), past a 200ms ctx. The grant left behind must be undone.
	t.Run("a context that ends while WAIT waits for a stalled replica", func(t *testing.T) {
		name := "acked-ctx-wait"
		l, err := c.TryAcquire(ctx, name) // (the scripts loaded on its master)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, l.Key())
		if err != nil {
			t.Fatal(err)
		}
		var master, replica *redistest.Server
		for _, n := range nodes {
			if n.Addr() == m.Options().Addr {
				master = n
			}
		}
		for _, n := range nodes {
			if info(ctx, n, "replication", "master_port") == strconv.Itoa(master.Port()) {
				replica = n
			}
		}
		if replica == nil {
			t.Fatal("no replica of the lock's master")
		}
		replica.Pause()
		resumed := false
		defer func() {
			if !resumed {
				replica.Resume()
			}
		}()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		l, err = c.TryAcquire(short, name)
		took := time.Since(start)
		replica.Resume()
		resumed = true
		if l != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("TryAcquire whose ctx ends while WAIT waits = %v, %v; want nil and ErrNotAcquired, context.DeadlineExceeded", l, err)
		}
		if took > 1500*time.Millisecond { // (the ack timeout: 2s)
			t.Errorf("TryAcquire took %v past its 200ms ctx (the ack timeout is 2s)", took)
		}
		for deadline := time.Now().Add(3 * time.Second); exists(ctx, master, "dlock:{"+name+"}"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the grant whose caller left is still held 3s later, by nobody")
				break
			}
		}
	})
}

// The same on one master with a replica (the batcher's connection), for a
// semaphore's two permits taken at once: a call whose context ends while
// WAIT waits for a stalled replica returns at once, told that its context
// ended, and the hold left behind is undone, both permits free again.
// (A TryAcquire's: TestTryAcquireLeavesAtItsContextWhileTheServerStalls.)
func TestReplicaAckAcquireNLeavesAtItsContextWhileWAITWaits(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	master := redistest.Start(t, redistest.TCP())
	replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never synced")
	}
	c := newClient(t, master.Client(t), dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false), dlock.WithReplicaAck(1, 2*time.Second))
	sem, err := c.Semaphore("acked-one-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.AcquireN(ctx, 2) // (the scripts loaded)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	replica.Pause()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err = sem.AcquireN(short, 2)
	took := time.Since(start)
	replica.Resume()
	if l != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || took > 1500*time.Millisecond {
		t.Errorf("AcquireN(2) whose ctx ends while WAIT waits = %v, %v after %v; want nil and ErrNotAcquired, context.DeadlineExceeded, at once", l, err, took)
	}
	if !waitFor(3*time.Second, func() bool { n, err := sem.Available(ctx); return err == nil && n == 2 }) {
		n, err := sem.Available(ctx)
		t.Errorf("Available 3s after the AcquireN whose caller left = %v, %v; want 2: the hold undone", n, err)
	}
}

// The extension's clock flag (its optional last argument, ARGV[4]) goes
// to every kind whose extension takes it: a leader's lease extended with a
// clock observer (and with replica ack, through acked) reads as extended,
// and keeps its proclaimed value alive with it; a plain lock's too.
func TestExtensionsWithTheClockFlagAreReadAsExtended(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	master := redistest.Start(t, redistest.TCP())
	replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never synced")
	}
	rdb := master.Client(t)
	for _, acked := range []bool{false, true} {
		w := new(clockWatcher)
		opts := []dlock.Option{dlock.LeaseTTL(5 * time.Second), dlock.WithAutoExtend(false), dlock.WithObserver(w.observer())}
		if acked {
			opts = append(opts, dlock.WithReplicaAck(1, time.Second))
		}
		c := newClient(t, rdb, opts...)
		e, err := c.Election(fmt.Sprint("clock-flag-", acked))
		if err != nil {
			t.Fatal(err)
		}
		ld, err := e.Campaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		if err := ld.Proclaim(ctx, "w"); err != nil {
			t.Fatal(err)
		}
		if err := ld.Lock().Extend(ctx, time.Minute); err != nil {
			t.Errorf("acked %v: a leader's Extend with the clock observed = %v, want nil", acked, err)
		}
		key := ld.Lock().Key()
		for _, k := range []string{key, key + ":v"} {
			if ms, err := rdb.PTTL(ctx, k).Result(); err != nil || ms < 30*time.Second {
				t.Errorf("acked %v: PTTL %s after the leader's Extend(1m) = %v, %v; want above 30s", acked, k, ms, err)
			}
		}
		l, err := c.TryAcquire(ctx, fmt.Sprint("clock-flag-plain-", acked))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Errorf("acked %v: a plain Extend with the clock observed = %v, want nil", acked, err)
		}
		if ms, err := rdb.PTTL(ctx, l.Key()).Result(); err != nil || ms < 30*time.Second {
			t.Errorf("acked %v: PTTL after a plain Extend(1m) = %v, %v; want above 30s", acked, ms, err)
		}
		if err := ld.Resign(ctx); err != nil {
			t.Errorf("Resign = %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	}
}
