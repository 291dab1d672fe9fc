package backend

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// waitFor polls ok every few milliseconds for up to 10s and reports
// whether it came true.
func waitFor(ok func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return ok()
}

// loadInFlight reports whether a load of n's one server is claimed.
func loadInFlight(n Node) bool { return n.caches.loading.Load() != nil }

// knownLoaded is the set of scripts n knows its one server loaded.
func knownLoaded(n Node) scriptSet { return scriptSet(n.caches.loaded.Load()) }

// prepareAll runs k Prepares of c on n at once and returns their errors.
func prepareAll(ctx context.Context, n Node, c *Claim, k int) []error {
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = n.Prepare(ctx, c) })
	}
	wg.Wait()
	return errs
}

// noLoadClient returns a client of s as a user that may run scripts but
// not load them (an ACL with -script|load).
func noLoadClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	if err := s.Client(t).Do(t.Context(), "ACL", "SETUSER", "noload", "on", ">pw", "~*", "&*", "+@all", "-script|load").Err(); err != nil {
		t.Fatal(err)
	}
	opt := s.Options()
	opt.Username, opt.Password = "noload", "pw"
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// refusingDialer dials addr, or, while refuse is set, fails as a dial
// that could not connect (a load that never leaves the client).
func refusingDialer(addr string, refuse *atomic.Bool) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		if refuse.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused by the test")}
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// Many goroutines preparing the same kind of lease on a new server load its
// scripts once between them: one claims the load, the others wait for it,
// and all return once the scripts are in the cache.
func TestConcurrentPreparesLoadEachScriptOnce(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	p.Delay(0, 50*time.Millisecond) // (the load is in flight while the others arrive)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second})
	c := &Claim{Keys: KeysFor("dlock:", "prepared"), Kind: FairLock}
	ctx := t.Context()
	errs := prepareAll(ctx, n, c, 32)
	for i, err := range errs {
		if err != nil {
			t.Errorf("Prepare %d = %v, want nil", i, err)
		}
	}
	if !n.prepared(ctx, c) {
		t.Errorf("scripts known loaded = %b after the Prepares, want %b", knownLoaded(n), n.need(c))
	}
	if loadInFlight(n) {
		t.Error("a load is still marked in flight after every Prepare returned")
	}
	if got, want := commandCalls(t, direct, "script|load"), fmt.Sprint(bits.OnesCount64(uint64(n.need(c)))); got != want {
		t.Errorf("SCRIPT LOAD ran %s times, want %s: one load of each script", got, want)
	}
}

// A Prepare that waits for another's load leaves when its own context ends,
// while that load is stalled; the others wait for the load, which its
// claimer's cancelled context does not end early, and return when it ends;
// the next Prepare finds the load over and the scripts loaded.
func TestPrepareWaitersLeaveAtTheirContextAndOutliveTheClaimers(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second})
	c := &Claim{Keys: KeysFor("dlock:", "stalled"), Kind: PlainLock}
	ctx := t.Context()
	p.Stall()
	claimCtx, cancelClaim := context.WithCancel(ctx)
	defer cancelClaim()
	claimed := make(chan error, 1)
	go func() { claimed <- n.Prepare(claimCtx, c) }()
	if !waitFor(func() bool { return loadInFlight(n) }) {
		t.Fatal("no load was claimed")
	}
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- n.Prepare(leaving, c) }()
	waited := make(chan error, 4)
	for range cap(waited) {
		go func() { waited <- n.Prepare(ctx, c) }()
	}
	leave()
	select {
	case err := <-left:
		if err != nil {
			t.Errorf("a waiter whose context ended: Prepare = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter whose context ended did not leave while the load was stalled")
	}
	if !loadInFlight(n) {
		t.Fatal("the stalled load ended before the proxy let it go")
	}
	cancelClaim()
	p.Cut() // (the stalled load's reply is lost; go-redis sends a SCRIPT LOAD again)
	for range cap(waited) {
		select {
		case err := <-waited:
			if err != nil {
				t.Errorf("a waiter: Prepare = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter did not return once the load ended")
		}
	}
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		t.Fatal("the claimer did not return once its connection was cut")
	}
	if err := n.Prepare(ctx, c); err != nil {
		t.Fatalf("Prepare after the load ended = %v", err)
	}
	if !n.prepared(ctx, c) || loadInFlight(n) {
		t.Errorf("after the load: scripts known loaded %b (want %b), load in flight %v", knownLoaded(n), n.need(c), loadInFlight(n))
	}
}

// A load that never left the client (no connection could be made) is
// reported by the Prepare that claimed it, leaves no load marked in flight
// for the others to wait on, and is tried again by the next Prepare.
func TestPrepareAfterALoadThatNeverLeftLoadsAgain(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	var refuse atomic.Bool
	refuse.Store(true)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: refusingDialer(s.Addr(), &refuse), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second})
	c := &Claim{Keys: KeysFor("dlock:", "unreached"), Kind: ReentrantLock}
	ctx := t.Context()
	errs := prepareAll(ctx, n, c, 16)
	reported := 0
	for i, err := range errs {
		switch {
		case neverSent(err):
			reported++
		case err != nil:
			t.Errorf("Prepare %d = %v, want nil or the failed dial", i, err)
		}
	}
	if reported == 0 {
		t.Error("no Prepare reported the load that never left the client")
	}
	if loadInFlight(n) || knownLoaded(n) != 0 {
		t.Fatalf("after failed loads: load in flight %v, scripts known loaded %b; want none", loadInFlight(n), knownLoaded(n))
	}
	refuse.Store(false)
	var err error
	if !waitFor(func() bool { err = n.Prepare(ctx, c); return err == nil }) { // (go-redis may answer its last dial error for a while)
		t.Fatalf("Prepare once the server can be reached = %v", err)
	}
	if !n.prepared(ctx, c) {
		t.Errorf("scripts known loaded = %b, want %b", knownLoaded(n), n.need(c))
	}
	if got, want := commandCalls(t, direct, "script|load"), fmt.Sprint(bits.OnesCount64(uint64(n.need(c)))); got != want {
		t.Errorf("SCRIPT LOAD ran %s times, want %s", got, want)
	}
}

// A load on several masters records only the scripts that every master
// loaded; a master that refuses SCRIPT LOAD marks the deployment refused,
// and one that cannot be reached leaves the scripts unrecorded without an
// error while another was reached; only when none could be, the load
// reports it.
func TestLoadOnSeveralMastersRecordsWhatEveryOneLoaded(t *testing.T) {
	t.Parallel()
	a, b := redistest.Start(t, redistest.TCP()), redistest.Start(t)
	noload := noLoadClient(t, b)
	ctx := t.Context()
	var refuse atomic.Bool
	refuse.Store(true)
	unreached := redis.NewClient(&redis.Options{Addr: a.Addr(), Dialer: refusingDialer(a.Addr(), &refuse), MaxRetries: -1})
	t.Cleanup(func() { unreached.Close() })
	conn := func(rdb *redis.Client) driver.Conn { return goredisdriver.Loader(rdb) }
	set := setOf(script.Inspect, script.Fence, script.Announce) // (not adjacent in loadable)
	for _, tc := range []struct {
		name                     string
		masters                  []driver.Conn
		set, loaded              scriptSet
		reached, refused, unsent bool
	}{
		{"all load", []driver.Conn{conn(a.Client(t)), conn(b.Client(t))}, set, set, true, false, false},
		{"one refuses", []driver.Conn{conn(a.Client(t)), conn(noload)}, set, 0, true, true, false},
		{"one unreached", []driver.Conn{conn(unreached), conn(a.Client(t))}, set, 0, true, false, false},
		{"none reached", []driver.Conn{conn(unreached), conn(unreached)}, set, 0, false, false, true},
		{"one script", []driver.Conn{conn(a.Client(t)), conn(noload)}, setOf(script.Fence), 0, true, true, false}, // (sent alone, not pipelined)
	} {
		var s serverCache
		err := s.loadOn(ctx, tc.masters, tc.set)
		if neverSent(err) != tc.unsent || err != nil && !tc.unsent {
			t.Errorf("%s: loadOn = %v, want a failed dial: %v", tc.name, err, tc.unsent)
		}
		if got := scriptSet(s.loaded.Load()); got != tc.loaded {
			t.Errorf("%s: scripts known loaded = %b, want %b", tc.name, got, tc.loaded)
		}
		if s.reached.Load() != tc.reached || s.refused.Load() != tc.refused {
			t.Errorf("%s: reached %v, refused %v; want %v, %v", tc.name, s.reached.Load(), s.refused.Load(), tc.reached, tc.refused)
		}
	}
}

// replyErr is an error reply of a server.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// The replies of a load pair off with the scripts of its set in loadable's
// order, lowest bit first; replies missing at the end leave their scripts
// unloaded, and an error reply that is not a passing state marks the
// server refused.
func TestLoadRepliesPairWithTheScriptsInLoadablesOrder(t *testing.T) {
	t.Parallel()
	set := setOf(script.Inspect, script.Fence, script.Announce)
	for _, tc := range []struct {
		name    string
		replies []driver.Result
		loaded  scriptSet
		refused bool
	}{
		{"all", []driver.Result{{}, {}, {}}, set, false},
		{"second refused", []driver.Result{{}, {Err: replyErr("NOPERM no permission")}, {}}, setOf(script.Inspect, script.Announce), true},
		{"first lost", []driver.Result{{Err: net.ErrClosed}, {}, {}}, setOf(script.Fence, script.Announce), false},
		{"last missing", []driver.Result{{}, {}}, setOf(script.Inspect, script.Fence), false},
		{"busy", []driver.Result{{Err: replyErr("BUSY a script runs")}, {}, {}}, setOf(script.Fence, script.Announce), false},
	} {
		var s serverCache
		if got := s.outcome(set, tc.replies); got != tc.loaded || s.refused.Load() != tc.refused {
			t.Errorf("%s: outcome = %b, refused %v; want %b, %v", tc.name, got, s.refused.Load(), tc.loaded, tc.refused)
		}
	}
}

// Seq of a lease without a marker (none written, or expired) is 0, and
// the Lock still drives it; a resumed lease's marker names its sequence and
// the Lock that drives it.
func TestSeqReadsAMissingMarkerAsZeroAndDriven(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	n := NewNode(rdb, Config{TTL: time.Second})
	ctx := t.Context()
	c := &Claim{Keys: KeysFor("dlock:", "seq"), Kind: PlainLock}
	if seq, drives, err := n.Seq(ctx, c); seq != 0 || !drives || err != nil {
		t.Errorf("Seq without a marker = %d, %v, %v; want 0, true, nil", seq, drives, err)
	}
	if err := rdb.Set(ctx, c.Rev, "e7.other", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if seq, drives, err := n.Seq(ctx, c); seq != 7 || drives || err != nil {
		t.Errorf("Seq of a lease another Lock resumed = %d, %v, %v; want 7, false, nil", seq, drives, err)
	}
	if err := rdb.Del(ctx, c.Rev).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, c.Rev, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Seq(ctx, c); !errors.Is(err, ErrWrongType) {
		t.Errorf("Seq of a marker key holding a hash = %v, want ErrWrongType", err)
	}
}

// lacks returns the scripts of set that the server of m lacks, each
// named with its address.
func lacks(ctx context.Context, m *redis.Client, set scriptSet) []string {
	var lack []string
	for i, sc := range loadable {
		if set&(1<<i) == 0 {
			continue
		}
		if ok, err := m.ScriptExists(ctx, sc.Hash()).Result(); err != nil || !ok[0] {
			lack = append(lack, m.Options().Addr+" "+sc.Name())
		}
	}
	return lack
}

// After SCRIPT FLUSH on every master of a Cluster, a call meets NOSCRIPT and
// the next Prepare finds every script it needs: on go-redis, the call
// loads them back on its key's master, whose cache alone records them; a
// driver's call goes with EVAL and forgets its one cache, so that the next
// Prepare loads them on every master again.
func TestClusterScriptsFoundAgainAfterScriptFlush(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3, 0)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	ctx := t.Context()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	c := &Claim{Keys: KeysFor("dlock:", "flushed"), Kind: FairLock}
	// missing returns the scripts of set that the masters lack.
	missing := func(set scriptSet) []string {
		var mu sync.Mutex
		var lack []string
		cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			l := lacks(ctx, m, set)
			mu.Lock()
			defer mu.Unlock()
			lack = append(lack, l...)
			return nil
		})
		return lack
	}
	flush := func() {
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
	}
	for _, road := range []string{"go-redis", "driver"} {
		n := NewNode(cc, Config{TTL: time.Second, Sharded: true})
		if road == "driver" {
			n = NewNodeFrom(goredisdriver.Conn(cc), Config{TTL: time.Second, Sharded: true})
		}
		flush()
		if err := n.Prepare(ctx, c); err != nil {
			t.Fatalf("%s: Prepare = %v", road, err)
		}
		flush()
		if _, err := n.run(ctx, script.Uptime, []any{c.Lock}); err != nil {
			t.Fatalf("%s: a call after SCRIPT FLUSH = %v", road, err)
		}
		if road == "driver" {
			if got := knownLoaded(n); got != 0 {
				t.Errorf("driver: scripts known loaded after a NOSCRIPT = %b, want none", got)
			}
			if err := n.Prepare(ctx, c); err != nil {
				t.Fatalf("driver: Prepare after the NOSCRIPT = %v", err)
			}
			if lack := missing(n.need(c)); len(lack) > 0 {
				t.Errorf("driver: after the next Prepare, masters lack %v", lack)
			}
			continue
		}
		s, _, err := n.server(ctx, c.Lock)
		if err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, c.Lock)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := scriptSet(s.loaded.Load()), n.need(c)|setOf(script.Uptime); got != want || knownLoaded(n) != 0 {
			t.Errorf("go-redis: the key's master's cache knows %b loaded, want %b; the Node's own %b, want none", got, want, knownLoaded(n))
		}
		if lack := lacks(ctx, m, n.need(c)); len(lack) > 0 {
			t.Errorf("go-redis: after the call that met NOSCRIPT, the key's master lacks %v", lack)
		}
		if !n.prepared(ctx, c) {
			t.Error("go-redis: Prepare has work left after the call loaded the scripts back")
		}
	}
}

// Prepare on a closed client returns nil (the call that follows reports
// the closed client) and leaves no load in flight nor any script recorded.
func TestPrepareOnAClosedClientLeavesNothingInFlight(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := redis.NewClient(s.Options())
	rdb.Close()
	n := NewNode(rdb, Config{TTL: time.Second})
	c := &Claim{Keys: KeysFor("dlock:", "closed"), Kind: PlainLock}
	for _, err := range prepareAll(t.Context(), n, c, 4) {
		if err != nil {
			t.Errorf("Prepare on a closed client = %v, want nil", err)
		}
	}
	if loadInFlight(n) || knownLoaded(n) != 0 {
		t.Errorf("on a closed client: load in flight %v, scripts known loaded %b; want none", loadInFlight(n), knownLoaded(n))
	}
	if _, err := n.run(t.Context(), script.Uptime, []any{c.Lock}); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("a call on the closed client = %v, want redis.ErrClosed", err)
	}
}

// On go-redis's Cluster, a Prepare that finds its key's master's scripts
// loaded (every acquisition's and extension's) allocates nothing: the
// master's Conn to load on is made only for a load.
//
// Serial: it counts the process's allocations.
func TestPrepareOnAClusterWithItsScriptsLoadedAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3, 0)
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	ctx := t.Context()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	n := NewNode(cc, Config{TTL: time.Second, Sharded: true})
	c := &Claim{Keys: KeysFor("dlock:", "loaded"), Kind: PlainLock}
	if err := n.Prepare(ctx, c); err != nil || !n.prepared(ctx, c) {
		t.Fatalf("Prepare = %v, prepared %v; want the scripts loaded", err, n.prepared(ctx, c))
	}
	if a := testing.AllocsPerRun(100, func() { n.Prepare(ctx, c) }); a != 0 {
		t.Errorf("a Prepare with the scripts loaded makes %v allocations, want none", a)
	}
}

// A Prepare whose lone SCRIPT LOAD (a Node's first, of the script its
// acquisition runs) is lost with its connection sends it again, as go-redis
// does a load when its retries are on, though the Node's other commands go
// once: the scripts are loaded, each delivered once.
func TestPrepareSendsALoneScriptLoadAgainAfterALostRequest(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	loser := redistest.NewLoser("script", "load")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: loser.Dial, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second})
	c := &Claim{Keys: KeysFor("dlock:", "lost-load"), Kind: FairLock}
	loser.Arm()
	err := n.Prepare(t.Context(), c)
	if lost := loser.Lost(); err != nil || lost != 1 || !n.prepared(t.Context(), c) {
		t.Fatalf("Prepare = %v after %d lost requests, prepared %v; want the scripts loaded after one", err, lost, n.prepared(t.Context(), c))
	}
	if got, want := commandCalls(t, direct, "script|load"), fmt.Sprint(bits.OnesCount64(uint64(n.need(c)))); got != want {
		t.Errorf("the server ran SCRIPT LOAD %s times, want %s: each script once", got, want)
	}
}
