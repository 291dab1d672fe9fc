package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

func TestFairWaitersServedInArrivalOrder(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb)
	holder, err := c.TryAcquire(ctx, "fifo")
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		// A Client each, so that the waiters are independent.
		wc := newClient(t, rdb)
		wg.Go(func() {
			l, err := wc.Acquire(ctx, "fifo")
			if err != nil {
				t.Errorf("waiter %d: Acquire = %v", i, err)
				return
			}
			if got := rdb.Get(ctx, l.Key()).Val(); !strings.HasPrefix(got, l.Token()) {
				t.Errorf("waiter %d: lock key holds %q, want its token %q", i, got, l.Token())
			}
			if f := fenceOf(t, l); strconv.FormatInt(f, 10) != rdb.Get(ctx, l.Key()+":fence").Val() {
				t.Errorf("waiter %d: Fence = %d, want the last fence issued, %s", i, f, rdb.Get(ctx, l.Key()+":fence").Val())
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release = %v", i, err)
			}
		})
		if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{fifo}:q").Val() == int64(i+1) }) {
			t.Fatalf("waiter %d never queued", i)
		}
	}
	// A barging TryAcquire must not jump the queue while it is handed along.
	if _, err := c.TryAcquire(ctx, "fifo"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with waiters queued = %v, want ErrNotAcquired", err)
	}
	holder.Release(ctx)
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2 3 4 5]" {
		t.Errorf("acquisition order = %v, want arrival order [0 1 2 3 4 5]", order)
	}
	if n := liveKeys(ctx, rdb, "dlock:{fifo}", "dlock:{fifo}:q", "dlock:{fifo}:qw"); n != 0 {
		t.Errorf("%d lock/queue keys left after everyone released, want 0", n)
	}
}

// A lock whose holder expired (no release, so no handoff) goes to the first
// waiter, not to a TryAcquire that arrives first.
func TestFairExpiredHolderHandsToFirstWaiter(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	holder, err := c.TryAcquire(ctx, "exp")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	waiter := newClient(t, rdb)
	go func() {
		l, err := waiter.Acquire(ctx, "exp")
		got <- err
		if err == nil {
			<-done // hold it until the test has looked
			l.Release(context.WithoutCancel(ctx))
		}
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{exp}:q").Val() == 1 }) {
		t.Fatal("waiter never queued")
	}
	rdb.PExpire(ctx, holder.Key(), time.Millisecond) // the holder dies
	waitFor(time.Second, func() bool { return rdb.PTTL(ctx, holder.Key()).Val() < 0 })
	if l, err := c.TryAcquire(ctx, "exp"); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Errorf("TryAcquire on an expired lock with a waiter queued = %v, want ErrNotAcquired", err)
	}
	if err := <-got; err != nil {
		t.Errorf("queued waiter's Acquire = %v, want the lock", err)
	}
}

// Waiters that died are skipped: one whose entry has lapsed at once, one
// that was handed the lock but never took it after its lease.
func TestFairDeadWaitersSkipped(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	holder, err := c.TryAcquire(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	rdb.RPush(ctx, "dlock:{dead}:q", "lapsed", "silent")
	rdb.HSet(ctx, "dlock:{dead}:qw", "lapsed", "1:1000", "silent", fmt.Sprintf("%d:300", now+5000))
	got := make(chan error, 1)
	waiter := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	go func() {
		l, err := waiter.Acquire(ctx, "dead")
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{dead}:q").Val() == 3 }) {
		t.Fatal("waiter never queued")
	}
	holder.Release(ctx) // hands to "silent" (alive by its entry), which never confirms
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("live waiter behind dead ones: Acquire = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("live waiter still waiting 10s after the release")
	}
}

func TestFairCancelLeavesQueue(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	holder, err := newClient(t, rdb).TryAcquire(ctx, "cancel")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	waiter := newClient(t, rdb)
	go func() {
		_, err := waiter.Acquire(wctx, "cancel")
		errc <- err
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{cancel}:q").Val() == 1 }) {
		t.Fatal("waiter never queued")
	}
	cancel()
	if err := <-errc; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Acquire = %v, want ErrNotAcquired and Canceled", err)
	}
	// The waiter returns at once; its queue entry is removed in the
	// background, within a bounded time.
	if !waitFor(3*time.Second, func() bool { return liveKeys(ctx, rdb, "dlock:{cancel}:q", "dlock:{cancel}:qw") == 0 }) {
		t.Errorf("queue keys left 3s after the only waiter gave up, want none")
	}
}

// An operator's ForceRelease frees a lock with waiters queued: the waiters
// are woken and the first of them gets it, without waiting out any timer.
func TestFairForceReleaseWakesQueue(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	holder, err := c.TryAcquire(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	waiter := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	go func() {
		l, err := waiter.Acquire(ctx, "forced")
		if err == nil {
			l.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{forced}:q").Val() == 1 }) {
		t.Fatal("waiter never queued")
	}
	time.Sleep(50 * time.Millisecond) // let it subscribe and go to sleep (its timer: 20s)
	if ok, err := c.ForceRelease(ctx, "forced"); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("queued waiter after ForceRelease: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("queued waiter still waiting 5s after ForceRelease")
	}
	if err := holder.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the forced-out holder's Release = %v, want ErrNotHeld", err)
	}
}

// A fair waiter that finds itself out of the queue (here: its entry gone
// and its lease revoked, so its next attempt is refused as REVOKED and it
// takes a new token) queues again at once rather than sleeping a third of
// the window: a release with nobody queued announces nothing, so a waiter
// out of the queue would not hear of it.
func TestFairWaiterOutOfTheQueueQueuesAgain(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const key = "dlock:{out}"
	c := newClient(t, rdb, dlock.LeaseTTL(30*time.Second)) // a window of 30s: a third is 10s
	a, err := c.TryAcquire(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() {
		l, err := c.Acquire(wctx, "out")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	var token string
	if !waitFor(5*time.Second, func() bool {
		q := rdb.LRange(ctx, key+":q", 0, -1).Val()
		if len(q) == 1 {
			token = q[0]
		}
		return token != ""
	}) {
		t.Fatal("the waiter never queued")
	}
	// Out of the queue and revoked; a wake-up makes it try again now.
	rdb.LRem(ctx, key+":q", 0, token)
	rdb.HDel(ctx, key+":qw", token)
	rdb.Set(ctx, key+":r:"+token, "0", time.Minute)
	rdb.Publish(ctx, key+":ch", "*")
	if !waitFor(5*time.Second, func() bool {
		q := rdb.LRange(ctx, key+":q", 0, -1).Val()
		return len(q) == 1 && q[0] != token
	}) {
		t.Fatal("the waiter did not queue again with a new token within 5s (a third of the window is 10s)")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Acquire: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the lock within 5s of the release")
	}
}
