package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// These tests hold dlock to one round trip per timed call (an acquire, an
// extension) from a Client's first call on: the scripts are in the
// server's cache before a timed call needs them, so none goes EVALSHA,
// NOSCRIPT, EVAL. With 80ms each way, a second round trip costs 160ms: a
// 300ms lease would be refused as too slow, and a 600ms lease lost at its
// first extension. The server's counters (INFO commandstats, errorstats)
// show what was sent.

// oneWay is the latency the proxy adds in each direction.
const oneWay = 80 * time.Millisecond

// serverStat returns the counter field ("calls", "count") of the line
// name ("cmdstat_eval", "errorstat_NOSCRIPT") in the INFO section of rdb;
// 0 if there is none.
func serverStat(t *testing.T, ctx context.Context, rdb redis.Cmdable, section, name, field string) int {
	t.Helper()
	v, err := rdb.Info(ctx, section).Result()
	if err != nil {
		t.Fatalf("INFO %s = %v", section, err)
	}
	for _, line := range strings.Split(v, "\r\n") {
		rest, ok := strings.CutPrefix(line, name+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok && k == field {
				n, _ := strconv.Atoi(val)
				return n
			}
		}
	}
	return 0
}

// scriptMisses returns how many EVALs and NOSCRIPT replies rdb's server
// counted: each is a timed call that took a second round trip.
func scriptMisses(t *testing.T, ctx context.Context, rdb redis.Cmdable) (evals, noscripts int) {
	t.Helper()
	return serverStat(t, ctx, rdb, "commandstats", "cmdstat_eval", "calls"),
		serverStat(t, ctx, rdb, "errorstats", "errorstat_NOSCRIPT", "count")
}

// slowServer starts a server that a client reaches through a proxy adding
// oneWay each way; it returns the server, a direct client and a client of
// the proxy (no connection made yet).
func slowServer(t *testing.T, opts ...redistest.Option) (*redistest.Server, *redis.Client, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, append([]redistest.Option{redistest.TCP()}, opts...)...)
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	p.Delay(oneWay, oneWay)
	slow := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { slow.Close() })
	return s, direct, slow
}

// lockKind is one kind of lease a Client takes: a lock, a permit, a read
// or write hold, a leadership.
type lockKind struct {
	name string
	opts []dlock.Option
	// take makes one attempt (try) or waits (!try) for the name with c.
	take func(t *testing.T, ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error)
}

func takeLock(_ *testing.T, ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
	if try {
		return c.TryAcquire(ctx, name, opts...)
	}
	return c.Acquire(ctx, name, opts...)
}

var lockKinds = []lockKind{
	{"fair", nil, takeLock},
	{"fair-unpipelined", []dlock.Option{pipelined(false)}, takeLock},
	{"unfair", []dlock.Option{dlock.WithUnfair(nil)}, takeLock},
	{"unfair-unpipelined", []dlock.Option{dlock.WithUnfair(nil), pipelined(false)}, takeLock},
	{"reentrant", []dlock.Option{dlock.WithReentrant(true)}, takeLock},
	{"semaphore", nil, func(t *testing.T, ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		s := newSemaphore(t, c, name, 2)
		if try {
			return s.TryAcquire(ctx, opts...)
		}
		return s.Acquire(ctx, opts...)
	}},
	{"read", nil, func(t *testing.T, ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		if try {
			return newRW(t, c, name).Reader().TryAcquire(ctx, opts...)
		}
		return newRW(t, c, name).Reader().Acquire(ctx, opts...)
	}},
	{"write", []dlock.Option{pipelined(false)}, func(t *testing.T, ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		if try {
			return newRW(t, c, name).Writer().TryAcquire(ctx, opts...)
		}
		return newRW(t, c, name).Writer().Acquire(ctx, opts...)
	}},
	{"election", nil, func(t *testing.T, ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
		e, err := c.Election(name)
		if err != nil {
			t.Fatal(err)
		}
		if try {
			opts = append(opts, dlock.MaxWait(0))
		}
		ld, err := e.Campaign(ctx, "candidate", opts...)
		if err != nil {
			return nil, err
		}
		return ld.Lock(), nil
	}},
}

// shortLeases checks, with a Client c that has sent nothing yet over a
// link of oneWay each way, that its first attempt at a 300ms lease is
// granted (one round trip, not two), and that a 600ms lease outlives its
// first extensions. It releases what it took. A failure that time alone
// explains (see late) it returns instead of reporting: two round trips
// fail so on every try (4*oneWay = 320ms: past the 300ms lease; and a
// 600ms lease extended every 200ms, each answered 320ms after it was
// sent, runs out before its second extension is answered), one only when
// this machine delays it by more than the rest of the lease.
func shortLeases(t *testing.T, ctx context.Context, c *dlock.Client, k lockKind, name string, first ...dlock.LockOption) error {
	t.Helper()
	start := time.Now()
	l, err := k.take(t, ctx, c, name, true, first...)
	if late(err, nil) {
		return fmt.Errorf("first TryAcquire = %w (after %v; a round trip is %v)", err, time.Since(start), 2*oneWay)
	} else if err != nil {
		t.Fatalf("%s: first TryAcquire = %v (after %v), want the lock: a timed call of one round trip (%v)", k.name, err, time.Since(start), 2*oneWay)
	}
	if err := l.Release(ctx); late(err, l) {
		return fmt.Errorf("Release = %w", err)
	} else if err != nil {
		t.Fatalf("%s: Release = %v", k.name, err)
	}
	l, err = k.take(t, ctx, c, name+"-600", false, dlock.LeaseTTL(600*time.Millisecond))
	if err != nil {
		t.Fatalf("%s: Acquire of a 600ms lease = %v", k.name, err)
	}
	time.Sleep(time.Second) // the watchdog extends it every 200ms
	if err := l.Err(); late(err, l) {
		return fmt.Errorf("a 600ms lease after 1s of extensions: Err() = %w", err)
	} else if err != nil {
		t.Fatalf("%s: a 600ms lease after 1s of extensions: Err() = %v, want it held", k.name, err)
	}
	if err := l.Release(ctx); late(err, l) {
		return fmt.Errorf("Release of the 600ms lease = %w", err)
	} else if err != nil {
		t.Fatalf("%s: Release of the 600ms lease = %v", k.name, err)
	}
	return nil
}

// late reports whether err, of a call on the lease l (nil: of an attempt
// at one), failed for time alone: the attempt's reply came after the
// lease's validity had run out (the lease was given back), or the call
// found the lease gone and returned after l's validity had run out (Redis
// expires a lease after that: its validity counts from the request's send).
func late(err error, l *dlock.Lock) bool {
	if l == nil {
		return errors.Is(err, dlock.ErrNotAcquired) && strings.Contains(err.Error(), tooLate)
	}
	return errors.Is(err, dlock.ErrNotHeld) && !time.Now().Before(l.ValidUntil())
}

// inTime runs try(1), try(2), … until one returns nil, up to 10 times; a
// try returns what failed for time alone (see shortLeases), and fails t
// for anything else. (A machine busy enough to hold a round trip past a
// lease's spare time, 135ms for the first call, about 230ms for an
// extension, tends to stay so for a few tries in a row.)
func inTime(t *testing.T, what string, try func(n int) error) {
	t.Helper()
	for n := 1; ; n++ {
		err := try(n)
		if err == nil {
			return
		}
		if n == 10 {
			t.Fatalf("%s: %v; so in each of %d tries", what, err, n)
		}
		t.Logf("%s: %v: again", what, err)
	}
}

// firstTimedCalls runs shortLeases with a new Client of slow (opts, then
// k's) on a server whose script cache was emptied (as a new server's), and
// checks that the server ran no EVAL and answered no NOSCRIPT; again, with
// a new Client, after a try that failed for time alone (see inTime).
func firstTimedCalls(t *testing.T, ctx context.Context, direct, slow *redis.Client, k lockKind, prefix string, opts ...dlock.Option) {
	t.Helper()
	inTime(t, k.name, func(n int) error {
		direct.ScriptFlush(ctx)
		direct.ConfigResetStat(ctx)
		c := newClient(t, slow, slices.Concat([]dlock.Option{dlock.LeaseTTL(600 * time.Millisecond)}, opts, k.opts)...)
		failed := shortLeases(t, ctx, c, k, fmt.Sprint(prefix, k.name, "-", n), dlock.LeaseTTL(300*time.Millisecond))
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if evals, noscripts := scriptMisses(t, ctx, direct); evals != 0 || noscripts != 0 {
			t.Fatalf("%s: the server ran %d EVALs and answered %d NOSCRIPTs, want 0: every script was loaded before its first use", k.name, evals, noscripts)
		}
		return failed
	})
}

// A Client's first timed calls are one round trip: its scripts are loaded
// before the first is timed, in every kind of lease.
func TestFirstTimedCallIsOneRoundTrip(t *testing.T) {
	// Serial: it times round trips against short leases; a busy machine adds its own delays.
	leakcheck.Check(t)
	_, direct, slow := slowServer(t)
	ctx := t.Context()
	kinds := lockKinds
	if testing.Short() {
		kinds = []lockKind{lockKinds[0], lockKinds[4]} // a lock and a hold; every kind without -short
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { firstTimedCalls(t, ctx, direct, slow, k, "first-") })
	}
}

// With replica acknowledgement (a script and WAIT, pipelined on one
// connection) too.
func TestFirstTimedCallIsOneRoundTripWithReplicaAck(t *testing.T) {
	// Serial: it times round trips against short leases; a busy machine adds its own delays.
	long(t)
	leakcheck.Check(t)
	master, direct, slow := slowServer(t, redistest.Args("--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	ctx := t.Context()
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never acknowledged")
	}
	for _, k := range []lockKind{lockKinds[0], lockKinds[2], lockKinds[4], lockKinds[5], lockKinds[7]} {
		t.Run(k.name, func(t *testing.T) {
			firstTimedCalls(t, ctx, direct, slow, k, "acked-", dlock.WithReplicaAck(1, time.Second))
		})
	}
}

// Over a quorum, a node that takes two round trips misses the node
// timeout: the first acquire of a new Client must be one on every node.
// (The go-redis clients have been in use: they have a connection for single
// commands and one for pipelines. The node timeout here is shorter than a
// new connection's handshake, which the loading of the scripts, bounded by
// the node timeout too, would spend.) A round trip takes 300ms and the node
// timeout is 500ms: two miss it, and one has 200ms to spare on a loaded
// machine.
func TestFirstTimedCallIsOneRoundTripOverAQuorum(t *testing.T) {
	// Serial: it times round trips against short leases; a busy machine adds its own delays.
	long(t)
	const oneWay, nodeTimeout, ttl = 150 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelined=", on), func(t *testing.T) {
			srvs, direct := startQuorum(t, 3)
			ctx := t.Context()
			var nodes []redis.UniversalClient
			for _, s := range srvs {
				p := redistest.NewProxy(t, s.Addr())
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
				t.Cleanup(func() { rdb.Close() })
				if err := rdb.Ping(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
					t.Fatal(err)
				}
				p.Delay(oneWay, oneWay)
				nodes = append(nodes, rdb)
			}
			c := newRedlock(t, nodes, nodeTimeout, dlock.LeaseTTL(ttl), pipelined(on))
			start := time.Now()
			l, err := c.TryAcquire(ctx, "q-first")
			if err != nil {
				t.Fatalf("first TryAcquire over the quorum = %v (after %v), want the lock", err, time.Since(start))
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l, err = c.Acquire(ctx, "q-lease")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(ttl + ttl/5)
			if err := l.Err(); err != nil {
				t.Errorf("a %v lease after %v of extensions: Err() = %v, want it held", ttl, ttl+ttl/5, err)
			}
			// (A release whose nodes all answer after the node timeout, on
			// a loaded machine, goes on in the background, and Close
			// waits for it: what this test pins is the scripts' misses.)
			if err := l.Release(ctx); err != nil && !strings.Contains(err.Error(), noAnswer) {
				t.Errorf("Release = %v", err)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for i, rdb := range direct {
				if evals, noscripts := scriptMisses(t, ctx, rdb); evals != 0 || noscripts != 0 {
					t.Errorf("node %d ran %d EVALs and answered %d NOSCRIPTs, want 0", i, evals, noscripts)
				}
			}
		})
	}
}

// On a Cluster each master that owns a lock's slot has the scripts before
// the first call there.
func TestClusterScriptsLoadedBeforeFirstUse(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	leakcheck.Check(t)
	_, cc := startCluster(t)
	ctx := t.Context()
	reset := func(ctx context.Context, m *redis.Client) error {
		m.ScriptFlush(ctx)
		return m.ConfigResetStat(ctx).Err()
	}
	if err := cc.ForEachMaster(ctx, reset); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]dlock.Option{nil, {dlock.WithUnfair(nil), pipelined(false)}} {
		c := newClient(t, cc, append(opts, dlock.WithAutoExtend(false))...)
		for i := range 12 { // names on every master
			l, err := c.TryAcquire(ctx, fmt.Sprint("cl-", i))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if evals, noscripts := scriptMisses(t, ctx, m); evals != 0 || noscripts != 0 {
			return fmt.Errorf("master %s ran %d EVALs and answered %d NOSCRIPTs, want 0", m.Options().Addr, evals, noscripts)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// A server that lost its script cache (an empty restart, a failover to a
// server that never had them; SCRIPT FLUSH here, then a real restart)
// answers the first call that finds it so NOSCRIPT. That call reloads what
// the Client had loaded: every later timed call is one round trip again,
// and a 600ms lease outlives its first extensions, although the extend
// script was not the one that met the empty cache.
func TestScriptsReloadedAfterTheServerLostThem(t *testing.T) {
	// Serial: it times round trips against short leases; a busy machine adds its own delays.
	long(t)
	leakcheck.Check(t)
	s, direct, slow := slowServer(t)
	ctx := t.Context()
	for _, k := range []lockKind{lockKinds[0], lockKinds[3], lockKinds[4], lockKinds[5]} {
		t.Run(k.name, func(t *testing.T) {
			c := newClient(t, slow, append([]dlock.Option{dlock.LeaseTTL(600 * time.Millisecond)}, k.opts...)...)
			inTime(t, k.name, func(n int) error { return shortLeases(t, ctx, c, k, fmt.Sprint("warm-", k.name, n)) }) // its scripts loaded

			for _, lose := range []string{"SCRIPT FLUSH", "restart"} {
				if lose == "restart" {
					s.Restart() // (direct's next command reconnects)
				} else {
					direct.ScriptFlush(ctx)
				}
				direct.ConfigResetStat(ctx)
				// The first call meets the empty cache (a call after the
				// restart may meet a dead connection first: up to 5 tries).
				var err error
				for range 5 {
					var l *dlock.Lock
					if l, err = k.take(t, ctx, c, "after-"+k.name, true); err == nil {
						err = l.Release(ctx)
						break
					}
				}
				if err != nil {
					t.Fatalf("%s after %s: no call succeeded: %v", k.name, lose, err)
				}
				evals, missed := scriptMisses(t, ctx, direct)
				if missed == 0 {
					t.Fatalf("%s after %s: no NOSCRIPT: the test did not empty the cache", k.name, lose)
				}
				inTime(t, k.name+" after "+lose, func(n int) error {
					return shortLeases(t, ctx, c, k, fmt.Sprint("again-", k.name, n), dlock.LeaseTTL(300*time.Millisecond))
				})
				evals2, missed2 := scriptMisses(t, ctx, direct)
				if evals2 != evals || missed2 != missed {
					t.Errorf("%s after %s: %d EVALs and %d NOSCRIPTs after the first call (%d, %d before), want none: the first reloads the Client's scripts",
						k.name, lose, evals2-evals, missed2-missed, evals, missed)
				}
				if evals != 0 || missed > 1 {
					t.Logf("%s after %s: the first call: %d EVALs, %d NOSCRIPTs", k.name, lose, evals, missed)
				}
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Redis user that may run scripts but not load them (an ACL with
// -script|load) is served as before: each call's script goes with EVAL when
// the server lacks it, and SCRIPT LOAD, refused once, is not asked again.
func TestScriptLoadDeniedStillRunsScripts(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	if err := direct.Do(ctx, "ACL", "SETUSER", "noload", "on", ">pw", "~*", "&*", "+@all", "-script|load").Err(); err != nil {
		t.Fatal(err)
	}
	opts := s.Options()
	opts.Username, opts.Password = "noload", "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	refused := func() int { return serverStat(t, ctx, direct, "commandstats", "cmdstat_script|load", "rejected_calls") }
	first := 0
	for i := range 3 {
		direct.ScriptFlush(ctx) // the script goes with EVAL each time
		l, err := c.TryAcquire(ctx, fmt.Sprint("noload-", i))
		if err != nil {
			t.Fatalf("TryAcquire %d as a user that may not SCRIPT LOAD = %v", i, err)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend %d = %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d = %v", i, err)
		}
		if i == 0 {
			first = refused() // the first load's pipeline, one per script
		}
	}
	if n := refused(); first == 0 || n != first {
		t.Errorf("SCRIPT LOADs refused: %d by the first call, %d in all; want some, then no more: a refusal is not asked again", first, n)
	}
}

// A new Client's first call, which loads its kind's scripts, returns at
// its context's end while Redis holds the replies, also through a go-redis
// client that does not watch the context while it reads (no read timeout:
// it would wait for ever); once Redis answers again the Client takes locks.
func TestFirstCallEndsWithItsContextWhileTheScriptLoadStalls(t *testing.T) {
	t.Parallel()
	p, rdb, _ := proxied(t, 3, -1)
	c := newClient(t, rdb)
	p.StallReplies()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "first-call-stalled-load")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire through a stalled script load = %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		p.Cut()
		<-done
		t.Fatal("Acquire(300ms) still waited for its script load 10s later")
	}
	p.Cut() // (Redis answers again)
	l, err := c.Acquire(t.Context(), "first-call-stalled-load")
	if err != nil {
		t.Fatal("Acquire once Redis answers again:", err)
	}
	l.Release(t.Context())
}

// A script load that never ends (its connection went half-open, on a
// client without a read timeout) does not hold later calls: the first
// call leaves at its context's end, and the next, on a fresh connection to
// a Redis that answers, takes the lock within its context, though the
// load it finds in flight never returns.
func TestCallAfterAScriptLoadThatNeverEndsTakesTheLock(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	var viaProxy atomic.Bool // connections made meanwhile go through p
	viaProxy.Store(true)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if viaProxy.Load() {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil { // the one pooled connection, through p
		t.Fatal(err)
	}
	viaProxy.Store(false)
	c := newClient(t, rdb)
	p.StallReplies() // (the pooled connection: half-open from now on)
	defer p.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(ctx, "load-never-ends"); err == nil {
		t.Fatal("Acquire through the stalled connection took the lock")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "load-never-ends")
	if err != nil {
		t.Fatal("Acquire on a fresh connection while a script load never ends:", err)
	}
	l.Release(t.Context())
}
