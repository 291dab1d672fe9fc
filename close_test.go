package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// TestCloseWhileWaitingHandsOutNoLock: an Acquire waiting when Close is called must
// not come back with a Lock once the lock is free: acquisitions after Close
// fail with ErrClosed, and a Lock taken after Close is never extended.
func TestCloseWhileWaitingHandsOutNoLock(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			_, rdb := setup(t)
			holder := newClient(t, rdb)
			c := newClient(t, rdb, waiting(fair))
			l, err := holder.TryAcquire(t.Context(), "close-wait")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			type result struct {
				l   *dlock.Lock
				err error
			}
			res := make(chan result, 1)
			go func() {
				l, err := c.Acquire(ctx, "close-wait")
				res <- result{l, err}
			}()
			waitSubscribed(t.Context(), t, c, rdb)
			cctx, ccancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer ccancel()
			if err := c.Close(cctx); err != nil {
				t.Errorf("Close = %v; want nil", err)
			}
			l.Release(t.Context())
			select {
			case r := <-res:
				if r.err == nil {
					r.l.Release(t.Context())
					t.Fatalf("Acquire waiting across Close = a Lock (nil error); want ErrClosed")
				}
				if !errors.Is(r.err, dlock.ErrClosed) {
					t.Errorf("Acquire waiting across Close = %v; want ErrClosed", r.err)
				}
			case <-time.After(6 * time.Second):
				t.Fatal("Acquire waiting across Close never returned; want ErrClosed")
			}
		})
	}
}

// TestCloseWithRedisFrozenHonoursCtx: Close with a frozen Redis and a
// waiter subscribed returns by its ctx's deadline (plus slack), not at
// go-redis's timeouts.
func TestCloseWithRedisFrozenHonoursCtx(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	holder := newClient(t, s.Client(t))
	c := newClient(t, rdb, dlock.WithUnfair(nil))
	l, err := holder.TryAcquire(t.Context(), "close-frozen", dlock.LeaseTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "close-frozen")
		done <- err
	}()
	waitSubscribed(t.Context(), t, c, rdb)
	s.Pause()
	defer s.Resume()
	cctx, ccancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer ccancel()
	start := time.Now()
	cerr := c.Close(cctx)
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Close with a frozen Redis took %v (err %v); want about its ctx's 300ms", took, cerr)
	}
	s.Resume()
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		t.Error("Acquire never returned after Close and its ctx's end")
	}
}

// TestCloseWakesAWaiterAtOnce: an Acquire waiting (with no deadline of its own)
// while the lock stays held returns soon after Close, not at the next poll of
// its queue entry, which comes seconds later.
func TestCloseWakesAWaiterAtOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	holder := newClient(t, rdb)
	c := newClient(t, rdb)
	l, err := holder.TryAcquire(t.Context(), "close-wake")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "close-wake")
		if err == nil {
			l.Release(t.Context())
		}
		res <- err
	}()
	waitSubscribed(t.Context(), t, c, rdb)
	start := time.Now()
	if err := c.Close(t.Context()); err != nil {
		t.Errorf("Close = %v; want nil", err)
	}
	select {
	case err := <-res:
		if took := time.Since(start); took > time.Second || !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("waiting Acquire returned %v, %v after Close; want ErrClosed within 1s", err, took.Round(time.Millisecond))
		}
	case <-time.After(9 * time.Second):
		t.Error("waiting Acquire never returned after Close; want ErrClosed within 1s")
	}
}

// TestCloseDuringDoStopsExtending: Close while a Do's fn runs, twice, concurrently
// with an Extend: the lock is not extended any more, fn's ctx ends at the
// validity (a loss), Do's release still runs and nothing is left.
func TestCloseDuringDoStopsExtending(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second), dlock.MaxHold(10*time.Second))
	var wg sync.WaitGroup
	var key string
	start := time.Now()
	err := c.Do(t.Context(), "close-do", func(ctx context.Context, l *dlock.Lock) error {
		key = l.Key()
		if d, ok := l.Deadline(); !ok || time.Until(d) < 9*time.Second {
			t.Errorf("Deadline = %v, %v; want the Client's MaxHold(10s)", d, ok)
		}
		for range 2 {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if err := c.Close(cctx); err != nil {
					t.Errorf("Close = %v; want nil", err)
				}
			})
		}
		wg.Go(func() { l.Extend(context.Background(), time.Second) })
		wg.Wait()
		select {
		case <-ctx.Done():
		case <-time.After(6 * time.Second):
			return errors.New("fn's ctx still open 6s after Close")
		}
		return nil
	})
	if took := time.Since(start); !errors.Is(err, dlock.ErrNotHeld) || took > 5*time.Second {
		t.Errorf("Do across Close = %v after %v; want ErrNotHeld at the lease's validity", err, took)
	}
	if n := liveKeys(t.Context(), rdb, key); n != 0 {
		t.Errorf("%d live key(s) after Do; want 0", n)
	}
	if _, err := c.Acquire(t.Context(), "close-do"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v; want ErrClosed", err)
	}
	// Per call, MaxHold(0) lifts the Client's cap (on a fresh Client).
	c2 := newClient(t, rdb, dlock.MaxHold(time.Second))
	l, err := c2.TryAcquire(t.Context(), "close-do2", dlock.MaxHold(0))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := l.Deadline(); ok {
		t.Errorf("Deadline with a per-call MaxHold(0) = %v; want none", d)
	}
	l.Release(t.Context())
	if _, err := c2.TryAcquire(t.Context(), "close-do2", dlock.MaxHold(time.Millisecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquire(MaxHold(1ms)) = %v; want ErrInvalid", err)
	}
	c2.Close(t.Context())
}

// TestCloseRemovesAFairWaitersQueueEntry: Close wakes a fair Acquire that waits in the
// queue (ErrClosed); Close "waits for the background clean-up", so once it
// returns the waiter's queue entry is gone, and the go-redis client may be
// closed (the documented lifecycle) without leaving an entry behind that
// the lock would be handed to.
func TestCloseRemovesAFairWaitersQueueEntry(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	holder := newClient(t, rdb)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const name = "close-queue"
	l, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rdb2 := s.Client(t)
	c := newClient(t, rdb2, dlock.LeaseTTL(2*time.Second))
	res := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		if err == nil {
			l.Release(ctx)
		}
		res <- err
	}()
	if !waitFor(3*time.Second, func() bool {
		info, err := holder.Inspect(ctx, name)
		return err == nil && info.Queued == 1
	}) {
		t.Fatal("the waiter never queued")
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	queuedAtClose := -1
	if info, err := holder.Inspect(ctx, name); err == nil {
		queuedAtClose = info.Queued
	}
	rdb2.Close()
	if err := <-res; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("the waiting Acquire: %v; want ErrClosed", err)
	}
	time.Sleep(300 * time.Millisecond)
	info, err := holder.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Queued != 0 || queuedAtClose != 0 {
		t.Errorf("after Close returned the closed Client's waiter was still queued (%d right after Close, %d later): Close did not wait for its leave", queuedAtClose, info.Queued)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, rdb)
	l2, err := other.Acquire(ctx, name, dlock.MaxWait(time.Second))
	if err != nil {
		t.Fatalf("after the holder released, a new waiter: %v (the lock went to the closed Client's entry?)", err)
	}
	l2.Release(ctx)
}

// TestCloseAmidWaitersOfEveryKind: goroutines of every kind wait on one Client, observers
// are added meanwhile, and Close comes in the middle: every call ends with
// a Lock or an error, no race, nothing left running (leakcheck).
func TestCloseAmidWaitersOfEveryKind(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, k := range everyKind() {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 20 && ctx.Err() == nil; j++ {
					l, err := k.take(ctx, c, fmt.Sprintf("stormc-%d", i%2), false)
					if err != nil {
						if errors.Is(err, dlock.ErrClosed) {
							return
						}
						if !errors.Is(err, dlock.ErrWrongType) {
							t.Errorf("%s: %v", k.name, err)
							return
						}
						continue
					}
					time.Sleep(3 * time.Millisecond)
					l.Release(ctx)
				}
			}()
		}
	}
	for range 20 {
		c.Observe(dlock.Observer{End: func(context.Context, *dlock.Event) {}})
		_ = c.Stats()
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(ctx); err != nil {
		t.Error(err)
	}
	wg.Wait()
	if err := c.Close(ctx); err != nil {
		t.Error(err)
	}
	for i := range 2 {
		keys, _ := rdb.Keys(ctx, fmt.Sprintf("*stormc-%d*", i)).Result()
		var live []string
		for _, key := range keys {
			if ttl, err := rdb.PTTL(ctx, key).Result(); err == nil && ttl == -1 { // -2: gone since KEYS
				live = append(live, key)
			}
		}
		if len(live) > 0 {
			t.Errorf("keys without expiry left: %v", live)
		}
	}
}

// Close waits for the undo an Acquire left running in the background (its
// context ended while the request was delayed in the network), so that a
// process that drains before closing its Redis client leaves nothing
// behind: the delayed request lands, the undo after it.
func TestCloseWaitsForBackgroundUndo(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, quorum := range []bool{false, true} {
		t.Run(map[bool]string{false: "node", true: "quorum"}[quorum], func(t *testing.T) {
			leakcheck.Check(t) // (first: its check runs once the servers are gone)
			p, rdb, direct := proxied(t, -1, 2*time.Second)
			var c *dlock.Client
			if quorum {
				c = newRedlock(t, []redis.UniversalClient{rdb}, 50*time.Millisecond)
			} else {
				c = newClient(t, rdb)
			}
			warm, err := c.TryAcquire(t.Context(), "warm") // (the scripts loaded: the delay holds the acquire itself)
			if err != nil {
				t.Fatal(err)
			}
			warm.Release(t.Context())
			p.Delay(700*time.Millisecond, 0)
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
			_, err = c.Acquire(ctx, "drain")
			cancel()
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("Acquire through a delayed link = %v, want ErrNotAcquired", err)
			}
			// The undo runs in the background: retried (Retry), or, over a
			// quorum, its node's call left running past the node timeout.
			cleanUps := func() int { return countGoroutines(t, "backend.Retry+") + countGoroutines(t, "backend.fanOut") }
			if cleanUps() == 0 {
				t.Errorf("no undo running in the background after an Acquire whose request is held in the network")
			}
			p.Delay(0, 0) // what is held is delivered late: the acquire, then the undo
			dctx, dcancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer dcancel()
			if err := c.Close(dctx); err != nil {
				t.Fatalf("Close = %v", err)
			}
			if n := cleanUps(); n != 0 {
				t.Errorf("%d undo goroutines still running after Close returned", n)
			}
			rdb.Close() // what a process does at shutdown, after Close
			time.Sleep(200 * time.Millisecond)
			if n := liveKeys(t.Context(), direct, "dlock:{drain}", "dlock:{drain}:q"); n != 0 {
				t.Errorf("%d lock keys left after Close and close", n)
			}
		})
	}
}

// Close ends every goroutine and connection the Client started — here the
// pub/sub connection that lingers after a wait, plain and sharded — before
// it returns; acquisitions after it fail with ErrClosed, by the Client and
// its Owner Clients; a Lock still held is no longer extended and ends at its
// validity.
func TestCloseEndsBackgroundWork(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	_, rdb := setup(t)
	ctx := t.Context()
	for _, sharded := range []bool{false, true} {
		name := fmt.Sprintf("close-%v", sharded)
		c := newClient(t, rdb, dlock.WithShardedPubSub(sharded), dlock.WithReentrant(true))
		held, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(4*time.Second)) // (the wait below may take seconds on a loaded machine: the watchdog must keep it)
		if err != nil {
			t.Fatal(err)
		}
		// A wait that lasts until it listens for the release (on a loaded
		// machine a short MaxWait may end before it subscribes).
		wctx, stop := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() { _, err := c.Acquire(wctx, name); waited <- err }()
		listening := waitFor(10*time.Second, func() bool { return countGoroutines(t, "internal/pubsub") > 0 })
		stop()
		if err := <-waited; !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("sharded=%v: Acquire of a held lock = %v, want ErrNotAcquired", sharded, err)
		}
		if !listening || countGoroutines(t, "internal/pubsub") == 0 {
			t.Fatalf("sharded=%v: no pub/sub reader after a wait: the test proves nothing", sharded)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatalf("sharded=%v: Close = %v", sharded, err)
		}
		if n := countGoroutines(t, "internal/pubsub"); n != 0 {
			t.Errorf("sharded=%v: %d pub/sub goroutines still running after Close returned", sharded, n)
		}
		owner, err := c.Owner("o")
		if err != nil {
			t.Fatal(err)
		}
		for what, cl := range map[string]*dlock.Client{"the Client": c, "its Owner Client": owner} {
			if _, err := cl.TryAcquire(ctx, "after-close"); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("sharded=%v: TryAcquire by %s after Close = %v, want ErrClosed", sharded, what, err)
			}
		}
		if !closedWithin(held.Done(), 10*time.Second) {
			t.Errorf("sharded=%v: a Lock held at Close still holds after its TTL: its watchdog went on", sharded)
		}
		if err := c.Close(ctx); err != nil {
			t.Errorf("sharded=%v: a second Close = %v", sharded, err)
		}
	}
}

// TestCloseFreesTheQueuedPlaceOfEveryKind: Close wakes every kind of waiting acquisition with ErrClosed and
// takes its queue entry out: when the holder then releases, the lock (or
// permit, or write, or leadership) is free at once, not handed to the
// closed waiter.
func TestCloseFreesTheQueuedPlaceOfEveryKind(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	type holdFn func(c *dlock.Client, name string) (*dlock.Lock, error)
	kinds := map[string]holdFn{
		"fair": func(c *dlock.Client, name string) (*dlock.Lock, error) { return c.Acquire(ctx, name) },
		"sem": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			s, _ := c.Semaphore(name, 1)
			return s.Acquire(ctx)
		},
		"semN": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			s, _ := c.Semaphore(name, 2)
			return s.AcquireN(ctx, 2)
		},
		"write": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			rw, _ := c.RWMutex(name)
			return rw.Writer().Acquire(ctx)
		},
		"campaign": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			e, _ := c.Election(name)
			ld, err := e.Campaign(ctx, "x")
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		},
	}
	for kname, take := range kinds {
		name := "close-" + kname
		holderC := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
		h, err := take(holderC, name)
		if err != nil {
			t.Fatal(err)
		}
		waiterC := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
		done := make(chan error, 1)
		go func() {
			l, err := take(waiterC, name)
			if l != nil {
				l.Release(ctx)
			}
			done <- err
		}()
		if !waitFor(2*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == 1 }) {
			t.Fatalf("%s: the waiter did not queue", kname)
		}
		if err := waiterC.Close(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("%s: the waiter woken by Close = %v, want ErrClosed", kname, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: the waiter was not woken by Close", kname)
		}
		if n := rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() + rdb.HLen(ctx, "dlock:{"+name+"}:qw").Val(); n != 0 {
			t.Errorf("%s: %d queue entries left after Close", kname, n)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		third := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
		l, err := take(third, name)
		if err != nil {
			t.Errorf("%s: after the holder released: %v", kname, err)
			continue
		}
		l.Release(ctx)
	}
}

// An acquisition ended by Close says "dlock: " once: the waiter woken by
// Close, the one whose attempt Close cut short while Redis could not be
// reached, and the one that began after it.
func TestClosedAcquisitionErrorsSayDlockOnce(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	holder := newClient(t, rdb)
	if _, err := holder.TryAcquire(ctx, "closed-text", dlock.LeaseTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	check := func(how string, err error) {
		t.Helper()
		if !errors.Is(err, dlock.ErrClosed) || strings.Count(err.Error(), "dlock: ") != 1 {
			t.Errorf("%s: %v; want ErrClosed saying \"dlock: \" once", how, err)
		}
	}
	wait := func(c *dlock.Client, rdb *redis.Client) <-chan error {
		res := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, "closed-text", dlock.MaxWait(20*time.Second))
			if err == nil {
				l.Release(ctx)
			}
			res <- err
		}()
		waitSubscribed(ctx, t, c, rdb)
		return res
	}
	result := func(res <-chan error) error {
		select {
		case err := <-res:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("the waiting Acquire never returned after Close")
			return nil
		}
	}

	c := newClient(t, rdb, dlock.WithUnfair(nil))
	res := wait(c, rdb)
	c.Close(ctx)
	check("woken by Close", result(res))
	_, err := c.Acquire(ctx, "closed-text")
	check("after Close", err)

	rrdb, d := refusable(t, s)
	rc := newClient(t, rrdb, dlock.WithUnfair(nil))
	res = wait(rc, rdb)
	d.cutAndRefuse()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rc.Close(cctx)
	check("cut short by Close", result(res))
}

// stalledPubSub is go-redis's driver whose pub/sub connections go through
// ps, a client of its own: the hub's connection can hang while the
// Client's commands are answered.
type stalledPubSub struct {
	driver.Conn
	ps driver.Conn
}

func (c stalledPubSub) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	return c.ps.PubSub(ctx, channel)
}

// TestCloseReturnsByItsCtxWhileAHubHangs: a hub whose connection hangs in
// its handshake behind a stalled network (a client with no read timeout,
// which does not watch its ctx) cannot stop; Close returns its ctx's error
// by the ctx's deadline rather than wait for it, and the hub stops in the
// background once the connection is cut: a later Close returns nil, and
// no goroutine is left (the leak check).
func TestCloseReturnsByItsCtxWhileAHubHangs(t *testing.T) {
	t.Parallel()
	c, p := hangingHub(t, "close-hub-hangs")
	cctx, ccancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer ccancel()
	closed := make(chan error, 1)
	go func() { closed <- c.Close(cctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close with a hub hanging = %v; want its ctx's DeadlineExceeded", err)
		}
	case <-time.After(3 * time.Second):
		p.Cut() // (the hub's connection ends: Close returns)
		t.Fatal("Close with a hub hanging still waits 3s after its ctx's 300ms")
	}
	closeOnceCut(t, c, p)
}

// TestClosesWhileAHubHangsCloseItOnce: each Close while a hub hangs
// returns by its ctx, and the hub's closing is started once, by the
// first: the later ones wait for the same closing and start no goroutine
// of their own.
func TestClosesWhileAHubHangsCloseItOnce(t *testing.T) {
	t.Parallel()
	c, p := hangingHub(t, "close-hub-once")
	for i := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := c.Close(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close %d with a hub hanging = %v; want its ctx's DeadlineExceeded", i+1, err)
		}
	}
	if n := countGoroutines(t, "pubsub.(*Hub).Close"); n != 1 {
		t.Errorf("%d goroutines close the hub after 5 Closes; want 1", n)
	}
	closeOnceCut(t, c, p)
}

// hangingHub returns a Client whose hub's connection hangs in its
// handshake behind p, stalled (see stalledPubSub), once an Acquire of
// name, held by another Client, started it; the test's end cuts p.
func hangingHub(t *testing.T, name string) (*dlock.Client, *redistest.Proxy) {
	t.Helper()
	s, direct := setupTCP(t)
	p := redistest.NewProxy(t, s.Addr())
	stalled := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: -1})
	t.Cleanup(func() { stalled.Close() })
	c, err := dlock.NewFrom(stalledPubSub{goredisdriver.Conn(direct), goredisdriver.Conn(stalled)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := newClient(t, direct).TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	p.Stall()
	t.Cleanup(p.Cut)
	actx, acancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer acancel()
	if _, err := c.Acquire(actx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held lock = %v; want ErrNotAcquired", err)
	}
	if !waitFor(5*time.Second, func() bool { return p.HeldRequests() > 0 }) {
		t.Fatal("the hub's connection never reached the stalled proxy")
	}
	return c, p
}

// closeOnceCut cuts p, which holds c's hub's connection, and checks that
// Close then returns nil: the hub stopped.
func closeOnceCut(t *testing.T, c *dlock.Client, p *redistest.Proxy) {
	t.Helper()
	p.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close once the hub's connection was cut = %v; want nil (the hub stopped)", err)
	}
}

// TestCloseWithAnEndedCtxThenTwiceAtOnce: Close with a ctx already ended,
// while an unfair waiter listens, returns nil or that ctx's error at once;
// the waiter still ends with ErrClosed promptly; two Closes at once after it
// both return nil once the hubs stopped; an Acquire after them fails with
// ErrClosed; and no goroutine is left (the leak check).
func TestCloseWithAnEndedCtxThenTwiceAtOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	holder := newClient(t, rdb)
	c := newClient(t, rdb, dlock.WithUnfair(slowBackoff))
	l, err := holder.TryAcquire(t.Context(), "close-ended")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "close-ended")
		if err == nil {
			l.Release(t.Context())
		}
		res <- err
	}()
	waitSubscribed(t.Context(), t, c, rdb)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := c.Close(ended); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Close with an ended ctx = %v; want nil or context.Canceled", err)
	}
	select {
	case err := <-res:
		if took := time.Since(start); took > time.Second || !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("waiting Acquire returned %v, %v after Close; want ErrClosed within 1s", err, took.Round(time.Millisecond))
		}
	case <-time.After(9 * time.Second):
		t.Fatal("waiting Acquire never returned after Close; want ErrClosed within 1s")
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			errs <- c.Close(ctx)
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Close after Close = %v; want nil", err)
		}
	}
	if _, err := c.TryAcquire(t.Context(), "close-ended"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v; want ErrClosed", err)
	}
	actx, acancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer acancel()
	if _, err := c.Acquire(actx, "close-ended"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v; want ErrClosed", err)
	}
}
