package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Inspect counts the waiters queued for a fair lock and for a semaphore,
// and no longer those that gave up.
func TestInspectCountsQueuedWaiters(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	sem, err := c.Semaphore("queued-sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		acquire func(context.Context, ...dlock.LockOption) (*dlock.Lock, error)
	}{
		{"queued-lock", func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
			return c.Acquire(ctx, "queued-lock", opts...)
		}},
		{"queued-sem", sem.Acquire},
	} {
		held, err := tc.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := tc.acquire(wctx)
				done <- err
			}()
		}
		queued := func(n int) bool {
			info, err := c.Inspect(ctx, tc.name)
			return err == nil && info.Queued == n
		}
		if !waitFor(10*time.Second, func() bool { return queued(2) }) {
			info, err := c.Inspect(ctx, tc.name)
			t.Errorf("%s: Inspect with two waiters = %+v, %v; want Queued 2", tc.name, info, err)
		}
		cancel()
		for range 2 {
			if err := <-done; !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("%s: cancelled waiter's Acquire = %v, want ErrNotAcquired", tc.name, err)
			}
		}
		if !waitFor(10*time.Second, func() bool { return queued(0) }) {
			info, err := c.Inspect(ctx, tc.name)
			t.Errorf("%s: Inspect after the waiters gave up = %+v, %v; want Queued 0", tc.name, info, err)
		}
		held.Release(ctx)
	}
}

// Info.Queued counts the live entries of the queue only: a waiter that
// died stops counting once its entry lapses, as its documentation says,
// not when someone serving the queue drops it. A waiter whose connection
// stalls (to Redis, it died: it neither renews its entry nor leaves) with
// a lease of 100ms, and a live waiter behind it, wait for a lock, a
// semaphore, a read-write lock and an election held for longer than the
// test: Queued must go from 2 to 1 within two seconds of the stall (the
// entry lapses 400ms after it was last renewed; nothing serves the queue
// meanwhile, the live waiter renewing only every 3.3s), read by a Client
// with scripts and by one without. (A lease long enough that a loaded
// machine does not delay the dying waiter's renewals past it before the
// stall.)
func TestInspectQueuedCountsLiveWaitersOnly(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond // the dying waiter's lease, and its entry's life
	for _, kind := range []string{"fair", "semaphore", "rw", "election"} {
		t.Run(kind, func(t *testing.T) {
			p, rdb, direct := proxied(t, -1, 300*time.Millisecond)
			ctx := t.Context()
			name := "queued-live-" + kind
			key := semKey(name)
			dying := newClient(t, rdb, pipelined(false))
			c := newClient(t, direct, dlock.LeaseTTL(10*time.Second))
			inspectors := map[string]*dlock.Client{"scripts": c, "no scripts": newClient(t, direct, dlock.WithoutScripts())}
			// acquire(c, opts) waits for the name on c (a write of the
			// read-write lock, a campaign of the election).
			acquire := func(ctx context.Context, c *dlock.Client, opts ...dlock.LockOption) (*dlock.Lock, error) {
				return holdAs(t, ctx, c, kind, name, opts...)
			}
			holder, err := acquire(ctx, c, dlock.MaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(ctx)
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() { cancel(); p.Cut(); wg.Wait() }()
			queued := func(n int64) bool {
				return waitFor(5*time.Second, func() bool { return direct.LLen(ctx, key+":q").Val() == n })
			}
			wg.Go(func() { acquire(wctx, dying, dlock.LeaseTTL(ttl)) })
			if !queued(1) {
				t.Fatal("the dying waiter never queued")
			}
			wg.Go(func() { acquire(wctx, c) })
			if !queued(2) {
				t.Fatal("the live waiter never queued")
			}
			for what, i := range inspectors {
				if info, err := i.Inspect(ctx, name); err != nil || info.Queued != 2 {
					t.Errorf("Inspect (%s) with two live waiters = %+v, %v; want Queued 2", what, info, err)
				}
			}
			p.Stall() // the first waiter dies: no renewal, no leave
			stalled := time.Now()
			for what, i := range inspectors {
				var info dlock.Info
				ok := waitFor(2*time.Second, func() bool {
					info, err = i.Inspect(ctx, name)
					return err == nil && info.Queued == 1
				})
				if !ok {
					t.Errorf("Inspect (%s) %v after the first waiter died (its entry lapsed %v after it last renewed it) = Queued %d, %v; want 1, the live waiter; the queue: %v, entries %v",
						what, time.Since(stalled).Round(time.Millisecond), ttl, info.Queued, err,
						direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val())
				}
			}
		})
	}
}

// A held lock whose fence key holds another program's value is inspected
// and listed with fence 0, as a foreign queue key counts no waiters: one
// such name does not fail Inspect, nor List for every other name.
func TestInspectAndListReadAForeignFenceKeyAsNoFence(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	for _, name := range []string{"ff-a", "ff-b"} {
		if _, err := c.TryAcquire(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.LPush(ctx, "dlock:{ff-a}:fence", "x").Err(); err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "ff-a")
	if err != nil || !info.Held || info.Fence != 0 {
		t.Errorf("Inspect = held %v, fence %d, %v; want held, fence 0", info.Held, info.Fence, err)
	}
	list, err := c.List(ctx, "ff-*")
	if err != nil || len(list) != 2 {
		t.Errorf("List = %d locks, %v; want both", len(list), err)
	}
}
