package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A permit's request delayed in the network past its caller's timeout lands
// after the caller's undo and takes nothing: no permit, no queue entry.
// With go-redis's retries on, the re-sent copy takes the permit at once
// and the delayed original lands after its Release: it takes nothing
// either. And a waiting Acquire's delayed request, which would queue, lands
// after the undo: no ghost in the queue for the next release to hand a
// permit to.
func TestSemaphoreDelayedRequestTakesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("retries=%d/acquire=%v", retries, wait), func(t *testing.T) {
				p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
				ctx := t.Context()
				name := fmt.Sprintf("sem-delayed-%d-%v", retries, wait)
				key := semKey(name)
				c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), pipelined(false))
				s := newSemaphore(t, c, name, 1)
				if warm, err := newSemaphore(t, c, name+"-warm", 1).TryAcquire(ctx); err == nil { // the scripts are loaded, by this Client
					warm.Release(ctx)
				}
				acquire := s.TryAcquire
				var holder *dlock.Lock
				if wait { // the permit is taken: the delayed request would queue
					var err error
					if holder, err = newSemaphore(t, newClient(t, direct), name, 1).TryAcquire(ctx); err != nil {
						t.Fatal(err)
					}
					acquire = func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
						ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						defer cancel()
						return s.Acquire(ctx, opts...)
					}
				}
				p.Delay(time.Second, 0)
				start := time.Now()
				done := make(chan struct{})
				go func() {
					defer close(done)
					time.Sleep(100 * time.Millisecond) // the request has crossed into the proxy
					p.Delay(0, 0)                      // the undo (or re-sent copy) goes straight through
				}()
				l, err := acquire(ctx)
				<-done
				switch {
				case (retries < 0 || wait) && err == nil:
					t.Errorf("acquire through a 1s delay with a 300ms read timeout = nil error, want it to fail")
				case retries > 0 && !wait && err != nil:
					t.Errorf("TryAcquire = %v, want the re-sent copy's permit", err)
				}
				if l != nil {
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release = %v", err)
					}
				}
				time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
				want := 0
				if holder != nil {
					want = 1
				}
				if m := members(ctx, direct, name); len(m) != want || liveKeys(ctx, direct, key+":q", key+":qw") != 0 {
					t.Errorf("after the delayed request landed: permits %v (want %d), queue %v %v: a permit or entry for nobody",
						m, want, direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val())
				}
				if holder != nil {
					holder.Release(ctx)
					if m := members(ctx, direct, name); len(m) != 0 {
						t.Errorf("permits after the holder released: %v, want none (handed to nobody)", m)
					}
				}
			})
		}
	}
}

// go-redis re-sends a command whose reply was lost. An acquire that runs
// twice takes one permit, and a release that runs twice gives back one
// permit (not another holder's) and reports the release, not a loss.
func TestSemaphoreReSentRequestsAreIdempotent(t *testing.T) {
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	ctx := t.Context()
	const name = "sem-resent"
	c := newClient(t, rdb, pipelined(false), dlock.WithAutoExtend(false))
	s := newSemaphore(t, c, name, 3)
	if warm, err := newSemaphore(t, c, name+"-warm", 1).TryAcquire(ctx); err == nil { // the scripts are loaded, by this Client
		warm.Release(ctx)
	}
	other, err := newSemaphore(t, newClient(t, direct), name, 3).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	var l *dlock.Lock
	err = stallThenCut(t, p, func() (err error) {
		l, err = s.TryAcquire(ctx)
		return err
	}, func() bool { return len(members(ctx, direct, name)) == 2 })
	if err != nil {
		t.Fatalf("TryAcquire with its reply lost once = %v, want a permit", err)
	}
	if m := members(ctx, direct, name); len(m) != 2 {
		t.Errorf("permits after a re-sent acquire: %v, want 2 (the other's and ours)", m)
	}
	err = stallThenCut(t, p, func() error { return l.Release(ctx) },
		func() bool { return len(members(ctx, direct, name)) == 1 })
	if err != nil {
		t.Errorf("Release with its reply lost once = %v, want nil (it was held throughout)", err)
	}
	if m := members(ctx, direct, name); len(m) != 1 || m[0] != other.Token() {
		t.Errorf("permits after a re-sent release: %v, want the other holder's alone", m)
	}
	if err := other.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("the other holder's Extend after the re-sent release = %v, want held", err)
	}
	again, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after the re-sent release = %v", err)
	}
	again.Release(ctx)
}
