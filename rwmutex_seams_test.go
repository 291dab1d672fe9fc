package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A hold's request delayed in the network past its caller's timeout lands
// after the caller's undo and takes nothing: no hold, no queue entry. With
// go-redis's retries on, the re-sent copy takes the hold at once and the
// delayed original lands after its Release: it takes nothing either. And
// a waiting writer's delayed request, which would queue behind a read,
// lands after the undo: no ghost in the queue for the read's release to
// grant the lock to.
func TestRWMutexDelayedRequestTakesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("retries=%d/acquire=%v", retries, wait), func(t *testing.T) {
				p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
				ctx := t.Context()
				name := fmt.Sprintf("rw-delayed-%d-%v", retries, wait)
				key := semKey(name)
				c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), pipelined(false))
				w := newRW(t, c, name).Writer()
				if warm, err := newRW(t, c, name+"-warm").Writer().TryAcquire(ctx); err == nil { // the scripts are loaded, by this Client
					warm.Release(ctx)
				}
				acquire := w.TryAcquire
				var holder *dlock.Lock
				if wait { // a read is held: the delayed write would queue
					var err error
					if holder, err = newRW(t, newClient(t, direct), name).Reader().TryAcquire(ctx); err != nil {
						t.Fatal(err)
					}
					acquire = func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
						ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						defer cancel()
						return w.Acquire(ctx, opts...)
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
					t.Errorf("TryAcquire = %v, want the re-sent copy's hold", err)
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
				if m := rwMembers(ctx, direct, name); len(m) != want || liveKeys(ctx, direct, key+":q", key+":qw") != 0 {
					t.Errorf("after the delayed request landed: holds %v (want %d), queue %v %v: a hold or entry for nobody",
						m, want, direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val())
				}
				if holder != nil {
					holder.Release(ctx)
					if m := rwMembers(ctx, direct, name); len(m) != 0 {
						t.Errorf("holds after the reader released: %v, want none (granted to nobody)", m)
					}
				}
			})
		}
	}
}

// go-redis re-sends a command whose reply was lost. An acquire that runs
// twice takes one hold, and a release that runs twice gives back one hold
// (not another reader's) and reports the release, not a loss.
func TestRWMutexReSentRequestsAreIdempotent(t *testing.T) {
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	ctx := t.Context()
	const name = "rw-resent"
	c := newClient(t, rdb, pipelined(false), dlock.WithAutoExtend(false))
	r := newRW(t, c, name).Reader()
	if warm, err := newRW(t, c, name+"-warm").Reader().TryAcquire(ctx); err == nil { // the scripts are loaded, by this Client
		warm.Release(ctx)
	}
	other, err := newRW(t, newClient(t, direct), name).Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	var l *dlock.Lock
	err = stallThenCut(t, p, func() (err error) {
		l, err = r.TryAcquire(ctx)
		return err
	}, func() bool { return len(rwMembers(ctx, direct, name)) == 2 })
	if err != nil {
		t.Fatalf("read TryAcquire with its reply lost once = %v, want a hold", err)
	}
	if m := rwMembers(ctx, direct, name); len(m) != 2 {
		t.Errorf("holds after a re-sent acquire: %v, want 2 (the other's and ours)", m)
	}
	err = stallThenCut(t, p, func() error { return l.Release(ctx) },
		func() bool { return len(rwMembers(ctx, direct, name)) == 1 })
	if err != nil {
		t.Errorf("Release with its reply lost once = %v, want nil (it was held throughout)", err)
	}
	if m := rwMembers(ctx, direct, name); len(m) != 1 || m[0] != "r:"+other.Token() {
		t.Errorf("holds after a re-sent release: %v, want the other reader's alone", m)
	}
	if err := other.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("the other reader's Extend after the re-sent release = %v, want held", err)
	}
}
