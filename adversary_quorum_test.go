package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

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

// A waiter polling a lock held by another, with one quorum node dead: every
// refused attempt is "undone", and the undo fails on the dead node, so it is
// retried in the background for the TTL. How many goroutines pile up, and do
// they outlive Acquire?
func TestQuorumAttackUndoGoroutinePileUp(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	ttl := 10 * time.Second
	holder := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(ttl))
	l, err := holder.TryAcquire(ctx, "pile")
	if err != nil {
		t.Fatal(err)
	}
	srvs[2].Kill()
	base := countGoroutines("undoUntil")
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
	after := countGoroutines("undoUntil") - base
	t.Logf("undoUntil goroutines 3s after 10 Acquire waits of 1.5s each were refused throughout (no node ever granted): %d", after)
	later := countGoroutines("undoUntil") - base
	t.Logf("... and at the next count: %d", later)
	if after > 5 {
		t.Errorf("%d background undo goroutines left behind by one Acquire that was refused on every answering node (nothing to undo)", after)
	}
	l.Release(ctx)
	// let the goroutines drain so the leakcheck does not fire
	waitFor(12*time.Second, func() bool { return countGoroutines("undoUntil") <= base })
}

// Quorum + pipelining: requests to two nodes are delayed past the per-node
// timeout; the grants land after the attempt was declared failed. Nothing
// may stay behind, and another client must get the lock.
func TestQuorumAttackLateGrantsAfterFailedQuorum(t *testing.T) {
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
func TestQuorumAttackQuorumExclusionUnderJitter(t *testing.T) {
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
func TestQuorumAttackDelayedShortExtendAfterLongExtend(t *testing.T) {
	ps, via, direct := proxiedQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(3*time.Second), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.Delay(500*time.Millisecond, 0)
	}
	// One attempt, or two: Extend retries a Redis error while its ctx lasts.
	sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	if err := l.Extend(sctx, 1*time.Second); err == nil {
		t.Logf("delayed Extend(1s) reported success?")
	}
	cancel()
	for _, p := range ps {
		p.Delay(0, 0)
	}
	if err := l.Extend(ctx, 8*time.Second); err != nil {
		t.Fatalf("Extend(8s) = %v", err)
	}
	time.Sleep(800 * time.Millisecond) // the delayed Extend(1s) has landed
	long := 0                          // the lease is safe while a majority keeps the longer expiry
	for i, d := range direct {
		pttl := d.PTTL(ctx, "dlock:{ext}").Val()
		t.Logf("node %d PTTL = %v", i, pttl)
		if pttl >= 5*time.Second {
			long++
		}
	}
	if long < 2 {
		t.Errorf("%d of 3 nodes keep the Extend(8s) expiry after the old Extend(1s) landed; the holder believes %v", long, time.Until(l.ValidUntil()))
	}
	l.Release(ctx)
}

// A failed attempt's undo retries in the background while the same Lock
// goes on with a new token and gets the lock: the new lease must survive
// all retries of the old token's undo.
func TestQuorumAttackUndoRetriesDoNotTouchNewLease(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	ttl := 3 * time.Second
	holder := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(ttl))
	h, err := holder.TryAcquire(ctx, "newtok")
	if err != nil {
		t.Fatal(err)
	}
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
	// for the old undos' lifetime, the new lease must stay on the nodes
	for end := time.Now().Add(ttl + 500*time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		info, err := waiter.Inspect(ctx, "newtok")
		if err != nil || !info.Held || info.Token != l.Token() {
			t.Fatalf("new lease gone while old undos retried: %+v %v", info, err)
		}
	}
	l.Release(ctx)
}

// A release queued in a node's batcher behind in-flight pipelines is
// abandoned at the node timeout and never sent: the node keeps the lease.
func TestQuorumAttackQueuedReleaseNeverSent(t *testing.T) {
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

// Owner views: nested Do of another owner waits, bounded by ctx; views of
// the same owner re-enter; Owner of an Owner is the new owner.
func TestQuorumAttackOwnerViews(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(2*time.Second))
	a, _ := c.Owner("a")
	b, _ := c.Owner("b")
	ab, _ := a.Owner("b")
	err := a.Do(ctx, "own", func(ctx context.Context, l *dlock.Lock) error {
		// same owner again, from another goroutine: re-enters
		errc := make(chan error, 1)
		go func() {
			a2, _ := c.Owner("a")
			l2, err := a2.TryAcquire(ctx, "own")
			if err == nil {
				err = l2.Release(ctx)
			}
			errc <- err
		}()
		if err := <-errc; err != nil {
			t.Errorf("same owner re-entry from another view = %v", err)
		}
		// owner b (through a's Owner) must not re-enter
		if l3, err := ab.TryAcquire(ctx, "own"); err == nil {
			l3.Release(ctx)
			t.Errorf("a.Owner(\"b\") re-entered a's hold")
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := b.Do(dctx, "own", func(context.Context, *dlock.Lock) error {
			t.Errorf("b's nested Do ran inside a's hold")
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("b's nested Do = %v after %v, want the deadline promptly", err, time.Since(start))
		}
		// release order: inner released after outer ends is checked by Do
		inner, err := a.TryAcquire(ctx, "own")
		if err != nil {
			t.Fatalf("inner = %v", err)
		}
		defer func() {
			if err := inner.Release(ctx); err != nil {
				t.Errorf("inner release after the outer Do's lock... = %v", err)
			}
		}()
		return nil
	})
	if err != nil {
		t.Errorf("Do = %v", err)
	}
	// outer released by Do, the inner hold released after it (defer inside fn
	// runs before Do's release). Now check the lock is free.
	if l, err := b.TryAcquire(ctx, "own"); err != nil {
		t.Errorf("after both holds ended, b TryAcquire = %v", err)
	} else {
		l.Release(ctx)
	}
	// inner outliving the outer
	o1, err := a.TryAcquire(ctx, "own2")
	if err != nil {
		t.Fatal(err)
	}
	o2, err := a.TryAcquire(ctx, "own2")
	if err != nil {
		t.Fatal(err)
	}
	if err := o1.Release(ctx); err != nil {
		t.Errorf("outer release = %v", err)
	}
	if _, err := b.TryAcquire(ctx, "own2"); err == nil {
		t.Errorf("b got own2 while a's inner hold is live")
	}
	if err := o2.Release(ctx); err != nil {
		t.Errorf("inner release = %v", err)
	}
	if l, err := b.TryAcquire(ctx, "own2"); err != nil {
		t.Errorf("after inner release b TryAcquire = %v", err)
	} else {
		l.Release(ctx)
	}
}

// A release that fails on one node (its connection cut while the request
// was held) is retried there in the background: Release reports success
// once a majority let go, and the node that missed it must not keep the
// lock until the lease expires (with one more node down, nobody could take
// it).
func TestQuorumReleaseRetriedOnANodeThatFailed(t *testing.T) {
	ps, via, direct := proxiedQuorum(t, 3)
	ctx := t.Context()
	ttl := 20 * time.Second
	c := newRedlock(t, via, 100*time.Millisecond, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
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
