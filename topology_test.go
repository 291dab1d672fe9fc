package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// These tests build real topologies (replicas and Sentinels, a 3-master
// Cluster) from redis-server processes. `go test -short` skips them.

func info(ctx context.Context, s *redistest.Server, section, field string) string {
	v, err := s.Do(ctx, "INFO", section)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(fmt.Sprint(v), "\r\n") {
		if k, val, ok := strings.Cut(line, ":"); ok && k == field {
			return val
		}
	}
	return ""
}

// replicaAcks waits until replica has synced with master and master counts
// its acknowledgements (WAIT 1 answers 1): a replica whose link is up may
// not be online on the master's side yet, and a WAIT then counts nobody.
func replicaAcks(ctx context.Context, master, replica *redistest.Server) bool {
	return waitFor(30*time.Second, func() bool {
		if info(ctx, replica, "replication", "master_link_status") != "up" {
			return false
		}
		n, err := master.Do(ctx, "WAIT", 1, 200)
		return err == nil && fmt.Sprint(n) == "1"
	})
}

// replicated starts a master and a replica that replicates from it
// through a proxy (link: Stall stops replication), and waits until the
// master counts the replica's acknowledgements.
func replicated(t *testing.T, ctx context.Context) (master, replica *redistest.Server, link *redistest.Proxy) {
	fast := redistest.Args("--repl-diskless-sync-delay", "0")
	master = redistest.Start(t, redistest.TCP(), fast)
	link = redistest.NewProxy(t, master.Addr())
	replica = redistest.Start(t, redistest.TCP(), fast, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(link.Port())))
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never synced")
	}
	return master, replica, link
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Sentinel topology")
	}
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	master, link, replicas, sentinelAddrs := sentinelTopology(t, ctx)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: sentinelAddrs, MaxRetries: -1})
	t.Cleanup(func() { fc.Close() })
	succession(t, fc, "elect") // an election through the Sentinel client
	semaphoreOn(t, fc, "a Sentinel master")
	rwMutexOn(t, fc, "a Sentinel master")

	acked := newClient(t, fc, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false), dlock.WithReplicaAck(1, 2*time.Second))
	plain := newClient(t, fc, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
	const n = 20
	for i := range n {
		if _, err := acked.TryAcquire(ctx, fmt.Sprint("acked-", i)); err != nil {
			t.Fatalf("acked TryAcquire %d = %v", i, err)
		}
	}

	kept := keepThroughFailover(t, ctx, acked, replicas)

	// Replication stalls: an acknowledged acquisition now fails cleanly, an
	// unacknowledged one succeeds on the master alone.
	link.Stall()
	_, err := acked.TryAcquire(ctx, "during-freeze")
	if !errors.Is(err, dlock.ErrReplicaAck) || !errors.Is(err, dlock.ErrNotAcquired) || prefixes(err.Error()) != 1 {
		t.Errorf("acked TryAcquire with replicas frozen = %v, want ErrReplicaAck and ErrNotAcquired, with one dlock: prefix", err)
	}
	if exists(ctx, master, "dlock:{during-freeze}") {
		t.Error("unacknowledged acquisition left its key on the master")
	}
	for i := range n {
		if _, err := plain.TryAcquire(ctx, fmt.Sprint("plain-", i)); err != nil {
			t.Fatalf("plain TryAcquire %d = %v", i, err)
		}
	}
	// One more, watched by its watchdog: when the failover loses it, the
	// holder must be told before its lease would have run out.
	const watchedTTL = 10 * time.Second
	watched, err := newClient(t, fc, dlock.LeaseTTL(watchedTTL)).TryAcquire(ctx, "watched")
	if err != nil {
		t.Fatalf("watched TryAcquire = %v", err)
	}
	defer watched.Release(ctx)

	// The master dies with the stalled replication stream; a replica is promoted.
	master.Kill()
	link.Cut()
	if !waitFor(60*time.Second, func() bool {
		return fc.Ping(ctx).Err() == nil && fc.Set(ctx, "probe", "1", time.Second).Err() == nil
	}) {
		t.Fatal("no new master within 60s")
	}

	// Clients carry on with the new master.
	other := newClient(t, fc, dlock.WithAutoExtend(false))
	l, err := other.TryAcquire(ctx, "after-failover")
	if err != nil {
		t.Fatalf("TryAcquire after the failover = %v", err)
	}
	l.Release(ctx)
	succession(t, fc, "elect-after")
	semaphoreOn(t, fc, "the promoted master")
	rwMutexOn(t, fc, "the promoted master")
	kept.check(t, ctx, other)
	lostAcked, secondHolders := takenAfterFailover(ctx, other, n)
	if lostAcked != 0 {
		t.Errorf("%d of %d acknowledged locks were lost in the failover, want 0", lostAcked, n)
	}
	toldOfFailoverLoss(t, watched)
	t.Logf("failover with replication stalled: %d of %d unacknowledged locks got a second holder; %d of %d acknowledged ones", secondHolders, n, lostAcked, n)
	if secondHolders == 0 {
		t.Errorf("no unacknowledged lock was lost, though replication was stalled: the test did not exercise the window")
	}
}

// sentinelTopology starts a master, two replicas that reach it through
// link (a proxy that can stall replication) and three sentinels watching
// it as "m", and waits until all see each other.
func sentinelTopology(t *testing.T, ctx context.Context) (master *redistest.Server, link *redistest.Proxy, replicas []*redistest.Server, sentinelAddrs []string) {
	t.Helper()
	fast := redistest.Args("--repl-diskless-sync-delay", "0")
	master = redistest.Start(t, redistest.TCP(), fast)
	// Replicas reach the master through a proxy that can stall replication.
	link = redistest.NewProxy(t, master.Addr())
	port := strconv.Itoa(link.Port())
	replicas = []*redistest.Server{
		redistest.Start(t, redistest.TCP(), fast, redistest.Args("--replicaof", "127.0.0.1", port)),
		redistest.Start(t, redistest.TCP(), fast, redistest.Args("--replicaof", "127.0.0.1", port)),
	}
	if !waitFor(30*time.Second, func() bool {
		return info(ctx, replicas[0], "replication", "master_link_status") == "up" &&
			info(ctx, replicas[1], "replication", "master_link_status") == "up"
	}) {
		t.Fatal("replicas never synced")
	}
	var sentinels []*redistest.Server
	for range 3 {
		s := redistest.Start(t, redistest.Sentinel("m", master.Port(), 2, 500*time.Millisecond, 3*time.Second))
		sentinels = append(sentinels, s)
		sentinelAddrs = append(sentinelAddrs, s.Addr())
	}
	if !waitFor(30*time.Second, func() bool {
		for _, s := range sentinels {
			v, err := s.Do(ctx, "SENTINEL", "MASTER", "m")
			if err != nil || !sentinelField(v, "num-other-sentinels", "2") {
				return false
			}
			if !sentinelField(v, "num-slaves", "2") {
				return false
			}
		}
		return true
	}) {
		t.Fatal("sentinels never saw each other and both replicas")
	}
	return master, link, replicas, sentinelAddrs
}

// takenAfterFailover counts the names acked-0… and plain-0… (n each) that
// other could take: acknowledged locks lost, unacknowledged ones that got
// a second holder.
func takenAfterFailover(ctx context.Context, other *dlock.Client, n int) (lostAcked, secondHolders int) {
	for i := range n {
		if _, err := other.TryAcquire(ctx, fmt.Sprint("acked-", i)); err == nil {
			lostAcked++
		}
		if _, err := other.TryAcquire(ctx, fmt.Sprint("plain-", i)); err == nil {
			secondHolders++
		}
	}
	return lostAcked, secondHolders
}

// toldOfFailoverLoss: watched, lost in a failover, is told (ErrNotHeld)
// by its watchdog well before its lease would have run out.
func toldOfFailoverLoss(t *testing.T, watched *dlock.Lock) {
	t.Helper()
	select {
	case <-watched.Done():
		if err := watched.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("watched lock after the failover: Err() = %v, want ErrNotHeld", err)
		}
	case <-time.After(time.Until(watched.ValidUntil().Add(-2 * time.Second))):
		// Not just the validity timer: the watchdog must find the key gone.
		t.Error("the holder of a lock lost in the failover was not told well before its lease ended")
	}
}

// keptHolds are permits and read-write holds acknowledged by a replica
// before a failover (WithReplicaAck), which the promoted master must still
// have.
type keptHolds struct {
	permits []*dlock.Lock // both permits of the semaphore "sem-kept" (N = 2)
	reads   []*dlock.Lock // two reads of the read-write lock "rw-kept"
	write   *dlock.Lock   // the write of the read-write lock "rw-kept-w"
}

// keepThroughFailover takes, through the acknowledging Client acked, two
// permits of a semaphore of 2, two reads of a read-write lock and the write
// of another, and waits until every replica has them (acknowledged by one,
// they reach the other soon after), so that whichever replica is promoted
// has them. Their lease outlasts any failover the test waits for.
func keepThroughFailover(t *testing.T, ctx context.Context, acked *dlock.Client, replicas []*redistest.Server) keptHolds {
	t.Helper()
	long := dlock.LeaseTTL(3 * time.Minute)
	var k keptHolds
	sem := newSemaphore(t, acked, "sem-kept", 2)
	rw, rww := newRW(t, acked, "rw-kept"), newRW(t, acked, "rw-kept-w")
	for range 2 {
		p, err := sem.TryAcquire(ctx, long, dlock.HolderMeta("kept"))
		if err != nil {
			t.Fatalf("acknowledged semaphore TryAcquire through Sentinel = %v", err)
		}
		r, err := rw.Reader().TryAcquire(ctx, long)
		if err != nil {
			t.Fatalf("acknowledged read TryAcquire through Sentinel = %v", err)
		}
		k.permits, k.reads = append(k.permits, p), append(k.reads, r)
	}
	w, err := rww.Writer().TryAcquire(ctx, long)
	if err != nil {
		t.Fatalf("acknowledged write TryAcquire through Sentinel = %v", err)
	}
	k.write = w
	want := map[string]int64{"dlock:{sem-kept}": 2, "dlock:{rw-kept}": 2, "dlock:{rw-kept-w}": 1}
	if !waitFor(30*time.Second, func() bool {
		for _, r := range replicas {
			for key, n := range want {
				if v, err := r.Do(ctx, "ZCARD", key); err != nil || fmt.Sprint(v) != fmt.Sprint(n) {
					return false
				}
			}
		}
		return true
	}) {
		t.Fatal("the acknowledged permits and holds never reached both replicas")
	}
	return k
}

// check verifies, through c on the promoted master, that the kept permits
// and holds are still held (others are refused, Holders lists them), that
// their holders release them there, and that the names are free then.
func (k keptHolds) check(t *testing.T, ctx context.Context, c *dlock.Client) {
	t.Helper()
	sem := newSemaphore(t, c, "sem-kept", 2)
	rw, rww := newRW(t, c, "rw-kept"), newRW(t, c, "rw-kept-w")
	_, err := sem.TryAcquire(ctx)
	if na, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || na.Permits != 2 {
		t.Errorf("a permit of a semaphore whose 2 permits were acknowledged before the failover = %v, want refused (NotAcquiredError)", err)
	}
	if hs, err := sem.Holders(ctx); err != nil || len(hs) != 2 || hs[0].Meta != "kept" ||
		!slices.ContainsFunc(k.permits, func(l *dlock.Lock) bool { return l.Token() == hs[0].Token }) {
		t.Errorf("Holders after the failover = %+v, %v; want the 2 acknowledged permits", hs, err)
	}
	if _, err := rw.Writer().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a write beside 2 reads acknowledged before the failover = %v, want ErrNotAcquired", err)
	}
	if hs, err := rw.Holders(ctx); err != nil || len(hs) != 2 || hs[0].Write {
		t.Errorf("read-write lock's Holders after the failover = %+v, %v; want the 2 acknowledged reads", hs, err)
	}
	if _, err := rww.Reader().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a read beside a write acknowledged before the failover = %v, want ErrNotAcquired", err)
	}
	for _, l := range append(append(slices.Clone(k.permits), k.reads...), k.write) {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release of %s, acknowledged before the failover, on the promoted master = %v, want nil", l.Name(), err)
		}
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Errorf("a permit once the kept ones were released = %v", err)
	} else {
		p.Release(ctx)
	}
	for _, m := range []*dlock.RWMutex{rw, rww} {
		if l, err := m.Writer().TryAcquire(ctx); err != nil {
			t.Errorf("a write of %s once the kept holds were released = %v", m.Name(), err)
		} else {
			l.Release(ctx)
		}
	}
}

// exists reports whether node s itself holds key, and it is not a released
// lock's tombstone (a node that does not own the key's slot answers MOVED:
// false).
func exists(ctx context.Context, s *redistest.Server, key string) bool {
	v, err := s.Do(ctx, "EXISTS", key)
	if n, _ := v.(int64); err != nil || n != 1 {
		return false
	}
	val, _ := s.Do(ctx, "GET", key) // a hash answers WRONGTYPE: not a tombstone
	str, _ := val.(string)
	return !strings.HasPrefix(str, "~")
}

// sentinelField reports whether a SENTINEL MASTER reply (a flat list or a
// map) has field set to want.
func sentinelField(v any, field, want string) bool {
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if fmt.Sprint(v[i]) == field {
				return fmt.Sprint(v[i+1]) == want
			}
		}
	case map[any]any:
		return fmt.Sprint(v[field]) == want
	}
	return false
}

// startCluster builds a 3-master Cluster and returns it with a client.
func startCluster(t *testing.T) ([]*redistest.Server, *redis.ClusterClient) {
	t.Helper()
	nodes := redistest.StartCluster(t, 3, 0)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	return nodes, cc
}

func TestCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	leakcheck.Check(t)
	nodes, cc := startCluster(t)
	ctx := t.Context()
	// Leases of a minute: this part pins where keys land, not the watchdog
	// (TestClusterSlotMigration does, on a Cluster); 60 one-second leases held
	// through hundreds of round trips raced the machine's timers, and one lost.
	c := newClient(t, cc, dlock.LeaseTTL(time.Minute))

	// Many names, spread over the slots: each lock's keys share one slot.
	var locks []*dlock.Lock
	for i := range 60 {
		name := fmt.Sprint("job-", i)
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("TryAcquire(%s) on the cluster = %v", name, err)
		}
		locks = append(locks, l)
		slot := cc.ClusterKeySlot(ctx, l.Key()).Val()
		for _, suffix := range []string{":fence", ":q", ":qw", ":ch"} {
			if s := cc.ClusterKeySlot(ctx, l.Key()+suffix).Val(); s != slot {
				t.Errorf("%s%s in slot %d, lock key in %d", l.Key(), suffix, s, slot)
			}
		}
	}
	perNode := map[string]bool{}
	for _, l := range locks {
		for _, n := range nodes {
			if exists(ctx, n, l.Key()) {
				perNode[n.Addr()] = true
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%s) = %v", l.Name(), err)
		}
	}
	if len(perNode) != 3 {
		t.Errorf("locks landed on %d nodes, want all 3", len(perNode))
	}

	// A waiter is woken by the release message, over sharded pub/sub.
	holder, err := c.TryAcquire(ctx, "wake")
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, cc, dlock.LeaseTTL(time.Minute)) // fair: no backoff, it sleeps a third of its queue entry's life
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := waiter.Acquire(wctx, "wake")
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(5*time.Second, func() bool {
		return cc.LLen(ctx, "dlock:{wake}:q").Val() == 1
	}) {
		t.Fatal("waiter never queued")
	}
	if !waitFor(5*time.Second, listeningOnAll(t, "wake", cc)) { // then it sleeps
		t.Fatal("waiter never subscribed")
	}
	holder.Release(ctx)
	if err := <-got; err != nil {
		t.Errorf("waiter on the cluster = %v, want woken by the release", err)
	}
	semaphoreOn(t, cc, "the cluster")
	succession(t, cc, "elect") // over sharded pub/sub
	clusterWithoutScripts(t, nodes)
	rwMutexOn(t, cc, "the cluster")
}

// rwMutexOn checks a read-write lock on the deployment rdb (named where,
// for the messages): reads together, a write alone, and a writer granted
// the lock by the last read's release over pub/sub (sharded on a Cluster).
func rwMutexOn(t *testing.T, rdb redis.UniversalClient, where string) {
	ctx := t.Context()
	rw := newRW(t, newClient(t, rdb, dlock.LeaseTTL(time.Minute)), "doc")
	var reads []*dlock.Lock
	for range 2 {
		l, err := rw.Reader().TryAcquire(ctx)
		if err != nil {
			t.Fatalf("read TryAcquire on %s = %v", where, err)
		}
		reads = append(reads, l)
	}
	if _, err := rw.Writer().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a write beside 2 reads on %s = %v, want ErrNotAcquired", where, err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // its timer: 20s
		defer cancel()
		l, err := newRW(t, newClient(t, rdb, dlock.LeaseTTL(time.Minute)), "doc").Writer().Acquire(wctx)
		if err == nil {
			_, err = l.Fence(ctx)
			l.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{doc}:q").Val() == 1 }) {
		t.Fatalf("read-write lock's writer never queued on %s", where)
	}
	if !waitFor(5*time.Second, listeningOnAll(t, "doc", rdb)) { // then it sleeps
		t.Fatalf("read-write lock's writer never subscribed on %s", where)
	}
	for _, l := range reads {
		l.Release(ctx)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("writer on %s = %v, want granted the lock by the last read's release", where, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("writer on %s not woken 5s after the reads were released", where)
	}
	if n := rdb.Exists(ctx, "dlock:{doc}", "dlock:{doc}:q", "dlock:{doc}:qw").Val(); n != 0 {
		t.Errorf("%d read-write lock keys left on %s after every hold was released", n, where)
	}
}

// semaphoreOn checks a semaphore on the deployment rdb (named where, for
// the messages): N permits and no more, and a waiter handed a permit by a
// release over pub/sub (sharded on a Cluster).
func semaphoreOn(t *testing.T, rdb redis.UniversalClient, where string) {
	ctx := t.Context()
	s := newSemaphore(t, newClient(t, rdb, dlock.LeaseTTL(time.Minute)), "pool", 2)
	var held []*dlock.Lock
	for range 2 {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("semaphore TryAcquire on %s = %v", where, err)
		}
		held = append(held, l)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a third permit of 2 on %s = %v, want ErrNotAcquired", where, err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // its timer: 20s
		defer cancel()
		l, err := newSemaphore(t, newClient(t, rdb, dlock.LeaseTTL(time.Minute)), "pool", 2).Acquire(wctx)
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{pool}:q").Val() == 1 }) {
		t.Fatalf("semaphore waiter never queued on %s", where)
	}
	if !waitFor(5*time.Second, listeningOnAll(t, "pool", rdb)) { // then it sleeps
		t.Fatalf("semaphore waiter never subscribed on %s", where)
	}
	held[0].Release(ctx)
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("semaphore waiter on %s = %v, want handed the released permit", where, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("semaphore waiter on %s not woken 5s after a release", where)
	}
	held[1].Release(ctx)
	if n := rdb.Exists(ctx, "dlock:{pool}", "dlock:{pool}:q", "dlock:{pool}:qw").Val(); n != 0 {
		t.Errorf("%d semaphore keys left on %s after every permit was released", n, where)
	}
}

// A slot holding a live lock moves to another node; the lease outlives the
// move, and the holder keeps extending it (through MOVED) and releases it on
// the new node. While the slot is half-moved the watchdog's extensions are
// refused (TRYAGAIN: the lease's marker key is not there) and retried: the
// lease survives a move that ends within its validity. The test waits for
// the watchdog's runs, not for fixed times: on a loaded machine an
// acquisition alone took 500ms, and fixed sleeps left the move no validity.
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	leakcheck.Check(t)
	nodes, cc := startCluster(t)
	ctx := t.Context()
	const ttl = 3 * time.Second
	runs := make(chan watchdogRun, 64)
	c := newClient(t, cc, dlock.LeaseTTL(ttl), dlock.WithObserver(dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		if e.Op == dlock.OpExtend && e.Auto {
			select {
			case runs <- watchdogRun{time.Now().Add(-e.Took), e.Err}:
			default:
			}
		}
	}}))
	l, err := c.TryAcquire(ctx, "moving")
	if err != nil {
		t.Fatal(err)
	}
	slot := cc.ClusterKeySlot(ctx, l.Key()).Val()
	ids := map[*redistest.Server]string{}
	var src, dst *redistest.Server
	for _, n := range nodes {
		id, _ := n.Do(ctx, "CLUSTER", "MYID")
		ids[n] = fmt.Sprint(id)
		if exists(ctx, n, l.Key()) {
			src = n
		}
	}
	for _, n := range nodes {
		if n != src {
			dst = n
			break
		}
	}
	if src == nil {
		t.Fatal("lock key not found on any node")
	}
	must := func(s *redistest.Server, args ...any) {
		t.Helper()
		if _, err := s.Do(ctx, args...); err != nil {
			t.Fatalf("%v on %s: %v", args, s.Addr(), err)
		}
	}
	must(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
	must(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
	if !awaitRuns(runs, time.Now(), 1, false, 2*ttl) {
		t.Fatalf("no run of the watchdog while the slot was half-moved; Err() = %v", l.Err())
	}
	keys, _ := src.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100)
	migrate := append([]any{"MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS"}, keys.([]any)...)
	must(src, migrate...)
	for _, n := range nodes {
		must(n, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
	}
	if !awaitRuns(runs, time.Now(), 2, true, 3*ttl) {
		t.Errorf("not extended twice on the new node in %v", 3*ttl)
	}
	if err := l.Err(); err != nil {
		t.Errorf("lock after its slot moved: Err() = %v, want nil", err)
	}
	if v, _ := dst.Do(ctx, "GET", l.Key()); !strings.HasPrefix(fmt.Sprint(v), l.Token()) {
		t.Errorf("lock key on the new node = %v, want our token", v)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after the slot moved = %v", err)
	}
	if exists(ctx, dst, l.Key()) {
		t.Error("lock key still on the new node after Release")
	}
}

// watchdogRun is one of the watchdog's extensions: when it began, and its
// error.
type watchdogRun struct {
	began time.Time
	err   error
}

// awaitRuns waits up to d for n of the watchdog's runs that began after
// since (that succeeded, with ok), and reports whether they came.
func awaitRuns(runs <-chan watchdogRun, since time.Time, n int, ok bool, d time.Duration) bool {
	timeout := time.After(d)
	for n > 0 {
		select {
		case r := <-runs:
			if r.began.After(since) && (!ok || r.err == nil) {
				n--
			}
		case <-timeout:
			return false
		}
	}
	return true
}

// TestClusterReplicaAck is the Sentinel test's proof on a Cluster with a
// replica per master: the script and WAIT go to the master that owns the
// lock's slot. With that master's replica stalled (SIGSTOP), an
// acknowledged acquisition fails cleanly and unacknowledged ones succeed on
// the master alone; the master is killed and its replica promoted by the
// Cluster: acknowledged locks survive, unacknowledged ones are lost
// (counted), and a holder whose watchdog runs is told.
func TestClusterReplicaAck(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster with replicas")
	}
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	cc, master, replica, names := clusterSlotMaster(t, ctx, began)
	const n = 10
	ackedNames, plainNames := names("acked-", n), names("plain-", n)

	acked := newClient(t, cc, dlock.LeaseTTL(5*time.Minute), dlock.WithAutoExtend(false), dlock.WithReplicaAck(1, 2*time.Second))
	plain := newClient(t, cc, dlock.LeaseTTL(5*time.Minute), dlock.WithAutoExtend(false))
	for _, name := range ackedNames {
		if _, err := acked.TryAcquire(ctx, name); err != nil {
			t.Fatalf("acked TryAcquire %s = %v", name, err)
		}
	}

	// Replication stalls: the replica is stopped, and the master drops its
	// link (what it sends now would otherwise wait in the replica's socket
	// buffer and reach it when it resumes).
	replica.Pause()
	if _, err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	stall := names("during-stall-", 1)[0]
	_, err := acked.TryAcquire(ctx, stall)
	if !errors.Is(err, dlock.ErrReplicaAck) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("acked TryAcquire with the replica stalled = %v, want ErrReplicaAck and ErrNotAcquired", err)
	}
	// (The undo is retried in the background for up to 10s while the master refuses or drops it.)
	if !waitFor(10*time.Second, func() bool { return !exists(ctx, master, "dlock:{"+stall+"}") }) {
		v, _ := master.Do(ctx, "GET", "dlock:{"+stall+"}")
		k, _ := master.Do(ctx, "KEYS", "dlock:{"+stall+"}*")
		t.Errorf("an unacknowledged acquisition left its key on the master: %v %v", v, k)
	}
	for _, name := range plainNames {
		if _, err := plain.TryAcquire(ctx, name); err != nil {
			t.Fatalf("plain TryAcquire %s = %v", name, err)
		}
	}
	watched, err := newClient(t, cc, dlock.LeaseTTL(10*time.Second)).TryAcquire(ctx, names("watched-", 1)[0])
	if err != nil {
		t.Fatalf("watched TryAcquire = %v", err)
	}
	defer watched.Release(ctx)

	killAndPromote(t, ctx, cc, master, replica, "dlock:{"+ackedNames[0]+"}")
	other := newClient(t, cc, dlock.WithAutoExtend(false))
	lostAcked, secondHolders := takenAfterClusterFailover(t, ctx, other, ackedNames, plainNames)
	if lostAcked != 0 {
		t.Errorf("%d of %d acknowledged locks were lost in the failover, want 0", lostAcked, n)
	}
	if secondHolders == 0 {
		t.Errorf("no unacknowledged lock was lost, though replication was stalled: the test did not exercise the window")
	}
	toldOfFailoverLoss(t, watched)
	t.Logf("%v since the start", time.Since(began).Round(time.Millisecond))
	t.Logf("Cluster failover with replication stalled: %d of %d unacknowledged locks got a second holder; %d of %d acknowledged ones", secondHolders, n, lostAcked, n)
}

// clusterSlotMaster starts a Cluster of 3 masters with a replica each and
// picks the master that owns "acked-0"'s slot, its replica, and names,
// which lists n names of a prefix whose slots that master owns.
func clusterSlotMaster(t *testing.T, ctx context.Context, began time.Time) (cc *redis.ClusterClient, master, replica *redistest.Server, names func(prefix string, n int) []string) {
	t.Helper()
	nodes := redistest.StartCluster(t, 3, 1)
	t.Logf("cluster of 3 masters and 3 replicas up in %v", time.Since(began).Round(time.Millisecond))
	byAddr := map[string]*redistest.Server{}
	var addrs []string
	for _, n := range nodes {
		byAddr[n.Addr()] = n
		addrs = append(addrs, n.Addr())
	}
	cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })

	// Every lock of the test on one master: names whose slot it owns.
	masterOf := func(name string) string {
		m, err := cc.MasterForKey(ctx, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	target := masterOf("acked-0")
	master = byAddr[target]
	for _, n := range nodes {
		if info(ctx, n, "replication", "master_port") == strconv.Itoa(master.Port()) {
			replica = n
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s", target)
	}
	names = func(prefix string, n int) []string {
		var out []string
		for i := 0; len(out) < n && i < 100000; i++ {
			if name := fmt.Sprint(prefix, i); masterOf(name) == target {
				out = append(out, name)
			}
		}
		return out
	}
	return cc, master, replica, names
}

// killAndPromote kills master and resumes its stalled replica, which the
// Cluster promotes, and waits until cc's slot map names the new master for
// key.
func killAndPromote(t *testing.T, ctx context.Context, cc *redis.ClusterClient, master, replica *redistest.Server, key string) {
	t.Helper()
	killed := time.Now()
	master.Kill()
	replica.Resume()
	if !waitFor(60*time.Second, func() bool { return info(ctx, replica, "replication", "role") == "master" }) {
		t.Fatal("the replica was not promoted within 60s")
	}
	t.Logf("replica promoted %v after the master was killed", time.Since(killed).Round(time.Millisecond))
	// The Cluster client learns the new slot map (go-redis reloads it when
	// told to, and a reload may ask a node that is gone: try again).
	if !waitFor(30*time.Second, func() bool {
		cc.ReloadState(ctx)
		m, err := cc.MasterForKey(ctx, key)
		return err == nil && m.Options().Addr != master.Addr()
	}) {
		t.Fatal("the Cluster client's slot map still names the dead master after 30s")
	}
}

// takenAfterClusterFailover counts the acked and plain names other could
// take after the failover (retrying an acked name until the client's slot
// map names the new master).
func takenAfterClusterFailover(t *testing.T, ctx context.Context, other *dlock.Client, ackedNames, plainNames []string) (lostAcked, secondHolders int) {
	t.Helper()
	for _, name := range ackedNames {
		var err error
		if !waitFor(20*time.Second, func() bool { // until the client's slot map names the new master
			_, err = other.TryAcquire(ctx, name)
			return err == nil || errors.Is(err, dlock.ErrNotAcquired)
		}) {
			t.Logf("TryAcquire(%s) still failing after 20s: %v", name, err)
		}
		if err == nil {
			lostAcked++
		}
	}
	for _, name := range plainNames {
		if _, err := other.TryAcquire(ctx, name); err == nil {
			secondHolders++
		}
	}
	return lostAcked, secondHolders
}

// Names with braces keep every key of a lock in one Cluster slot (a name
// that begins with "}" is refused, see TestInvalidInput): acquire, fence and
// release work for each, in both waiting modes.
func TestClusterNamesWithBraces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Cluster")
	}
	_, cc := startCluster(t)
	ctx := t.Context()
	for _, fair := range []bool{false, true} {
		c := newClient(t, cc, waiting(fair))
		for _, name := range []string{"{", "{}", "a}b", "{x}", "a{b}c", "x}"} {
			l, err := c.TryAcquire(ctx, name)
			if err != nil {
				t.Errorf("fair=%v %q: TryAcquire = %v", fair, name, err)
				continue
			}
			if _, err := l.Fence(ctx); err != nil {
				t.Errorf("fair=%v %q: Fence = %v", fair, name, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("fair=%v %q: Release = %v", fair, name, err)
			}
		}
		if _, err := c.TryAcquire(ctx, "}x"); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("fair=%v: TryAcquire(\"}x\") = %v, want ErrInvalid", fair, err)
		}
	}
}
