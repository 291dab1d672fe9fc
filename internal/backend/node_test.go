package backend

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/redistest"
)

// infoConn is a driver's Conn that only says what it is; nothing is sent.
type infoConn struct {
	driver.Conn
	info driver.Info
}

func (c infoConn) Info() driver.Info { return c.info }

// Both constructors of a Node ask a lost reply again unless the client is
// configured never to send a command again (a driver that says nothing
// gets the retry), announce with SPUBLISH on a Cluster, and count the
// append-only file as one acknowledgement more with durable grants; a
// driver's Node watches no Cluster's clock (which master read it is
// unknown), go-redis's does.
func TestNodeTakesRetriesAndPublishFromItsClient(t *testing.T) {
	t.Parallel()
	hook := &ClockHook{On: func() bool { return true }}
	for _, c := range []struct {
		name                    string
		n                       Node
		retries, clock, sharded bool
		replicas                int
	}{
		{"go-redis", NewNode(redis.NewClient(&redis.Options{}), Config{Clock: hook}), true, true, false, 0},
		{"go-redis without retries", NewNode(redis.NewClient(&redis.Options{MaxRetries: -1}), Config{Clock: hook}), false, true, false, 0},
		{"go-redis Cluster", NewNode(redis.NewClusterClient(&redis.ClusterOptions{MaxRetries: 3}), Config{Sharded: true, Clock: hook}), true, true, true, 0},
		// (a Cluster client sends a command again up to MaxRedirects times;
		// its MaxRetries is -1 unless set)
		{"go-redis Cluster with its defaults", NewNode(redis.NewClusterClient(&redis.ClusterOptions{}), Config{Sharded: true, Clock: hook}), true, true, true, 0},
		{"go-redis Cluster without redirects", NewNode(redis.NewClusterClient(&redis.ClusterOptions{MaxRedirects: -1}), Config{Sharded: true, Clock: hook}), false, true, true, 0},
		{"go-redis with replica ack and durable grants",
			NewNode(redis.NewClient(&redis.Options{}), Config{Replicas: 2, Durable: time.Second}), true, false, false, 3},
		{"a driver that says nothing", NewNodeFrom(infoConn{}, Config{Clock: hook}), true, true, false, 0},
		{"a driver whose client never sends again", NewNodeFrom(infoConn{info: driver.Info{NoRetry: true}}, Config{Clock: hook, Replicas: 1}), false, true, false, 1},
		{"a driver's Cluster", NewNodeFrom(infoConn{info: driver.Info{Cluster: true}}, Config{Sharded: true, Clock: hook}), true, false, true, 0},
		{"a driver's Cluster announcing with PUBLISH", NewNodeFrom(infoConn{info: driver.Info{Cluster: true}}, Config{Clock: hook}), true, false, false, 0},
	} {
		pub := "PUBLISH"
		if c.sharded {
			pub = "SPUBLISH"
		}
		if c.n.retries != c.retries || (c.n.clock != nil) != c.clock || c.n.pub != pub || c.n.replicas != c.replicas {
			t.Errorf("%s: retries %v, clock watched %v, %v, replicas %d; want %v, %v, %s, %d",
				c.name, c.n.retries, c.n.clock != nil, c.n.pub, c.n.replicas, c.retries, c.clock, pub, c.replicas)
		}
	}
}

// The fair scripts' packed arguments, built once, carry the fence window
// set last (a quorum node's is a day) and the Client's TTL.
func TestFairArgumentsCarryTheFenceWindowSetLast(t *testing.T) {
	t.Parallel()
	n := NewNode(redis.NewClient(&redis.Options{}), Config{TTL: 2 * time.Second, Sharded: true})
	for _, c := range []struct {
		window   time.Duration
		acq, rel string
	}{
		{fenceWindow, "2000 SPUBLISH 60000", "SPUBLISH 60000"},
		{quorumFenceWindow, "2000 SPUBLISH 86400000", "SPUBLISH 86400000"},
	} {
		n.setFenceWindow(c.window)
		if n.fair.acquire != c.acq || n.fair.release != c.rel || n.fenceMS != c.window.Milliseconds() {
			t.Errorf("window %v: %q, %q, fence %v; want %q, %q", c.window, n.fair.acquire, n.fair.release, n.fenceMS, c.acq, c.rel)
		}
	}
	if got, want := n.fairConf(time.Hour), "60000 SPUBLISH 86400000"; got != want {
		t.Errorf("an acquire of an hour: %q, want %q", got, want)
	}
}

// A quorum's nodes carry its fence window in their fair scripts'
// arguments, and the Nodes it was made from keep their own: the quorum
// sets the window on copies, which share nothing a copy's change reaches.
func TestAQuorumsFenceWindowLeavesItsGivenNodesOwn(t *testing.T) {
	t.Parallel()
	n := NewNode(redis.NewClient(&redis.Options{}), Config{TTL: 2 * time.Second})
	q := NewQuorum([]Node{n, n}, time.Second, new(Tracker))
	if n.fenceMS != fenceWindow.Milliseconds() || n.fair.acquire != "2000 PUBLISH 60000" || n.fair.release != "PUBLISH 60000" {
		t.Errorf("the given Node after NewQuorum: fence %v, %q, %q; want its own window's", n.fenceMS, n.fair.acquire, n.fair.release)
	}
	for i, qn := range q.nodes {
		if qn.fenceMS != quorumFenceWindow.Milliseconds() || qn.fair.acquire != "2000 PUBLISH 86400000" || qn.fair.release != "PUBLISH 86400000" {
			t.Errorf("quorum node %d: fence %v, %q, %q; want the quorum's window", i, qn.fenceMS, qn.fair.acquire, qn.fair.release)
		}
	}
}

// A Node that does not watch the clock ignores a server time an
// extension's reply carries, rather than failing on its missing watch.
func TestUnwatchedClockIgnoresAReading(t *testing.T) {
	t.Parallel()
	var w *clockWatch
	w.read(t.Context(), "k", time.Second, 1, time.Now(), time.Now())
	if w.on() {
		t.Error("an unwatched clock is on")
	}
}

// A clock hook that turns on and off while extensions run: each extension
// succeeds whether or not its reply carried the server's time, a steady
// clock is never told of, and the readings race with nothing.
func TestExtendWhileTheClockHookTurnsOnAndOff(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	var on atomic.Bool
	var told atomic.Int32
	hook := &ClockHook{On: on.Load, Margin: func(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond },
		Tell: func(context.Context, string, string, time.Duration, time.Duration) { told.Add(1) }}
	ctx := t.Context()
	for _, kind := range []Kind{PlainLock, FairLock} {
		n := NewNode(rdb, Config{TTL: 10 * time.Second, Clock: hook})
		c := &Claim{Keys: KeysFor("dlock:", "toggled-"+kind.what()), Kind: kind}
		c.SetToken("tok")
		if g, err := n.Acquire(ctx, c, 10*time.Second, false); err != nil || !g.Held {
			t.Fatalf("%s: acquire = %+v, %v", kind.what(), g, err)
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
					on.Store(!on.Load())
					runtime.Gosched()
				}
			}
		})
		for w := range 4 {
			wg.Go(func() {
				for i := range 50 {
					if ok, err := n.Extend(ctx, c, 10*time.Second, 0); !ok || err != nil {
						t.Errorf("%s: extension %d.%d = %v, %v; want true, nil", kind.what(), w, i, ok, err)
						return
					}
				}
			})
		}
		time.Sleep(10 * time.Millisecond)
		for range 50 { // (and some with the hook on throughout, for baselines)
			on.Store(true)
			if ok, err := n.Extend(ctx, c, 10*time.Second, 0); !ok || err != nil {
				t.Errorf("%s: extension = %v, %v; want true, nil", kind.what(), ok, err)
			}
		}
		close(done)
		wg.Wait()
		if ok, err := n.Release(ctx, c); !ok || err != nil {
			t.Errorf("%s: release = %v, %v", kind.what(), ok, err)
		}
	}
	if n := told.Load(); n != 0 {
		t.Errorf("told %d times of a steady clock, want never", n)
	}
}
