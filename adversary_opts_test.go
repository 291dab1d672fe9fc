package dlock_test

// Adversary tests of per-call options (semaphores, multi-locks) and of the
// clean-up of a wait that ends with an error: each one found a way to break
// what the documentation promises, and checks the promise.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A fair waiter queues behind a holder; while it waits the name changes
// kind (the holder's lease ended and a reentrant lock of the same name was
// taken). The waiter's next attempt fails with ErrWrongType, and Acquire
// says that a wait that ends with an error leaves its place in the queue.
// It did not: the leave (release_fair.lua) read the lock key with GET,
// which fails on a key of another kind, before it took the waiter out. The
// entry stayed for max(TTL, 1s): once the other kind's lock was released,
// every fair TryAcquire was refused, and the next fair Acquire handed the
// lock to the waiter that had gone, for a whole TTL.
func TestOptsAttackFairWaiterFailedByWrongTypeLeavesItsPlace(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "kind-changes"
	const ttl = 30 * time.Second // longer than the test: what is left is not gone by expiry
	holder := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false))
	waiter := newClient(t, rdb, dlock.LeaseTTL(ttl))
	reentrant := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(ttl))
	// The holder's short lease wakes the waiter soon after it queued: it
	// sleeps until the holder's lease would end.
	h, err := holder.TryAcquire(ctx, name, dlock.LeaseTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name)
		if l != nil {
			l.Release(ctx)
		}
		errc <- err
	}()
	if !waitFor(10*time.Second, func() bool { return rdb.HLen(ctx, semKey(name)+":qw").Val() == 1 }) {
		t.Fatal("the waiter never queued")
	}
	// The holder's lease ends without a handover (as if it expired), and
	// the name is taken as a reentrant lock before the waiter tries again.
	if n := rdb.Del(ctx, h.Key()).Val(); n != 1 {
		t.Fatalf("DEL of the holder's key = %d", n)
	}
	r, err := reentrant.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter's Acquire did not end 30s after the name changed kind")
	}
	if !errors.Is(werr, dlock.ErrWrongType) {
		t.Fatalf("the waiter's Acquire = %v, want ErrWrongType", werr)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Close(ctx); err != nil { // a clean-up retried in the background is over
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, semKey(name)+":qw").Val() + rdb.LLen(ctx, semKey(name)+":q").Val(); n != 0 {
		t.Errorf("the waiter's Acquire returned %q and left its place in the queue (%d entries)", werr, n)
	}
	// What that entry does: the free lock is refused to a fair TryAcquire.
	if l, err := holder.TryAcquire(ctx, name); err != nil {
		t.Errorf("TryAcquire of the free lock after the failed waiter left = %v", err)
	} else {
		l.Release(ctx)
	}
}

// Redis refuses connections (a restart, a failover) and a fair Acquire
// fails at its first attempt: the request never left the client, so there
// is no queue entry to leave and nothing to undo. Yet since a wait that
// ends with an error always leaves the queue, and an undo that cannot
// connect is retried, every such Acquire sent a leave that could not
// connect either, and retried it in the background (RetryTries, ~2s):
// eight goroutines retrying Acquire in a loop against a refusing Redis
// piled up ~10,000 background goroutines in 2s and sent six connection
// attempts per call, where before they sent one and left none — a
// reconnect storm against a Redis that is coming back. A wait whose
// requests never reached Redis must leave nothing to do behind.
func TestOptsAttackAcquireThatNeverReachedRedisLeavesNoBackgroundWork(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, _ := setup(t)
	rdb, d := refusable(t, s)
	sent := &countEvals{}
	rdb.AddHook(sent)
	d.cutAndRefuse() // from the start: no request of the test ever reaches Redis
	ctx := t.Context()
	for _, k := range []struct {
		what    string
		acquire func(c *dlock.Client) (*dlock.Lock, error)
	}{
		{"fair lock", func(c *dlock.Client) (*dlock.Lock, error) { return c.Acquire(ctx, "refused") }},
		{"semaphore", func(c *dlock.Client) (*dlock.Lock, error) {
			sem, err := c.Semaphore("refused-sem", 2)
			if err != nil {
				return nil, err
			}
			return sem.Acquire(ctx)
		}},
		{"fair lock with MaxWait", func(c *dlock.Client) (*dlock.Lock, error) {
			return c.Acquire(ctx, "refused", dlock.MaxWait(time.Minute))
		}},
	} {
		c := newClient(t, rdb) // one per case: Close ends it
		before := sent.all.Load()
		if l, err := k.acquire(c); err == nil {
			l.Release(ctx)
			t.Fatalf("%s: Acquire with every connection refused succeeded", k.what)
		}
		if err := c.Close(ctx); err != nil { // what the Acquire left to the background is over
			t.Fatal(err)
		}
		if n := sent.all.Load() - before; n != 1 {
			t.Errorf("%s: an Acquire whose one attempt never reached Redis sent %d commands in all (with what it left to the background), want 1", k.what, n)
		}
	}
}

// A fair waiter whose lease is capped below its TTL (MaxHold) asks for a
// lease of the cap, and its queue entry lives as long as that lease
// (max(lease, 1s)); but it renewed the entry only every third of its TTL.
// With a TTL of 60s and MaxHold(2s) the entry died 2s after it was made,
// and the waiter, still waiting, renewed it 20s later: a release in
// between skipped it as a waiter that had died and handed the lock to one
// that came after it. Fair waiting serves waiters in arrival order
// and only a waiter that died is skipped.
func TestOptsAttackCappedFairWaiterKeepsItsPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	ctx := t.Context()
	const ttl = time.Minute // the waiters renew their entries every 20s
	for _, kind := range []string{"lock", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			name := "capped-" + kind
			c := newClient(t, rdb, dlock.LeaseTTL(ttl))
			acquire := func(opts ...dlock.LockOption) (*dlock.Lock, error) { return c.Acquire(ctx, name, opts...) }
			if kind == "semaphore" {
				s, err := c.Semaphore(name, 1)
				if err != nil {
					t.Fatal(err)
				}
				acquire = func(opts ...dlock.LockOption) (*dlock.Lock, error) { return s.Acquire(ctx, opts...) }
			}
			h, err := acquire(dlock.MaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 2)
			wait := func(who string, opts ...dlock.LockOption) {
				l, err := acquire(append(opts, dlock.MaxWait(30*time.Second))...)
				if err != nil {
					t.Errorf("%s: Acquire = %v", who, err)
					got <- ""
					return
				}
				got <- who
				l.Release(context.WithoutCancel(ctx))
			}
			queued := func(n int64) bool {
				return waitFor(10*time.Second, func() bool { return rdb.HLen(ctx, semKey(name)+":qw").Val() == n })
			}
			go wait("first", dlock.MaxHold(2*time.Second))
			if !queued(1) {
				t.Fatal("the first waiter never queued")
			}
			go wait("second")
			if !queued(2) {
				t.Fatal("the second waiter never queued")
			}
			// The first waiter's entry would be gone by now if it lived
			// only as long as its capped lease; the first waiter waits on.
			time.Sleep(3 * time.Second)
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if who := <-got; who != "first" {
				t.Errorf("the lock went to the %q waiter first, ahead of the first one, which had queued before it and was still waiting", who)
			}
			<-got
		})
	}
}
