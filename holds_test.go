package dlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/script"
)

// Tests of the hold engine (hold_*.lua) that semaphores and read-write
// locks share: a semaphore's permits and a read-write lock's holds are
// members of one sorted set, granted, extended and released by the same
// scripts, so their cases run side by side here.

// Randomized: semaphore N=2 (and a read-write lock) with forced lapses;
// after each step, the live members never exceed N, and a Release that
// reports success was not overtaken.
func TestAdv4SemRandomLapses(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "adv4-sem-rand"
	const n = 2
	cs := []*dlock.Client{
		newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second)),
		newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second), pipelined(false)),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type hold struct {
		l       *dlock.Lock
		lapsed  bool
		dropped bool
	}
	var holds []*hold
	deadline := time.Now().Add(20 * time.Second)
	for step := 0; step < 600 && time.Now().Before(deadline); step++ {
		s := newSemaphore(t, cs[rng.IntN(2)], name, n)
		switch op := rng.IntN(5); {
		case op <= 1:
			l, err := s.TryAcquire(ctx)
			if err == nil {
				// every lapsed hold must have been dropped by this grant
				// if more than it are members
				for _, h := range holds {
					if h.lapsed {
						sc := rdb.ZScore(ctx, semKey(name), h.l.Token())
						if sc.Err() == nil {
							t.Fatalf("step %d: a grant left a lapsed hold in the set", step)
						}
						h.dropped = true
					}
				}
				holds = append(holds, &hold{l: l})
			}
		case op == 2 && len(holds) > 0:
			h := holds[rng.IntN(len(holds))]
			if !h.lapsed {
				rdb.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: h.l.Token()})
				h.lapsed = true
			}
		case op >= 3 && len(holds) > 0:
			i := rng.IntN(len(holds))
			h := holds[i]
			holds = append(holds[:i], holds[i+1:]...)
			err := h.l.Release(ctx)
			if h.dropped && err == nil {
				t.Fatalf("step %d: Release of a hold whose place was taken = nil", step)
			}
			if !h.lapsed && err != nil {
				t.Fatalf("step %d: Release of a live hold = %v", step, err)
			}
		}
		now := float64(time.Now().UnixMilli())
		live := rdb.ZCount(ctx, semKey(name), "("+itoa(int64(now)), "+inf").Val()
		if live > n {
			t.Fatalf("step %d: %d live permits of %d", step, live, n)
		}
	}
	for _, h := range holds {
		h.l.Release(ctx)
	}
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

// A late copy of a hold's acquire, replayed after its Release (fast path
// taken at first), is refused and grants nothing; likewise for a waiter
// that left the queue.
func TestAdv4LateHoldAcquireCopy(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	for _, what := range []any{"2", "r", "w"} {
		name := "adv4-late-acq-" + what.(string)
		var l *dlock.Lock
		var err error
		member := func(tok string) string { return tok }
		switch what {
		case "2":
			l, err = newSemaphore(t, c, name, 2).TryAcquire(ctx)
		case "r":
			l, err = newRW(t, c, name).Reader().TryAcquire(ctx)
			member = func(tok string) string { return "r:" + tok }
		default:
			l, err = newRW(t, c, name).Writer().TryAcquire(ctx)
			member = func(tok string) string { return "w:" + tok }
		}
		if err != nil {
			t.Fatal(err)
		}
		tok, key := l.Token(), l.Key()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		keys := []string{key, key + ":fence", key + ":q", key + ":qw", key + ":r:" + tok}
		err = script.HoldAcquire.Run(ctx, rdb, keys, tok, 10000, 1, 10000, key+":ch", "PUBLISH", 10000, what).Err()
		if err == nil {
			t.Errorf("%s: a late acquire copy after release was granted", what)
		}
		if rdb.ZScore(ctx, key, member(tok)).Err() == nil {
			t.Errorf("%s: the late copy added its hold", what)
		}
		if rdb.Exists(ctx, key+":q").Val() != 0 {
			t.Errorf("%s: the late copy queued", what)
		}
	}
}

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
