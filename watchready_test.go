package dlock_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A watched lease (WatchLoss) is returned once its lock's channel is
// subscribed: a request or a ForceRelease sent as soon as the acquisition
// returns is heard, on a name nobody waited on (no subscription to share).

// rightAway is how many fresh names each of these tests takes and asks at
// once: without the wait, most requests were lost.
const rightAway = 50

// askRightAway takes rightAway fresh names "<prefix>-<i>" with take, one
// after another, has asker request each release as soon as take returns,
// and fails unless the holder hears it.
func askRightAway(t *testing.T, asker *dlock.Client, prefix string, take func(name string) (*dlock.Lock, error)) {
	t.Helper()
	ctx := t.Context()
	for i := range rightAway {
		name := fmt.Sprintf("%s-%d", prefix, i)
		l, err := take(name)
		if err != nil {
			t.Fatalf("taking %s: %v", name, err)
		}
		if err := asker.RequestRelease(ctx, name, "now"); err != nil {
			t.Fatalf("RequestRelease(%s) = %v", name, err)
		}
		if got := heard(l); got != "now" {
			t.Fatalf("%s: a request sent right after the acquisition returned was not heard (got %q)", name, got)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%s) = %v", name, err)
		}
	}
}

// watchedAndAsker starts a server and returns a Client of it whose leases
// are watched, another on its own connection (another process, in
// effect) and a client of the server; the Clients are closed in cleanup.
func watchedAndAsker(t *testing.T) (c, asker *dlock.Client, rdb *redis.Client) {
	t.Helper()
	s, rdb := setup(t)
	c = newClient(t, rdb, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true))
	asker = newClient(t, s.Client(t))
	t.Cleanup(func() {
		c.Close(context.Background())
		asker.Close(context.Background())
	})
	return c, asker, rdb
}

func TestReleaseRequestRightAfterAcquireIsHeard(t *testing.T) {
	t.Parallel()
	c, asker, rdb := watchedAndAsker(t)
	ctx := t.Context()
	plain := newClient(t, rdb, dlock.WithAutoExtend(false)) // takes the leases a resume takes over
	defer plain.Close(ctx)
	for _, tc := range []struct {
		what string
		take func(name string) (*dlock.Lock, error)
	}{
		{"acquire", func(name string) (*dlock.Lock, error) { return c.Acquire(ctx, name) }},
		{"try", func(name string) (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }},
		{"permit", func(name string) (*dlock.Lock, error) {
			sem, err := c.Semaphore(name, 2)
			if err != nil {
				return nil, err
			}
			return sem.Acquire(ctx)
		}},
		{"read", func(name string) (*dlock.Lock, error) {
			rw, err := c.RWMutex(name)
			if err != nil {
				return nil, err
			}
			return rw.Reader().Acquire(ctx)
		}},
		{"resume", func(name string) (*dlock.Lock, error) {
			old, err := plain.TryAcquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return c.TryAcquire(ctx, name, dlock.Resume(old.Token()))
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			askRightAway(t, asker, "asked-at-once-"+tc.what, tc.take)
		})
	}
}

func TestReleaseRequestAtTheStartOfDoIsHeard(t *testing.T) {
	t.Parallel()
	c, asker, _ := watchedAndAsker(t)
	ctx := t.Context()
	for i := range rightAway {
		name := fmt.Sprintf("asked-in-do-%d", i)
		err := c.Do(ctx, name, func(ctx context.Context, l *dlock.Lock) error {
			if err := asker.RequestRelease(ctx, name, "now"); err != nil {
				return err
			}
			if got := heard(l); got != "now" {
				return fmt.Errorf("a request sent at the start of fn was not heard (got %q)", got)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Do(%s) = %v", name, err)
		}
	}
}

// A ForceRelease right after the acquisition returns is told at once, not
// at the next extension (TTL/3 later): keyspace notifications are off, so
// the lock's own channel tells it. The holder's requests cross a proxy
// that delays them, its SUBSCRIBE included; the ForceRelease does not.
func TestWatchLossTellsAForceReleaseRightAfterAcquire(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer c.Close(ctx)
	other := newClient(t, s.Client(t))
	defer other.Close(ctx)
	p.Delay(20*time.Millisecond, 0)
	for i := range 10 {
		name := fmt.Sprintf("forced-at-once-%d", i)
		l, err := c.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire(%s) = %v", name, err)
		}
		start := time.Now()
		if ok, err := other.ForceRelease(ctx, name); !ok || err != nil {
			t.Fatalf("ForceRelease(%s) = %v, %v, want true, nil", name, ok, err)
		}
		expectLossTold(t, l, start, "a ForceRelease right after Acquire")
	}
}

// A pub/sub connection that does not answer delays a watched acquisition
// by the bound of its wait only (1s with a TTL of 30s), far less than the
// connection's own timeout (10s); the lease is held, and its watch comes
// up once the connection is back.
func TestWatchedAcquireDoesNotWaitOutAStalledPubSubConnection(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	// The connections made from now on go through the proxy: the pub/sub
	// connection opened after the warm-up is the one stalled.
	var viaProxy atomic.Bool
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 30 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if viaProxy.Load() {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { rdb.Close() })
	direct := s.Client(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(lossTTL), dlock.WatchLoss(true))
	defer c.Close(ctx)
	asker := newClient(t, direct)
	defer asker.Close(ctx)

	// Warm up: scripts loaded, the database learnt, then the pub/sub
	// connection closed once its channel lingered out.
	warm, err := c.Acquire(ctx, "stalled-warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool {
		return direct.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Val() == ""
	}) {
		t.Fatal("the pub/sub connection was not closed 5s after its last channel was released")
	}

	viaProxy.Store(true)
	p.Stall()
	start := time.Now()
	l, err := c.Acquire(ctx, "stalled")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Acquire with the pub/sub connection stalled = %v", err)
	}
	t.Logf("Acquire with the pub/sub connection stalled returned after %v", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("Acquire with the pub/sub connection stalled took %v, want its wait bounded by 1s", took)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lease returned past the bound: Err() = %v", err)
	}
	p.Cut() // the stall ends; the hub connects again
	if got := askUntilHeard(t, asker, l, "after the stall"); got != "after the stall" {
		t.Errorf("once the connection was back, the holder heard %q", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}
