package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// WatchLoss: a holder told of a loss as soon as a message says its lease
// may have ended, instead of at its next extension (TTL/3 later). The
// leases here last 30s, so the old path would tell the loss after 10s; the
// bound asserted, a few seconds, is loose enough never to flake and fails
// without the option.

// lossTTL is the lease time of the tests: their old path is TTL/3, 10s.
const lossTTL = 30 * time.Second

// toldWithin is how long a watched loss may take to be told here.
const toldWithin = 4 * time.Second

// subscribed waits until the server counts a subscriber on each channel.
func subscribed(t *testing.T, rdb *redis.Client, channels ...string) {
	t.Helper()
	for _, ch := range channels {
		ok := waitFor(5*time.Second, func() bool {
			n, err := rdb.PubSubNumSub(context.Background(), ch).Result()
			return err == nil && n[ch] > 0
		})
		if !ok {
			t.Fatalf("PUBSUB NUMSUB %s: no subscriber after 5s", ch)
		}
	}
}

// keyspace returns the channel of key's keyspace notifications in db 0.
func keyspace(key string) string { return "__keyspace@0__:" + key }

// expectLossTold checks that l is lost, its loss told within toldWithin
// of since, and logs how long it took.
func expectLossTold(t *testing.T, l *dlock.Lock, since time.Time, what string) {
	t.Helper()
	if !closedWithin(l.Done(), toldWithin-time.Since(since)) {
		t.Fatalf("after %s: Done() still open after %v (the next extension is %v away)", what, toldWithin, lossTTL/3)
	}
	t.Logf("%s: loss told after %v (without WatchLoss: up to %v)", what, time.Since(since).Round(time.Millisecond), lossTTL/3)
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("after %s: Err() = %v, want ErrNotHeld", what, err)
	}
}

func TestWatchLossTellsAForeignDeleteAtOnce(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KEA")).Client(t)
	for _, fair := range []bool{true, false} {
		c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true), waiting(fair))
		t.Cleanup(func() { c.Close(context.Background()) })
		deleteTold(t, c, rdb, fmt.Sprintf("deleted-fair-%v", fair), 0) // (a lingering subscription of another's must not count)
	}
}

// deleteTold holds name with c, deletes its key through rdb (in database
// db) once watched, and expects the loss told at once.
func deleteTold(t *testing.T, c *dlock.Client, rdb *redis.Client, name string, db int) {
	t.Helper()
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%s) = %v, want nil", name, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	subscribed(t, rdb, fmt.Sprintf("__keyspace@%d__:%s", db, l.Key()))
	start := time.Now()
	rdb.Del(ctx, l.Key())
	expectLossTold(t, l, start, fmt.Sprintf("DEL in db %d", db))
}

func TestWatchLossTellsAnOverwriteAtOnce(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "K$g")).Client(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer c.Close(ctx)
	l, err := c.TryAcquire(ctx, "overwritten")
	if err != nil {
		t.Fatalf("TryAcquire(overwritten) = %v, want nil", err)
	}
	defer l.Release(ctx)
	subscribed(t, rdb, keyspace(l.Key()))
	start := time.Now()
	rdb.Set(ctx, l.Key(), "someone else", time.Minute)
	expectLossTold(t, l, start, "SET")
}

func TestWatchLossTellsAForceReleaseAtOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t) // keyspace notifications off: the release's own message
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer c.Close(ctx)
	sem, err := c.Semaphore("forced-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, acquire := range []func() (*dlock.Lock, error){
		func() (*dlock.Lock, error) { return c.TryAcquire(ctx, "forced") },
		func() (*dlock.Lock, error) { return sem.TryAcquire(ctx) },
	} {
		l, err := acquire()
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		subscribed(t, rdb, l.Key()+":ch")
		start := time.Now()
		if ok, err := c.ForceRelease(ctx, l.Name()); !ok || err != nil {
			t.Fatalf("ForceRelease(%s) = %v, %v, want true, nil", l.Name(), ok, err)
		}
		expectLossTold(t, l, start, "ForceRelease of "+l.Name())
		l.Release(ctx)
	}
}

func TestWatchLossChecksAtOnceWhenTheServerIsBack(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer c.Close(ctx)
	l, err := c.TryAcquire(ctx, "restarted")
	if err != nil {
		t.Fatalf("TryAcquire(restarted) = %v, want nil", err)
	}
	defer l.Release(ctx)
	subscribed(t, rdb, l.Key()+":ch")
	start := time.Now()
	s.Restart() // empty: the lease is gone, and nobody announced it
	expectLossTold(t, l, start, "a restart")
}

// Without keyspace notifications a DEL is not announced: the loss is told
// at the next extension, as without the option, and a lease nobody
// touched is not told lost by the messages of its channel.
func TestWatchLossWithoutKeyspaceEventsTellsADeleteAtTheNextExtension(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const ttl = 3 * time.Second
	c := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WatchLoss(true))
	defer c.Close(ctx)
	deleted, err := c.TryAcquire(ctx, "unannounced")
	if err != nil {
		t.Fatal(err)
	}
	defer deleted.Release(ctx)
	kept, err := c.TryAcquire(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release(ctx)
	subscribed(t, rdb, deleted.Key()+":ch", kept.Key()+":ch")
	rdb.Del(ctx, deleted.Key())
	for range 200 { // messages that are no loss: a release, a handover to someone else
		rdb.Publish(ctx, kept.Key()+":ch", "*")
		rdb.Publish(ctx, kept.Key()+":ch", "AAAAAAAAAAAAAAAAAAAAAA 7")
	}
	if !closedWithin(deleted.Done(), ttl) {
		t.Fatalf("DEL without keyspace events: Done() still open after the lease time %v", ttl)
	}
	if err := deleted.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("DEL without keyspace events: Err() = %v, want ErrNotHeld", err)
	}
	if err := kept.Err(); err != nil {
		t.Errorf("a lease nobody touched, after 400 messages on its channel: Err() = %v, want nil", err)
	}
}

// A busy semaphore's releases publish on the channel its holders watch;
// they make the holders check, at most once per TTL/30 each, and never
// tell a loss that did not happen.
func TestWatchLossBoundsTheChecksABusySemaphoreCauses(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KEA")).Client(t)
	ctx := t.Context()
	const ttl = 3 * time.Second
	var checks atomic.Int64
	count := autoExtensions(&checks)
	watched := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WatchLoss(true), dlock.WithObserver(count))
	defer watched.Close(ctx)
	busy := newClient(t, rdb, dlock.LeaseTTL(ttl))
	defer busy.Close(ctx)
	const holders, permits = 3, 5
	sem, err := watched.Semaphore("busy", permits)
	if err != nil {
		t.Fatal(err)
	}
	var held []*dlock.Lock
	for range holders {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		defer l.Release(ctx)
		held = append(held, l)
	}
	subscribed(t, rdb, held[0].Key()+":ch", keyspace(held[0].Key()))
	other, err := busy.Semaphore("busy", permits)
	if err != nil {
		t.Fatal(err)
	}
	// Four workers on the two permits left: releases find waiters, and
	// announce themselves.
	const run = 2 * time.Second
	var wg sync.WaitGroup
	var cycles atomic.Int64
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			for i := 0; i < 10000 && time.Since(start) < run; i++ {
				wctx, cancel := context.WithTimeout(ctx, run)
				l, err := other.Acquire(wctx)
				cancel()
				if err != nil {
					continue
				}
				l.Release(ctx)
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i, l := range held {
		if err := l.Err(); err != nil {
			t.Errorf("holder %d after %d releases of others: Err() = %v, want nil", i, cycles.Load(), err)
		}
	}
	// Per holder: one check per TTL/30 at most, the regular ones (TTL/3),
	// and one of slack at each end.
	limit := int64(holders) * (int64(took/(ttl/30)) + int64(took/(ttl/3)) + 2)
	t.Logf("%d releases of others in %v: %d checks by %d holders (bound %d)", cycles.Load(), took.Round(time.Millisecond), checks.Load(), holders, limit)
	if n := checks.Load(); n > limit {
		t.Errorf("%d watchdog extensions by %d holders in %v, want at most %d", n, holders, took, limit)
	}
}

func TestWatchLossOffSubscribesNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL))
	defer c.Close(ctx)
	l, err := c.TryAcquire(ctx, "unwatched")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if n, err := rdb.PubSubNumSub(ctx, l.Key()+":ch").Result(); err != nil || n[l.Key()+":ch"] != 0 {
		t.Errorf("PUBSUB NUMSUB of a held lock's channel without WatchLoss = %v, %v, want 0", n, err)
	}
	// A per-call WatchLoss(false) lifts the Client's.
	w := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer w.Close(ctx)
	l2, err := w.TryAcquire(ctx, "unwatched-too", dlock.WatchLoss(false))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if n, err := rdb.PubSubNumSub(ctx, l2.Key()+":ch").Result(); err != nil || n[l2.Key()+":ch"] != 0 {
		t.Errorf("PUBSUB NUMSUB of a lock held with WatchLoss(false) = %v, %v, want 0", n, err)
	}
}

func TestWatchLossNeedsTheWatchdog(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	if _, err := dlock.New(rdb, dlock.WithAutoExtend(false), dlock.WatchLoss(true)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(WithAutoExtend(false), WatchLoss(true)) = %v, want ErrInvalid", err)
	}
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	defer c.Close(t.Context())
	if _, err := c.TryAcquire(t.Context(), "nodog", dlock.WatchLoss(true)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquire(WatchLoss(true)) without the watchdog = %v, want ErrInvalid", err)
	}
}

// Over a quorum each node's hub watches: a DEL on a majority's nodes is
// told at once, as is a ForceRelease.
func TestWatchLossOverAQuorum(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	var nodes []redis.UniversalClient
	var direct []*redis.Client
	for range 3 {
		rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KA")).Client(t)
		nodes, direct = append(nodes, rdb), append(direct, rdb)
	}
	ctx := t.Context()
	c := newRedlock(t, nodes, 200*time.Millisecond, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer c.Close(ctx)
	for _, end := range []string{"DEL", "ForceRelease"} {
		l, err := c.TryAcquire(ctx, "quorum-"+end)
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		defer l.Release(ctx)
		for _, rdb := range direct {
			subscribed(t, rdb, l.Key()+":ch", keyspace(l.Key()))
		}
		start := time.Now()
		if end == "DEL" {
			for _, rdb := range direct[:2] {
				rdb.Del(ctx, l.Key())
			}
		} else if ok, err := c.ForceRelease(ctx, l.Name()); !ok || err != nil {
			t.Fatalf("ForceRelease = %v, %v, want true, nil", ok, err)
		}
		expectLossTold(t, l, start, end+" over a quorum")
	}
}

func TestWatchedLocksCostNoGoroutines(t *testing.T) {
	// Serial: it counts every goroutine in the process.
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KA")).Client(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WatchLoss(true))
	defer c.Close(ctx)
	before := runtime.NumGoroutine()
	var held []*dlock.Lock
	for i := range 200 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("watched:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	subscribed(t, rdb, held[199].Key()+":ch", keyspace(held[199].Key()))
	if grew := runtime.NumGoroutine() - before; grew > 20 {
		t.Errorf("holding 200 watched locks added %d goroutines, want none per lock", grew)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// On a Cluster, watched leases share each shard's pub/sub connection, as
// on one server: holding many costs no connection (and no goroutines) per
// lease.
func TestWatchedLocksOnAClusterSharePubSubConnections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster")
	}
	t.Skip("fails: a sharded hub opens a connection, with its two goroutines, per channel, so per watched lease")
	leakcheck.Check(t)
	nodes, cc := startCluster(t)
	ctx := t.Context()
	c := newClient(t, cc, dlock.WatchLoss(true))
	defer c.Close(ctx)
	const n = 30
	for i := range n {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("watched:%d", i))
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		defer l.Release(ctx)
	}
	conns := func() int {
		total := 0
		for _, s := range nodes {
			v, err := s.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub")
			if err != nil {
				t.Fatalf("CLIENT LIST = %v", err)
			}
			total += strings.Count(fmt.Sprint(v), "id=")
		}
		return total
	}
	waitFor(5*time.Second, func() bool { return conns() >= n }) // (as many as it opens today: the wait ends once all are up)
	if got := conns(); got > len(nodes) {
		t.Errorf("%d watched leases on %d masters: %d pub/sub connections, want at most one per master", n, len(nodes), got)
	}
}

// A DEL is told at once in a database other than 0, and under a key prefix
// and a name with spaces and glob characters (the keyspace channel is
// subscribed by its name, not as a pattern).
func TestWatchLossTellsADeleteInAnotherDatabaseUnderAnOddName(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KEA"))
	opts := s.Options()
	opts.DB = 3
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true), dlock.WithPrefix("a b*[c]?:"))
	defer c.Close(context.Background())
	deleteTold(t, c, rdb, "odd * name?", 3)
}

// A reconnect of the hub makes every watched lease check at once: a
// thousand leases all still held, none put at risk, at most two extensions
// each (one per channel confirmed again, TTL/30 apart).
func TestWatchLossReconnectWithAThousandLeasesLosesNone(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KEA")).Client(t)
	ctx := t.Context()
	var lost, risk, extended atomic.Int32
	var started sync.Map // name → when its acquisition started
	o := dlock.Observer{
		Start: func(ctx context.Context, e *dlock.Event) context.Context {
			if e.Op == dlock.OpAcquire {
				started.Store(e.Name, time.Now())
			}
			return ctx
		},
		Lost:     func(context.Context, *dlock.Event) { lost.Add(1) },
		Jeopardy: func(context.Context, *dlock.Event) { risk.Add(1) },
		End: func(_ context.Context, e *dlock.Event) {
			if e.Op == dlock.OpExtend && e.Auto && e.Err == nil {
				extended.Add(1)
			}
		},
	}
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true), dlock.WithObserver(o))
	defer c.Close(ctx)
	const n = 1000
	held := holdWatched(t, c, rdb, "flood-", n)
	defer func() {
		for _, l := range held {
			l.Release(ctx)
		}
	}()
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub = %v", err)
	}
	if !waitFor(30*time.Second, func() bool { return extended.Load() >= n }) {
		t.Fatalf("after the hub's reconnect: %d of %d leases checked within 30s", extended.Load(), n)
	}
	if !waitFor(5*time.Second, func() bool { return rdb.PubSubNumSub(ctx, held[n-1].Key()+":ch").Val()[held[n-1].Key()+":ch"] > 0 }) {
		t.Fatal("the hub did not subscribe again")
	}
	for i, l := range held {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d after the reconnect: Err() = %v, want nil", i, err)
		}
	}
	if lost.Load() != 0 || risk.Load() != 0 {
		t.Errorf("after the reconnect: %d leases lost, %d put at risk, want none", lost.Load(), risk.Load())
	}
	// Each lease's two channels are confirmed again: a second check may
	// follow the first, TTL/30 (1s) later, and no more. Besides, the
	// watchdog extends a lease TTL/3 (10s) after its last extension: where
	// taking the leases and the checks took that long, those count too.
	waitFor(3*time.Second, func() bool { return extended.Load() > 2*n })
	e, regular := extended.Load(), 0
	for _, l := range held {
		at, _ := started.Load(l.Name())
		regular += int(time.Since(at.(time.Time)) / (lossTTL / 3))
	}
	if e > int32(2*n+regular) {
		t.Errorf("after the reconnect: %d extensions of %d leases, want at most two each and %d by the watchdog's schedule", e, n, regular)
	}
}

// Closing the Client while a reconnect's checks are under way leaves no
// goroutine behind and tells no lease lost (they end at their validity, put
// at risk by the Close).
func TestWatchLossCloseDuringTheChecksOfAReconnect(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KEA")).Client(t)
	ctx := t.Context()
	var lost atomic.Int32
	o := dlock.Observer{Lost: func(context.Context, *dlock.Event) { lost.Add(1) }}
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true), dlock.WithObserver(o))
	const n = 200
	held := holdWatched(t, c, rdb, "closing-", n)
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub = %v", err)
	}
	for range 100 { // the moment the hub reconnects: its checks begin
		if rdb.PubSubNumSub(ctx, held[n-1].Key()+":ch").Val()[held[n-1].Key()+":ch"] > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	for i, l := range held {
		if err := l.Err(); err != nil {
			t.Errorf("lease %d after Close: Err() = %v, want nil (valid until its deadline)", i, err)
			break
		}
	}
	for _, l := range held {
		l.Release(ctx)
	}
	if lost.Load() != 0 {
		t.Errorf("%d leases told lost, want none", lost.Load())
	}
}

// holdWatched holds n names that begin with prefix with c, and waits until
// the last one's channels are subscribed on rdb's server.
func holdWatched(t *testing.T, c *dlock.Client, rdb *redis.Client, prefix string, n int) []*dlock.Lock {
	t.Helper()
	held := make([]*dlock.Lock, 0, n)
	for i := range n {
		l, err := c.TryAcquire(t.Context(), fmt.Sprint(prefix, i))
		if err != nil {
			t.Fatalf("TryAcquire = %v, want nil", err)
		}
		held = append(held, l)
	}
	subscribed(t, rdb, held[n-1].Key()+":ch", keyspace(held[n-1].Key()))
	return held
}

// A lock taken again and again by one Client makes no extension: the
// keyspace events of its own acquisitions and releases (a SET, a DEL),
// which a subscription still lingering from the last lease hears, are not
// taken for another's.
func TestWatchLossHotLockMakesNoExtensionOfItsOwnEvents(t *testing.T) {
	t.Parallel()
	t.Skip("fails: the SET and DEL events of the Client's own acquisition and last release, heard on the lingering subscription, nudge the new lease: an extension every few acquisitions")
	leakcheck.Check(t)
	rdb := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KEA")).Client(t)
	ctx := t.Context()
	var extended atomic.Int64
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true), dlock.WithObserver(autoExtensions(&extended)))
	defer c.Close(ctx)
	for i := range 50 {
		l, err := c.TryAcquire(ctx, "hot")
		if err != nil {
			t.Fatalf("TryAcquire %d = %v, want nil", i, err)
		}
		if i == 0 {
			subscribed(t, rdb, keyspace(l.Key()))
		}
		time.Sleep(5 * time.Millisecond) // (the work under the lock: time for its events to come back)
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d = %v, want nil", i, err)
		}
	}
	if n := extended.Load(); n != 0 {
		t.Errorf("50 leases of 30s, each held 5ms, nobody else writing the key: %d extensions, want none", n)
	}
}

// autoExtensions returns an Observer that counts the watchdog's extensions
// in n.
func autoExtensions(n *atomic.Int64) dlock.Observer {
	return dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		if e.Op == dlock.OpExtend && e.Auto {
			n.Add(1)
		}
	}}
}
