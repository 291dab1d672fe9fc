package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// Tests of the hold engine (hold_*.lua) that semaphores and read-write
// locks share: a semaphore's permits and a read-write lock's holds are
// members of a sorted set at the name's key, granted, extended and released by the same
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

// holdLocker is what the twin tests below ask of a semaphore and of a
// read-write lock's Reader or Writer.
type holdLocker interface {
	TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
	Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
}

// A permit's or a write hold's request delayed in the network past its
// caller's timeout lands after the caller's undo and takes nothing: no
// permit or hold, no queue entry. With go-redis's retries on, the re-sent
// copy takes the permit or hold at once and the delayed original lands
// after its Release: it takes nothing either. And a waiting request's
// delayed copy, which would queue (an Acquire behind the taken permit, a
// writer behind a read), lands after the undo: no ghost in the queue for
// the next release to hand a permit, or grant the lock, to.
//
// One row per kind; this was TestSemaphoreDelayedRequestTakesNothing and
// TestRWMutexDelayedRequestTakesNothing.
func TestHoldDelayedRequestTakesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, k := range []struct {
		kind    string
		prefix  string                                                      // of the lock names
		noun    string                                                      // what a holder has
		waiter  func(t *testing.T, c *dlock.Client, name string) holdLocker // the delayed request's
		holder  func(t *testing.T, c *dlock.Client, name string) holdLocker // what the waiter waits behind
		members func(ctx context.Context, rdb redis.Cmdable, name string) []string
	}{
		{"semaphore", "sem", "permit",
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newSemaphore(t, c, name, 1) },
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newSemaphore(t, c, name, 1) },
			members},
		{"rwmutex", "rw", "hold",
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newRW(t, c, name).Writer() },
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newRW(t, c, name).Reader() },
			rwMembers},
	} {
		t.Run(k.kind, func(t *testing.T) {
			for _, retries := range []int{-1, 3} {
				for _, wait := range []bool{false, true} {
					t.Run(fmt.Sprintf("retries=%d/acquire=%v", retries, wait), func(t *testing.T) {
						p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
						ctx := t.Context()
						name := fmt.Sprintf("%s-delayed-%d-%v", k.prefix, retries, wait)
						key := semKey(name)
						c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), pipelined(false))
						s := k.waiter(t, c, name)
						if warm, err := k.waiter(t, c, name+"-warm").TryAcquire(ctx); err == nil { // the scripts are loaded, by this Client
							warm.Release(ctx)
						}
						acquire := s.TryAcquire
						var holder *dlock.Lock
						if wait { // the permit is taken, or a read held: the delayed request would queue
							var err error
							if holder, err = k.holder(t, newClient(t, direct), name).TryAcquire(ctx); err != nil {
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
							t.Errorf("TryAcquire = %v, want the re-sent copy's %s", err, k.noun)
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
						if m := k.members(ctx, direct, name); len(m) != want || liveKeys(ctx, direct, key+":q", key+":qw") != 0 {
							t.Errorf("after the delayed request landed: %ss %v (want %d), queue %v %v: a %s or entry for nobody",
								k.noun, m, want, direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val(), k.noun)
						}
						if holder != nil {
							holder.Release(ctx)
							if m := k.members(ctx, direct, name); len(m) != 0 {
								t.Errorf("%ss after the holder released: %v, want none (given to nobody)", k.noun, m)
							}
						}
					})
				}
			}
		})
	}
}

// go-redis re-sends a command whose reply was lost. An acquire that runs
// twice takes one permit or read hold, and a release that runs twice gives
// back one (not another holder's) and reports the release, not a loss.
//
// One row per kind; this was TestSemaphoreReSentRequestsAreIdempotent and
// TestRWMutexReSentRequestsAreIdempotent.
func TestHoldReSentRequestsAreIdempotent(t *testing.T) {
	for _, k := range []struct {
		kind    string
		name    string
		noun    string                                                      // what a holder has
		locker  func(t *testing.T, c *dlock.Client, name string) holdLocker // ours and the other holder's
		warm    func(t *testing.T, c *dlock.Client, name string) holdLocker
		members func(ctx context.Context, rdb redis.Cmdable, name string) []string
		member  func(token string) string // a holder's member in the set
		again   bool                      // acquire once more after the re-sent release
	}{
		{"semaphore", "sem-resent", "permit",
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newSemaphore(t, c, name, 3) },
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newSemaphore(t, c, name, 1) },
			members, func(tok string) string { return tok }, true},
		{"rwmutex", "rw-resent", "hold",
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newRW(t, c, name).Reader() },
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newRW(t, c, name).Reader() },
			rwMembers, func(tok string) string { return "r:" + tok }, false},
	} {
		t.Run(k.kind, func(t *testing.T) {
			p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
			ctx := t.Context()
			name := k.name
			c := newClient(t, rdb, pipelined(false), dlock.WithAutoExtend(false))
			s := k.locker(t, c, name)
			if warm, err := k.warm(t, c, name+"-warm").TryAcquire(ctx); err == nil { // the scripts are loaded, by this Client
				warm.Release(ctx)
			}
			other, err := k.locker(t, newClient(t, direct), name).TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			var l *dlock.Lock
			err = stallThenCut(t, p, func() (err error) {
				l, err = s.TryAcquire(ctx)
				return err
			}, func() bool { return len(k.members(ctx, direct, name)) == 2 })
			if err != nil {
				t.Fatalf("TryAcquire with its reply lost once = %v, want a %s", err, k.noun)
			}
			if m := k.members(ctx, direct, name); len(m) != 2 {
				t.Errorf("%ss after a re-sent acquire: %v, want 2 (the other's and ours)", k.noun, m)
			}
			err = stallThenCut(t, p, func() error { return l.Release(ctx) },
				func() bool { return len(k.members(ctx, direct, name)) == 1 })
			if err != nil {
				t.Errorf("Release with its reply lost once = %v, want nil (it was held throughout)", err)
			}
			if m := k.members(ctx, direct, name); len(m) != 1 || m[0] != k.member(other.Token()) {
				t.Errorf("%ss after a re-sent release: %v, want the other holder's alone", k.noun, m)
			}
			if err := other.Extend(ctx, 5*time.Second); err != nil {
				t.Errorf("the other holder's Extend after the re-sent release = %v, want held", err)
			}
			if k.again {
				again, err := s.TryAcquire(ctx)
				if err != nil {
					t.Fatalf("TryAcquire after the re-sent release = %v", err)
				}
				again.Release(ctx)
			}
		})
	}
}

// With WithReplicaAck (Sentinel), a permit or a read hold is granted, and
// extended, only once a replica has it: with replication stalled,
// TryAcquire fails with ErrReplicaAck and ErrNotAcquired, and the grant no
// replica acknowledged is undone, leaving no permit or hold on the master.
//
// One row per kind; this was TestSemaphoreReplicaAck and
// TestRWMutexReplicaAck.
func TestHoldReplicaAck(t *testing.T) {
	for _, k := range []struct {
		kind    string
		name    string
		noun    string // what a holder has
		locker  func(t *testing.T, c *dlock.Client, name string) holdLocker
		members func(ctx context.Context, rdb redis.Cmdable, name string) []string
		member  func(token string) string // a holder's member in the set
	}{
		{"semaphore", "sem-acked", "permit",
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newSemaphore(t, c, name, 2) },
			members, func(tok string) string { return tok }},
		{"rwmutex", "rw-acked", "hold",
			func(t *testing.T, c *dlock.Client, name string) holdLocker { return newRW(t, c, name).Reader() },
			rwMembers, func(tok string) string { return "r:" + tok }},
	} {
		t.Run(k.kind, func(t *testing.T) {
			leakcheck.Check(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			master := redistest.Start(t, redistest.TCP(), redistest.Args("--repl-diskless-sync-delay", "0"))
			link := redistest.NewProxy(t, master.Addr())
			replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(link.Port())))
			if !replicaAcks(ctx, master, replica) {
				t.Fatal("the replica never synced")
			}
			rdb := master.Client(t)
			s := k.locker(t, newClient(t, rdb, dlock.WithReplicaAck(1, 2*time.Second), dlock.WithAutoExtend(false)), k.name)
			l, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("acknowledged TryAcquire = %v", err)
			}
			if err := l.Extend(ctx, 5*time.Second); err != nil {
				t.Errorf("acknowledged Extend = %v", err)
			}
			link.Stall()
			defer link.Cut()
			if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrReplicaAck) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire with replication stalled = %v, want ErrReplicaAck and ErrNotAcquired", err)
			}
			if m := k.members(ctx, rdb, k.name); len(m) != 1 || m[0] != k.member(l.Token()) {
				t.Errorf("%ss on the master after the unacknowledged grant was undone: %v, want the first alone", k.noun, m)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}
