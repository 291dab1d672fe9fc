// Package drivertest holds the tests every driver must pass: each lock kind
// taken, extended, fenced and released through dlock.NewFrom on private
// redis-server processes, with mutual exclusion counted across goroutines
// and Clients, a PubSub held to its contract, waiters woken by pub/sub
// (after a broken connection and a restart too), dlock's pub/sub hub
// keeping a quiet connection and one whose PINGs are answered late and
// letting a stalled one go, a holder told of its loss at once (WatchLoss),
// a script cache emptied under a Client, a server down, a script sent once
// whatever becomes of its reply, and a Cluster where the client has one.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/pubsub"
	"github.com/dlockio/dlock/internal/redistest"
)

// Setup makes a driver's Conns for the tests; each is closed by the
// caller's cleanup (t.Cleanup), after the Clients made on it.
type Setup struct {
	// Server returns a Conn to the redis-server at addr (127.0.0.1:port).
	Server func(t *testing.T, addr string) driver.Conn
	// Cluster returns a Conn to the Cluster whose nodes are addrs; nil
	// skips the Cluster tests.
	Cluster func(t *testing.T, addrs []string) driver.Conn
	// Sentinel returns a Conn to the master named master that the
	// Sentinels at addrs watch; nil skips the Sentinel test.
	Sentinel func(t *testing.T, master string, addrs []string) driver.Conn
	// Smoke runs only a representative subset of the table: the refusals,
	// each lock mode, the semaphore and a lost reply.
	Smoke bool
}

// tableCase is one case of the table: run starts the servers it uses.
type tableCase struct {
	name  string
	smoke bool // in the Smoke subset
	run   func(t *testing.T, s Setup)
}

// Run runs the table against s's driver: each case a parallel subtest on
// servers of its own.
func Run(t *testing.T, s Setup) {
	for _, c := range table() {
		if s.Smoke && !c.smoke || c.name == "Sentinel" && s.Sentinel == nil || c.name == "Cluster" && s.Cluster == nil {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, s)
		})
	}
}

// table returns the cases of Run.
func table() []tableCase {
	cases := []tableCase{{"Refusals", true, func(t *testing.T, s Setup) { refusals(t, onServer(t, s)(t)) }}}
	for _, m := range modes {
		cases = append(cases, tableCase{"Lock/" + m.name, true, func(t *testing.T, s Setup) {
			lockKind(t, m, clients(onServer(t, s)))
		}})
	}
	pair := func(name string, smoke bool, f func(t *testing.T, a, b *dlock.Client)) tableCase {
		return tableCase{name, smoke, func(t *testing.T, s Setup) {
			conn := onServer(t, s)
			f(t, client(t, conn(t)), client(t, conn(t)))
		}}
	}
	cases = append(cases, pair("Semaphore", true, semaphore), pair("RWMutex", false, rwMutex),
		pair("Election", false, election), pair("Admin", false, admin), pair("MultiLock", false, multiLock),
		pair("Deadlock", true, deadlock),
		tableCase{"ScriptFlush", false, func(t *testing.T, s Setup) {
			srv := redistest.Start(t, redistest.TCP())
			scriptFlush(t, srv, client(t, s.Server(t, srv.Addr())))
		}},
		tableCase{"LostReply", true, func(t *testing.T, s Setup) {
			srv := redistest.Start(t, redistest.TCP())
			p := redistest.NewProxy(t, srv.Addr())
			behind := func() *dlock.Client { return client(t, s.Server(t, p.Addr()), dlock.LeaseTTL(30*time.Second)) }
			lostReply(t, p, behind(), client(t, s.Server(t, srv.Addr())))
			lostDowngrade(t, p, behind(), client(t, s.Server(t, srv.Addr())))
		}})
	cases = append(cases, tableCase{"ScriptSentOnce", true, func(t *testing.T, s Setup) {
		srv := redistest.Start(t, redistest.TCP())
		p := redistest.NewProxy(t, srv.Addr())
		sentOnce(t, p, s.Server(t, p.Addr()), s.Server(t, srv.Addr()))
	}})
	cases = append(cases, tableCase{"PubSub", true, func(t *testing.T, s Setup) {
		srv := redistest.Start(t, redistest.TCP())
		p := redistest.NewProxy(t, srv.Addr())
		pubSub(t, p, s.Server(t, p.Addr()), s.Server(t, srv.Addr()))
	}})
	cases = append(cases, tableCase{"WatchLoss", true, func(t *testing.T, s Setup) {
		srv := redistest.Start(t, redistest.TCP(), redistest.Args("--notify-keyspace-events", "KA"))
		watchLoss(t, srv, client(t, s.Server(t, srv.Addr()), dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)))
	}})
	cases = append(cases, tableCase{"ReleaseRequest", true, func(t *testing.T, s Setup) {
		releaseRequest(t, client(t, onServer(t, s)(t), dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)), "dt-asked")
	}})
	cases = append(cases, tableCase{"PubSubAfterRestart", false, func(t *testing.T, s Setup) {
		srv := redistest.Start(t, redistest.TCP())
		hubAfterRestart(t, srv, s.Server(t, srv.Addr()))
	}})
	cases = append(cases, tableCase{"HubHealth/StalledLetGo", true, quietKeptStalledLetGo},
		tableCase{"HubHealth/LatePongKept", true, latePongKept})
	for _, m := range modes[:2] {
		cases = append(cases, tableCase{"BrokenPubSub/" + m.name, false, func(t *testing.T, s Setup) {
			srv := redistest.Start(t, redistest.TCP())
			p := redistest.NewProxy(t, srv.Addr())
			brokenPubSub(t, p, &scriptCount{Conn: s.Server(t, p.Addr())}, s.Server(t, srv.Addr()), m)
		}})
	}
	return append(cases,
		tableCase{"ServerDown", false, func(t *testing.T, s Setup) {
			down := redistest.Start(t, redistest.TCP())
			serverDown(t, down, client(t, s.Server(t, down.Addr())))
		}},
		tableCase{"ReleaseAfterRestart", false, func(t *testing.T, s Setup) {
			gone := redistest.Start(t, redistest.TCP())
			releaseAfterRestart(t, gone, clients(func(t *testing.T) driver.Conn { return s.Server(t, gone.Addr()) }))
		}},
		tableCase{"ServerClock", false, serverClock},
		tableCase{"Quorum", false, quorum},
		tableCase{"Sentinel", false, sentinel},
		tableCase{"Cluster", false, cluster})
}

// onServer starts a redis-server for t and returns a maker of Conns to it.
func onServer(t *testing.T, s Setup) func(t *testing.T) driver.Conn {
	srv := redistest.Start(t, redistest.TCP())
	return func(t *testing.T) driver.Conn { return s.Server(t, srv.Addr()) }
}

// clients returns a maker of Clients, each on a Conn of its own from conn.
func clients(conn func(t *testing.T) driver.Conn) func(t *testing.T, opts ...dlock.Option) *dlock.Client {
	return func(t *testing.T, opts ...dlock.Option) *dlock.Client { return client(t, conn(t), opts...) }
}

// cluster runs the lock modes, the semaphore and the admin calls on a
// Cluster of three masters, as parallel subtests (their names differ).
func cluster(t *testing.T, s Setup) {
	var addrs []string
	srvs := redistest.StartCluster(t, 3, 0)
	for _, n := range srvs {
		addrs = append(addrs, n.Addr())
	}
	cconn := func(t *testing.T) driver.Conn { return s.Cluster(t, addrs) }
	for _, m := range modes {
		t.Run("Lock/"+m.name, func(t *testing.T) {
			t.Parallel()
			lockKind(t, m, clients(cconn))
		})
	}
	t.Run("Semaphore", func(t *testing.T) {
		t.Parallel()
		semaphore(t, client(t, cconn(t)), client(t, cconn(t)))
	})
	t.Run("Admin", func(t *testing.T) {
		t.Parallel()
		admin(t, client(t, cconn(t)), client(t, cconn(t)))
	})
	t.Run("Deadlock", func(t *testing.T) { // ("dt-order" and "dt-inventory" hash to different slots)
		t.Parallel()
		deadlock(t, client(t, cconn(t)), client(t, cconn(t)))
	})
	t.Run("WatchLoss", func(t *testing.T) {
		t.Parallel()
		clusterWatchLoss(t, srvs, client(t, cconn(t), dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)))
	})
	t.Run("ReleaseRequest", func(t *testing.T) {
		t.Parallel()
		c := client(t, cconn(t), dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true))
		for _, name := range []string{"dt-asked-a", "dt-asked-b", "dt-asked-c"} { // (on several shards)
			releaseRequest(t, c, name)
		}
	})
}

// releaseRequest: a watching holder of name hears c's RequestRelease, sent
// once, as soon as the acquisition returned, with its reason, and keeps
// its lease.
func releaseRequest(t *testing.T, c *dlock.Client, name string) {
	ctx := ctxFor(t, 60*time.Second)
	l, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := c.RequestRelease(ctx, name, "drain * 1"); err != nil {
		t.Fatalf("RequestRelease(%q) = %v", name, err)
	}
	got := ""
	select {
	case got = <-l.ReleaseRequests():
	case <-time.After(10 * time.Second):
	}
	if got != "drain * 1" {
		t.Errorf("the holder of %q heard %q, want %q", name, got, "drain * 1")
	}
	if err := l.Err(); err != nil {
		t.Errorf("the holder of %q asked to release: Err() = %v", name, err)
	}
}

// clusterWatchLoss: on a Cluster, with WatchLoss, a ForceRelease is told
// to the holder at once (its next extension is 10s away), through the
// sharded channel of the lock.
func clusterWatchLoss(t *testing.T, srvs []*redistest.Server, c *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	l, err := c.TryAcquire(ctx, "dt-cwatch")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ch := l.Key() + ":ch"
	if !eventually(10*time.Second, func() bool {
		for _, srv := range srvs {
			n, _ := srv.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch)
			if v, _ := n.([]any); len(v) == 2 && v[1] == int64(1) {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s: not subscribed after 10s", ch)
	}
	start := time.Now()
	if ok, err := c.ForceRelease(ctx, l.Name()); !ok || err != nil {
		t.Fatalf("ForceRelease: %v, %v", ok, err)
	}
	select {
	case <-l.Done():
		t.Logf("a ForceRelease on a Cluster told in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("a ForceRelease on a Cluster: not told within 5s (the next extension is 10s away)")
	}
}

// client returns a Client on conn, closed in t's cleanup.
func client(t *testing.T, conn driver.Conn, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.NewFrom(conn, opts...)
	if err != nil {
		t.Fatalf("NewFrom: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// slow is an unfair waiter's backoff far longer than any test waits: only
// a release's message wakes it in time.
func slow(int) time.Duration { return 20 * time.Second }

type mode struct {
	name string
	opts []dlock.Option
}

var modes = []mode{
	{"fair", nil},
	{"unfair", []dlock.Option{dlock.WithUnfair(slow)}},
	{"reentrant", []dlock.Option{dlock.WithReentrant(true), dlock.WithUnfair(slow)}},
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func refusals(t *testing.T, conn driver.Conn) {
	for _, c := range []struct {
		conn driver.Conn
		opts []dlock.Option
	}{
		{nil, nil},
		{conn, []dlock.Option{dlock.WithReplicaAck(1, time.Second)}},
		{conn, []dlock.Option{dlock.WithoutScripts()}},
		{conn, []dlock.Option{dlock.LeaseTTL(time.Millisecond)}},
	} {
		if cl, err := dlock.NewFrom(c.conn, c.opts...); !errors.Is(err, dlock.ErrInvalid) {
			if cl != nil {
				cl.Close(context.Background())
			}
			t.Errorf("NewFrom(%v, %d options): %v, want ErrInvalid", c.conn, len(c.opts), err)
		}
	}
}

// lockKind takes, fences, extends and releases a lock of mode m; counts
// holders at once under contention from two Clients; and checks that a
// waiter is woken by the release.
func lockKind(t *testing.T, m mode, newClient func(t *testing.T, opts ...dlock.Option) *dlock.Client) {
	a, b := newClient(t, m.opts...), newClient(t, m.opts...)
	ctx := ctxFor(t, 60*time.Second)
	name := "dt-" + m.name
	l, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	f1, err := l.Fence(ctx)
	if err != nil || f1 <= 0 {
		t.Fatalf("Fence: %d, %v", f1, err)
	}
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 10*time.Second {
		t.Fatalf("TTL after Extend(20s): %v, %v", ttl, err)
	}
	if _, err := b.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v, want nil (idempotent)", err)
	}
	l2, err := b.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	if f2, err := l2.Fence(ctx); err != nil || f2 <= f1 {
		t.Fatalf("the next lease's fence %d (%v), not above %d", f2, err, f1)
	}

	// A waiter is woken by the release: its own timers would wake it
	// much later (the unfair backoff is 20s; the fair lock's queue renewal
	// is a third of its 10s lease).
	woken(t, l2, func(ctx context.Context) (*dlock.Lock, error) { return a.Acquire(ctx, name) })

	// Mutual exclusion: goroutines of both Clients, each lease counted in
	// and out of the critical section.
	most, done := contend(t, 8, 15, func(i int, body func(context.Context, *dlock.Lock) error) error {
		return []*dlock.Client{a, b}[i%2].Do(ctx, name+":x", body, dlock.MaxWait(30*time.Second))
	}, nil)
	if most != 1 || done != 8*15 {
		t.Fatalf("%d holders at once (want 1), %d of %d sections done", most, done, 8*15)
	}
}

// contend runs iters critical sections (body) on each of workers
// goroutines, the i-th through do(i, body), and returns the most held at
// once and how many were done; check, if not nil, runs in each section.
func contend(t *testing.T, workers, iters int, do func(i int, body func(context.Context, *dlock.Lock) error) error, check func(context.Context, *dlock.Lock) error) (most, done int64) {
	var (
		in, top, n atomic.Int64
		wg         sync.WaitGroup
	)
	body := func(ctx context.Context, l *dlock.Lock) error {
		k := in.Add(1)
		defer in.Add(-1)
		for m := top.Load(); k > m && !top.CompareAndSwap(m, k); m = top.Load() {
		}
		if check != nil {
			if err := check(ctx, l); err != nil {
				return err
			}
		}
		time.Sleep(500 * time.Microsecond)
		n.Add(1)
		return nil
	}
	for i := range workers {
		wg.Go(func() {
			for range iters {
				if err := do(i, body); err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return top.Load(), n.Load()
}

// woken checks that a waiter (acquire) takes the lock soon after l is
// released.
func woken(t *testing.T, l *dlock.Lock, acquire func(context.Context) (*dlock.Lock, error)) {
	t.Helper()
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		m, err := acquire(wctx)
		if err == nil {
			err = m.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // (the waiter subscribes and is refused once)
	rel := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if d := time.Since(rel); d > 2*time.Second {
		t.Errorf("the waiter took the lock %v after the release: not woken by it", d)
	}
}

func semaphore(t *testing.T, a, b *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	sa, err := a.Semaphore("dt-sem", 3)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Semaphore("dt-sem", 3)
	if err != nil {
		t.Fatal(err)
	}
	two, err := sa.AcquireN(ctx, 2)
	if err != nil {
		t.Fatalf("AcquireN(2): %v", err)
	}
	one, err := sb.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the third permit: %v", err)
	}
	if _, err := sb.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a fourth permit of 3: %v, want ErrNotAcquired", err)
	}
	if n, err := sa.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available: %d, %v", n, err)
	}
	if err := two.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if f, err := one.Fence(ctx); err != nil || f <= 0 {
		t.Fatalf("Fence: %d, %v", f, err)
	}
	woken(t, one, func(ctx context.Context) (*dlock.Lock, error) { return sa.Acquire(ctx) })
	if err := two.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// At most 3 permits held at once, by goroutines of both Clients.
	most, _ := contend(t, 6, 8, func(i int, body func(context.Context, *dlock.Lock) error) error {
		return []*dlock.Semaphore{sa, sb}[i%2].Do(ctx, body, dlock.MaxWait(30*time.Second))
	}, nil)
	if most > 3 {
		t.Fatalf("%d permits of 3 held at once", most)
	}
	// A size kept in Redis, changed through the driver.
	if n, err := sb.AddPermits(ctx, 1); err != nil || n != 4 {
		t.Fatalf("AddPermits(1) of 3: %d, %v", n, err)
	}
	if ok, err := sa.UnsetPermits(ctx); err != nil || !ok {
		t.Fatalf("UnsetPermits of a kept size: %v, %v", ok, err)
	}
}

func rwMutex(t *testing.T, a, b *dlock.Client) {
	ctx := ctxFor(t, 30*time.Second)
	ra, err := a.RWMutex("dt-rw")
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := b.RWMutex("dt-rw")
	r1, err := ra.Reader().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rb.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if _, err := rb.Writer().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a writer beside readers: %v, want ErrNotAcquired", err)
	}
	r1.Release(ctx)
	woken2 := make(chan error, 1)
	go func() {
		w, err := rb.Writer().Acquire(ctx)
		if err == nil {
			if _, err2 := ra.Reader().TryAcquire(ctx); !errors.Is(err2, dlock.ErrNotAcquired) {
				err = fmt.Errorf("a reader beside the writer: %v", err2)
			} else {
				err = rb.Downgrade(ctx, w)
			}
			if err == nil {
				var r *dlock.Lock
				if r, err = ra.Reader().TryAcquire(ctx); err == nil { // a reader beside the downgraded hold
					r.Release(ctx)
					err = w.Release(ctx)
				}
			}
		}
		woken2 <- err
	}()
	time.Sleep(300 * time.Millisecond)
	r2.Release(ctx)
	if err := <-woken2; err != nil {
		t.Fatalf("the writer: %v", err)
	}
}

func election(t *testing.T, a, b *dlock.Client) {
	ctx := ctxFor(t, 30*time.Second)
	ea, err := a.Election("dt-el")
	if err != nil {
		t.Fatal(err)
	}
	eb, _ := b.Election("dt-el")
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Proclaim(ctx, "a2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if ld, err := eb.Leader(ctx); err != nil || ld.Value != "a2" {
		t.Fatalf("Leader: %+v, %v", ld, err)
	}
	got := make(chan *dlock.Leadership, 1)
	go func() {
		lb, err := eb.Campaign(ctx, "b")
		if err != nil {
			t.Errorf("the second campaign: %v", err)
		}
		got <- lb
	}()
	time.Sleep(300 * time.Millisecond)
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	if lb.Fence() <= la.Fence() {
		t.Errorf("the next term's fence %d, not above %d", lb.Fence(), la.Fence())
	}
	if ld, err := ea.Leader(ctx); err != nil || ld.Value != "b" {
		t.Fatalf("Leader after the handover: %+v, %v", ld, err)
	}
	lb.Resign(ctx)
}

func admin(t *testing.T, a, b *dlock.Client) {
	ctx := ctxFor(t, 30*time.Second)
	var held []*dlock.Lock
	for i := range 5 {
		l, err := a.Acquire(ctx, fmt.Sprintf("dt-adm-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	infos, err := b.List(ctx, "dt-adm-*")
	if err != nil || len(infos) != 5 {
		t.Fatalf("List: %d locks, %v (want 5)", len(infos), err)
	}
	info, err := b.Inspect(ctx, "dt-adm-0")
	if err != nil || !info.Held || info.Token != held[0].Token() {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	if ok, err := b.ForceRelease(ctx, "dt-adm-0"); err != nil || !ok {
		t.Fatalf("ForceRelease: %v, %v", ok, err)
	}
	select {
	case <-held[0].Done():
	case <-time.After(15 * time.Second):
		t.Fatal("a forced release went untold to the holder")
	}
	for _, l := range held[1:] {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptFlush empties the server's script cache under a Client that has
// loaded its scripts: its next calls run them anyway.
func scriptFlush(t *testing.T, srv *redistest.Server, c *dlock.Client) {
	ctx := ctxFor(t, 30*time.Second)
	for i := range 3 {
		l, err := c.Acquire(ctx, "dt-flush")
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		if _, err := srv.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		if _, err := srv.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release after SCRIPT FLUSH: %v", err)
		}
	}
}

// serverDown: with the server killed, an acquisition fails within its
// context, and after a restart the Client takes locks again.
func serverDown(t *testing.T, srv *redistest.Server, c *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	l, err := c.Acquire(ctx, "dt-down")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release with the server down: no error")
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Acquire(actx, "dt-down2")
	cancel()
	if err == nil {
		t.Fatal("Acquire with the server down: no error")
	}
	srv.Restart()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l, err := c.TryAcquire(ctx, "dt-down")
		if err == nil {
			l.Release(ctx)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %v", err)
		}
	}
}

// releaseAfterRestart: a lease lost to a server restarted empty, and taken
// by another holder since, is reported lost by its Release, whichever
// client carries it: the first command after the restart must not go out
// on a connection to the server that is gone, nor be taken for a release
// whose reply was lost.
func releaseAfterRestart(t *testing.T, srv *redistest.Server, newClient func(t *testing.T, opts ...dlock.Option) *dlock.Client) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for i := range 6 {
				a, b := newClient(t, m.opts...), newClient(t, m.opts...)
				ctx := ctxFor(t, 30*time.Second)
				name := fmt.Sprintf("dt-restart-%s-%d", m.name, i)
				l, err := a.Acquire(ctx, name, dlock.LeaseTTL(20*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Fence(ctx); err != nil {
					t.Fatal(err)
				}
				srv.Restart()
				var l2 *dlock.Lock
				if !eventually(10*time.Second, func() bool { l2, err = b.TryAcquire(ctx, name); return err == nil }) {
					t.Fatalf("no lock after the restart: %v", err)
				}
				if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
					t.Fatalf("try %d: Release of a lease lost to a restart, the name held by another: %v, want ErrNotHeld", i, err)
				}
				l2.Release(ctx)
			}
		})
	}
}

// quorum: locks on a majority of three servers (NewRedlockFrom), fences
// rising, exclusion counted, and a lock taken with one node down.
func quorum(t *testing.T, s Setup) {
	ctx := ctxFor(t, 60*time.Second)
	var (
		srvs  []*redistest.Server
		conns []driver.Conn
	)
	for range 3 {
		srv := redistest.Start(t, redistest.TCP())
		srvs = append(srvs, srv)
		conns = append(conns, s.Server(t, srv.Addr()))
	}
	if _, err := dlock.NewRedlockFrom(conns, 0, dlock.WithReentrant(true)); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("NewRedlockFrom(WithReentrant): %v, want ErrInvalid", err)
	}
	if _, err := dlock.NewRedlockFrom(append(conns[:2:2], nil), 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("NewRedlockFrom with a nil node: %v, want ErrInvalid", err)
	}
	var cs []*dlock.Client
	for range 2 {
		// A node timeout of a second, not TTL/50: the table's cases run in
		// parallel, and on a loaded machine a node may take longer than 100ms.
		c, err := dlock.NewRedlockFrom(conns, time.Second, dlock.LeaseTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		cs = append(cs, c)
	}
	var last atomic.Int64
	most, _ := contend(t, 6, 10, func(i int, body func(context.Context, *dlock.Lock) error) error {
		return cs[i%2].Do(ctx, "dt-q", body, dlock.MaxWait(30*time.Second))
	}, func(ctx context.Context, l *dlock.Lock) error {
		f, err := l.Fence(ctx)
		if err != nil {
			return err
		}
		if prev := last.Swap(f); f <= prev {
			return fmt.Errorf("fence %d after %d", f, prev)
		}
		return nil
	})
	if most != 1 {
		t.Fatalf("%d holders at once over the quorum", most)
	}
	srvs[2].Kill()
	l, err := cs[0].Acquire(ctx, "dt-q2")
	if err != nil {
		t.Fatalf("with one node of three down: %v", err)
	}
	if _, err := cs[1].TryAcquire(ctx, "dt-q2"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a second holder over the quorum: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func multiLock(t *testing.T, a, b *dlock.Client) {
	ctx := ctxFor(t, 30*time.Second)
	names := []string{"dt-m1", "dt-m2", "dt-m3"}
	m, err := a.AcquireAll(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquireAll(ctx, []string{"dt-m0", "dt-m2"}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll over a held part: %v, want ErrNotAcquired", err)
	}
	if l, err := b.TryAcquire(ctx, "dt-m0"); err != nil {
		t.Fatalf("a part of a refused multi-lock was left held: %v", err)
	} else {
		l.Release(ctx)
	}
	if err := m.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.DoAll(ctx, names, func(context.Context, *dlock.MultiLock) error { return nil }); err != nil {
		t.Fatalf("DoAll after the release: %v", err)
	}
}

// lostReply: the replies of a's connection stall while its acquire runs on
// the server; the call fails with its context, and what it took is undone
// (a's lease is 30s): b takes the lock long before that.
func lostReply(t *testing.T, p *redistest.Proxy, a, b *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	l, err := a.Acquire(ctx, "dt-lost") // (scripts loaded, connection made)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	p.StallReplies()
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = a.Acquire(actx, "dt-lost")
	cancel()
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire with its reply stalled: %v, want ErrNotAcquired", err)
	}
	p.Cut()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l, err := b.TryAcquire(ctx, "dt-lost")
		if err == nil {
			l.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock taken by a call whose reply was lost was never undone: %v", err)
		}
	}
	// And a's Client takes locks again.
	l, err = a.Acquire(ctx, "dt-lost")
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	l.Release(ctx)
}

// sentOnce: a script whose reply is lost (the connection cut once the
// server ran it, or the caller's ctx ended while it waited) is not sent
// again by the driver, through Do or DoMulti: the server runs it once. A
// client that re-sends a script on its own (one it deems retryable) would
// let a request of a lease land after dlock took it as settled.
func sentOnce(t *testing.T, p *redistest.Proxy, conn, direct driver.Conn) {
	ctx := ctxFor(t, 3*time.Minute)
	const incr = "return redis.call('INCR', KEYS[1])"
	v, err := direct.Do(ctx, "script", "load", incr)
	if err != nil {
		t.Fatal(err)
	}
	sha, _ := driver.String(v)
	ran := func(key string) int64 {
		v, err := direct.Do(ctx, "get", key)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := driver.String(v)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	sends := []struct {
		name string
		send func(ctx context.Context, key string) error
	}{
		{"EVAL", func(ctx context.Context, key string) error { _, err := conn.Do(ctx, "eval", incr, 1, key); return err }},
		{"EVALSHA", func(ctx context.Context, key string) error {
			_, err := conn.Do(ctx, "evalsha", sha, 1, key)
			return err
		}},
		{"DoMulti", func(ctx context.Context, key string) error {
			return conn.DoMulti(ctx, []any{"evalsha", sha, 1, key}, []any{"ping"})[0].Err
		}},
	}
	// try loses the reply of one call of send: it reports false if the call
	// ended before its script ran (the client gave up on the stalled
	// connection first), to be tried again.
	try := func(name, lost, key string, send func(ctx context.Context, key string) error) bool {
		var err error // (a connection made again after the last cut)
		if !eventually(10*time.Second, func() bool { err = send(ctx, key+":warm"); return err == nil }) {
			t.Fatalf("%s: %v", name, err)
		}
		p.StallReplies()
		defer p.Cut()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- send(cctx, key) }()
		for deadline := time.Now().Add(10 * time.Second); ran(key) == 0; time.Sleep(20 * time.Millisecond) {
			select {
			case <-done:
				return false
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s, reply lost (%s): the script never ran", name, lost)
			}
		}
		if lost == "ctx" {
			cancel()
			select { // (a client may hold the call past its ctx: the cut ends it)
			case err = <-done:
				done <- err
			case <-time.After(time.Second):
			}
		}
		p.Cut()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s, reply lost (%s): the call did not return", name, lost)
		}
		if err == nil {
			t.Errorf("%s, reply lost (%s): the call succeeded: its command was sent again", name, lost)
		}
		// A re-send, if any, lands now that the connection is new.
		if eventually(time.Second, func() bool { return ran(key) > 1 }) {
			t.Errorf("%s, reply lost (%s): the server ran the script %d times; a driver sends a command once", name, lost, ran(key))
		}
		return true
	}
	checked := 0
	for _, c := range sends {
		for _, lost := range []string{"cut", "ctx"} {
			for i := 0; i < 6; i++ {
				if try(c.name, lost, fmt.Sprintf("dt-once:%s:%s:%d", c.name, lost, i), c.send) {
					checked++
					break
				}
			}
		}
	}
	// A client may give up on a stalled connection before it sends (a new
	// connection's handshake, stalled too): such a call proves nothing,
	// but most must be checked.
	if checked < len(sends) {
		t.Fatalf("only %d of %d lost replies checked: the calls ended before their scripts ran", checked, 2*len(sends))
	}
}

// scriptCount is a Conn that counts the script calls it got a reply to.
type scriptCount struct {
	driver.Conn
	n atomic.Int32
}

func (c *scriptCount) Do(ctx context.Context, args ...any) (any, error) {
	v, err := c.Conn.Do(ctx, args...)
	if name, _ := driver.String(args[0]); strings.HasPrefix(strings.ToLower(name), "eval") {
		c.n.Add(1)
	}
	return v, err
}

// pubSub checks a PubSub against its contract (see driver.PubSub) on conn,
// whose connections go through p: confirmations, messages and a PING's
// reply arrive through Receive, which leaves when its ctx ends; a cut connection is done
// for good, and Close makes a Receive in progress return.
func pubSub(t *testing.T, p *redistest.Proxy, conn, direct driver.Conn) {
	ctx := ctxFor(t, 60*time.Second)
	ps, err := conn.PubSub(ctx, "")
	if err != nil {
		t.Fatalf("PubSub: %v", err)
	}
	defer ps.Close()
	if err := ps.Subscribe(ctx, "dt-ps"); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	receive := func(d time.Duration) (driver.Message, error) {
		rctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		for {
			m, err := ps.Receive(rctx)
			if err != nil || m.Kind != "pong" {
				return m, err
			}
		}
	}
	if m, err := receive(10 * time.Second); err != nil || m.Kind != "subscribe" || m.Channel != "dt-ps" {
		t.Fatalf("Receive after Subscribe: %+v, %v; want the confirmation", m, err)
	}
	if _, err := direct.Do(ctx, "PUBLISH", "dt-ps", "hello"); err != nil {
		t.Fatal(err)
	}
	if m, err := receive(10 * time.Second); err != nil || m.Kind != "message" || m.Channel != "dt-ps" || m.Payload != "hello" {
		t.Fatalf("Receive after PUBLISH: %+v, %v", m, err)
	}
	if err := ps.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	m, err := ps.Receive(rctx) // (dlock ends a connection that answers no PING)
	cancel()
	if err != nil || m.Kind != "pong" {
		t.Fatalf("Receive after Ping: %+v, %v; want its reply, a Message of Kind \"pong\"", m, err)
	}
	if err := ps.Unsubscribe(ctx, "dt-ps"); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if m, err := receive(10 * time.Second); err != nil || m.Kind != "unsubscribe" || m.Channel != "dt-ps" {
		t.Fatalf("Receive after Unsubscribe: %+v, %v; want the confirmation", m, err)
	}
	start := time.Now()
	if m, err := receive(200 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive with nothing to receive: %+v, %v; want an error wrapping its ctx's", m, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Receive left %v after its ctx ended", d)
	}
	p.Cut()
	if m, err := receive(10 * time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on a cut connection: %+v, %v; want it done", m, err)
	}
	if err := ps.Subscribe(ctx, "dt-ps2"); err == nil {
		t.Error("Subscribe on a cut connection: nil, want an error (no reconnection)")
	}
	if m, err := receive(time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Receive again on a cut connection: %+v, %v; want it done", m, err)
	}
	ps.Close()

	ps, err = conn.PubSub(ctx, "")
	if err != nil {
		t.Fatalf("PubSub again: %v", err)
	}
	if err := ps.Subscribe(ctx, "dt-ps"); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	got, confirmed := make(chan error, 1), make(chan struct{})
	go func() {
		for {
			m, err := ps.Receive(ctx)
			if err == nil && m.Kind == "subscribe" {
				close(confirmed) // the next Receive waits: nothing is published
				continue
			}
			if err != nil || m.Kind != "pong" {
				got <- err
				return
			}
		}
	}()
	select {
	case <-confirmed:
	case err := <-got:
		t.Fatalf("Receive after Subscribe: %v; want the confirmation", err)
	}
	ps.Close()
	select {
	case err := <-got:
		if err == nil {
			t.Error("Receive after Close: a message, want an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not make a Receive in progress return")
	}
	if _, err := receive(time.Second); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Receive after Close: %v, want ErrClosed", err)
	}
	if err := ps.Subscribe(ctx, "dt-ps"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	ps.Close() // a second Close does no harm
}

// hubAfterRestart: dlock's pub/sub hub on conn subscribes again (to
// hundreds of channels at once) after the server srv restarted, and after
// it was down a while, and each time wakes its waiter to ask Redis again
// (a release may have been missed); Close ends its reconnection at once.
func hubAfterRestart(t *testing.T, srv *redistest.Server, conn driver.Conn) {
	ctx := ctxFor(t, 60*time.Second)
	h := pubsub.New(conn, false)
	defer h.Close()
	wake := make(chan int64, 1)
	w, ready := h.Subscribe("dt-hub", "a", wake)
	defer w.Close()
	listening := func(want bool) {
		t.Helper()
		if !eventually(10*time.Second, func() bool { return h.Listening("dt-hub") == want }) {
			t.Fatalf("Listening still %v after 10s", !want)
		}
	}
	woken := func(want int64) {
		t.Helper()
		select {
		case got := <-wake:
			if got != want {
				t.Fatalf("woken with %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("not woken within 10s, want %d", want)
		}
	}
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription was never confirmed")
	}
	for i := range 300 { // subscribed again in one command, with many confirmations
		others := make(chan int64, 1)
		ow, _ := h.Subscribe(fmt.Sprint("dt-hub-", i), "a", others)
		defer ow.Close()
	}
	srv.Restart()
	woken(pubsub.Recheck)
	listening(true)
	if !eventually(10*time.Second, func() bool { return h.Listening("dt-hub-299") }) {
		t.Fatal("not all channels subscribed again after the restart")
	}
	if _, err := srv.Do(ctx, "PUBLISH", "dt-hub", pubsub.WakeAll); err != nil {
		t.Fatal(err)
	}
	woken(pubsub.Released)
	srv.Kill()
	listening(false)
	srv.Restart()
	woken(pubsub.Recheck)
	listening(true)
	srv.Kill()
	listening(false)
	start := time.Now()
	h.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close of a hub connecting again to a dead server took %v", d)
	}
}

// hubThroughProxy starts a server, and dlock's pub/sub hub on s's Conn
// through a proxy to it, with a waiter on "dt-health" whose subscription
// is confirmed; the hub and waiter are closed in t's cleanup.
func hubThroughProxy(t *testing.T, s Setup) (*redistest.Server, *redistest.Proxy, *pubsub.Hub, chan int64) {
	t.Helper()
	srv := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, srv.Addr())
	h := pubsub.New(s.Server(t, p.Addr()), false)
	t.Cleanup(h.Close)
	wake := make(chan int64, 1)
	w, ready := h.Subscribe("dt-health", "a", wake)
	t.Cleanup(w.Close)
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("subscription not confirmed")
	}
	return srv, p, h, wake
}

// releaseReaches publishes a release on "dt-health" straight to srv and
// waits up to d for it to wake the waiter.
func releaseReaches(t *testing.T, srv *redistest.Server, wake chan int64, d time.Duration) {
	t.Helper()
	if _, err := srv.Do(context.Background(), "PUBLISH", "dt-health", pubsub.WakeAll); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-wake:
		if got != pubsub.Released {
			t.Fatalf("woken with %d, want Released", got)
		}
	case <-time.After(d):
		t.Fatal("a release did not reach the waiter")
	}
}

// quietKeptStalledLetGo: the hub on a quiet pub/sub connection whose PINGs
// are answered keeps it past the health check (30s); one that takes a PING
// and answers nothing is let go, and once the network is back its waiter
// is woken (Recheck) and a release reaches it.
func quietKeptStalledLetGo(t *testing.T, s Setup) {
	if testing.Short() {
		t.Skip("waits past the health check three times")
	}
	srv, p, h, wake := hubThroughProxy(t, s)
	select { // (past one health check: pinged, answered)
	case got := <-wake:
		t.Fatalf("a quiet, healthy connection: woken with %d", got)
	case <-time.After(45 * time.Second):
	}
	if !h.Listening("dt-health") {
		t.Fatal("a quiet, healthy connection was let go")
	}
	p.Stall()
	if !eventually(90*time.Second, func() bool { return !h.Listening("dt-health") }) {
		t.Fatal("the hub still listens on a connection that answers nothing")
	}
	p.Cut()
	select {
	case got := <-wake:
		if got != pubsub.Recheck {
			t.Fatalf("woken with %d, want Recheck", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not woken once the network was back")
	}
	releaseReaches(t, srv, wake, 10*time.Second)
}

// latePongKept: a PING whose reply comes late, but within 10s, keeps the
// hub's connection: its waiter is not woken, and a release still reaches
// it.
func latePongKept(t *testing.T, s Setup) {
	if testing.Short() {
		t.Skip("waits past the health check")
	}
	srv, p, h, wake := hubThroughProxy(t, s)
	p.Delay(0, 8*time.Second)
	select {
	case got := <-wake:
		t.Fatalf("woken with %d: a connection whose PING was answered late was let go", got)
	case <-time.After(60 * time.Second):
	}
	if !h.Listening("dt-health") {
		t.Fatal("not listening on a connection that answers late")
	}
	releaseReaches(t, srv, wake, 15*time.Second)
}

// watchLoss: with WatchLoss, a holder is told at once (its lease time is
// 30s, its next extension 10s away) of a DEL of its key (keyspace
// notifications on), of a ForceRelease, and of a restart that lost it.
func watchLoss(t *testing.T, srv *redistest.Server, c *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	for _, end := range []struct {
		what    string
		channel func(l *dlock.Lock) string // what the holder must listen to first
		do      func(l *dlock.Lock) error
	}{
		{"a DEL", func(l *dlock.Lock) string { return "__keyspace@0__:" + l.Key() }, func(l *dlock.Lock) error {
			_, err := srv.Do(ctx, "DEL", l.Key())
			return err
		}},
		{"a ForceRelease", func(l *dlock.Lock) string { return l.Key() + ":ch" }, func(l *dlock.Lock) error {
			_, err := c.ForceRelease(ctx, l.Name())
			return err
		}},
		{"a restart", func(l *dlock.Lock) string { return l.Key() + ":ch" }, func(*dlock.Lock) error {
			srv.Restart()
			return nil
		}},
	} {
		l, err := c.TryAcquire(ctx, "dt-watch-"+strings.Fields(end.what)[1])
		if err != nil {
			t.Fatal(err)
		}
		ch := end.channel(l)
		if !eventually(10*time.Second, func() bool {
			n, _ := srv.Do(ctx, "PUBSUB", "NUMSUB", ch)
			v, _ := n.([]any)
			return len(v) == 2 && v[1] == int64(1)
		}) {
			t.Fatalf("%s: not subscribed after 10s", ch)
		}
		start := time.Now()
		if err := end.do(l); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Logf("%s told in %v", end.what, time.Since(start).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not told within 5s (the next extension is 10s away)", end.what)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("after %s: Err() = %v, want ErrNotHeld", end.what, err)
		}
		l.Release(ctx)
	}
}

// brokenPubSub runs WokenAfterBreak on wconn through p, in mode m.
func brokenPubSub(t *testing.T, p *redistest.Proxy, wconn *scriptCount, direct driver.Conn, m mode) {
	ctx := ctxFor(t, 60*time.Second)
	opts := append([]dlock.Option{dlock.LeaseTTL(30 * time.Second)}, m.opts...)
	name := "dt-broken-" + m.name
	channel := "dlock:{" + name + "}:ch"
	WokenAfterBreak(t, p, client(t, wconn, opts...), client(t, direct, opts...), name, func() bool {
		v, _ := direct.Do(ctx, "pubsub", "numsub", channel)
		r, _ := v.([]any)
		return wconn.n.Load() >= 2 && len(r) == 2 && r[1] == int64(1)
	})
}

// WokenAfterBreak checks that a waiter whose pub/sub connection stalls
// while the holder releases (the release's message is held, then lost when
// the connection is cut) asks Redis again once the connection is back and
// subscribed again. w, whose connections go through p, waits for name,
// which h takes; listening reports that w tried, subscribed and tried
// again. The Clients' TTL and backoff make w's own timer 10s or more: w
// must take the lock within 3s of the cut.
func WokenAfterBreak(t *testing.T, p *redistest.Proxy, w, h *dlock.Client, name string, listening func() bool) {
	t.Helper()
	ctx := ctxFor(t, 60*time.Second)
	l, err := h.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		m, err := w.Acquire(wctx, name)
		if err == nil {
			err = m.Release(ctx)
		}
		got <- err
	}()
	if !eventually(5*time.Second, listening) {
		t.Fatal("the waiter never began to listen")
	}
	p.Stall()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool {
		info, err := h.Inspect(ctx, name)
		return err == nil && info.Token != l.Token()
	}) {
		t.Fatal("the release never ran")
	}
	p.Cut()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Error("the waiter did not take the lock within 3s of its pub/sub connection's return")
		<-got
	}
}

// lostDowngrade: a Downgrade whose reply is lost took effect; the hold's
// Release then ends its read, and a writer gets in at once, not after the
// lease.
func lostDowngrade(t *testing.T, p *redistest.Proxy, a, b *dlock.Client) {
	ctx := ctxFor(t, 60*time.Second)
	rwa, err := a.RWMutex("dt-lost-rw")
	if err != nil {
		t.Fatal(err)
	}
	w, err := rwa.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.StallReplies()
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = rwa.Downgrade(dctx, w)
	cancel()
	p.Cut()
	if err == nil {
		t.Fatal("Downgrade succeeded with its reply stalled")
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("Release after a Downgrade whose reply was lost: %v", err)
	}
	rwb, err := b.RWMutex("dt-lost-rw")
	if err != nil {
		t.Fatal(err)
	}
	l, err := rwb.Writer().TryAcquire(ctx)
	if err != nil {
		hs, _ := rwb.Holders(ctx)
		t.Fatalf("a writer after the release: %v (holders %+v)", err, hs)
	}
	l.Release(ctx)
}

// sentinel: locks through a Sentinel-managed master, a waiter woken; the
// master killed, and locks taken again on the promoted replica.
func sentinel(t *testing.T, s Setup) {
	ctx := ctxFor(t, 3*time.Minute)
	fast := redistest.Args("--repl-diskless-sync-delay", "0")
	master := redistest.Start(t, redistest.TCP(), fast)
	replica := redistest.Start(t, redistest.TCP(), fast, redistest.Args("--replicaof", "127.0.0.1", fmt.Sprint(master.Port())))
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.Start(t, redistest.Sentinel("m", master.Port(), 2, 500*time.Millisecond, 3*time.Second)).Addr())
	}
	if !eventually(30*time.Second, func() bool {
		v, err := replica.Do(ctx, "INFO", "replication")
		return err == nil && strings.Contains(fmt.Sprint(v), "master_link_status:up")
	}) {
		t.Fatal("the replica never synced")
	}
	a, b := client(t, s.Sentinel(t, "m", addrs)), client(t, s.Sentinel(t, "m", addrs))
	l, err := a.Acquire(ctx, "dt-sen")
	if err != nil {
		t.Fatal(err)
	}
	woken(t, l, func(ctx context.Context) (*dlock.Lock, error) { return b.Acquire(ctx, "dt-sen") })
	master.Kill()
	// Each Client's connection learns of the promotion on its own.
	if !eventually(60*time.Second, func() bool {
		for _, c := range []*dlock.Client{a, b} {
			l, err := c.TryAcquire(ctx, "dt-sen-after")
			if err != nil {
				return false
			}
			l.Release(ctx)
		}
		return true
	}) {
		t.Fatal("no lock taken through the Sentinels within 60s of the master's death")
	}
	l, err = a.Acquire(ctx, "dt-sen2")
	if err != nil {
		t.Fatal(err)
	}
	woken(t, l, func(ctx context.Context) (*dlock.Lock, error) { return b.Acquire(ctx, "dt-sen2") })
}

// eventually reports whether ok held within d, polling.
func eventually(d time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
