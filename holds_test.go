package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/script"
)

// Tests of the hold engine (hold_*.lua) that semaphores and read-write
// locks share: a semaphore's permits and a read-write lock's holds are
// members of a sorted set at the name's key, granted, extended and released by the same
// scripts, so their cases run side by side here.

// Randomized: semaphore N=2 (and a read-write lock) with forced lapses;
// after each step, the live members never exceed N, and a Release that
// reports success was not overtaken.
func TestHoldRandomLapsesNeverExceedN(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "sem-rand"
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
// taken at first), is refused and grants nothing. A copy can exist only
// for a lease that ends marked: here a resumed one, whose first holder's
// requests may still be in flight.
func TestHoldLateAcquireCopyAfterReleaseTakesNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	for _, what := range []any{"2", "r", "w"} {
		name := "late-acq-" + what.(string)
		var l *dlock.Lock
		var err error
		member := func(tok string) string { return tok }
		var h interface {
			TryAcquire(context.Context, ...dlock.LockOption) (*dlock.Lock, error)
		}
		switch what {
		case "2":
			h = newSemaphore(t, c, name, 2)
		case "r":
			h = newRW(t, c, name).Reader()
			member = func(tok string) string { return "r:" + tok }
		default:
			h = newRW(t, c, name).Writer()
			member = func(tok string) string { return "w:" + tok }
		}
		if l, err = h.TryAcquire(ctx); err == nil {
			l, err = h.TryAcquire(ctx, dlock.Resume(l.Token()))
		}
		if err != nil {
			t.Fatal(err)
		}
		tok, key := l.Token(), l.Key()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		keys := []string{key, key + ":fence", key + ":q", key + ":qw", key + ":r:" + tok}
		err = script.Named("hold_acquire").Run(ctx, rdb, keys, tok, 10000, 1, 10000, key+":ch", "PUBLISH", 10000, what).Err()
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
	// Serial: a request held in the proxy must cross into it within 100ms, and the caller's give-up beat its 300ms read timeout; a busy machine outlasts them.
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, k := range []delayedHoldKind{
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
						delayedHoldRequest(t, k, retries, wait)
					})
				}
			}
		})
	}
}

// delayedHoldKind is a kind of hold for TestHoldDelayedRequestTakesNothing.
type delayedHoldKind struct {
	kind    string
	prefix  string                                                      // of the lock names
	noun    string                                                      // what a holder has
	waiter  func(t *testing.T, c *dlock.Client, name string) holdLocker // the delayed request's
	holder  func(t *testing.T, c *dlock.Client, name string) holdLocker // what the waiter waits behind
	members func(ctx context.Context, rdb redis.Cmdable, name string) []string
}

// delayedHoldRequest sends a hold's acquisition (with go-redis's retries
// off or on, a TryAcquire or an Acquire behind a holder) through a proxy
// that delays it past the 300ms read timeout, then lets the undo (or the
// re-sent copy) through: once the delayed original has landed, it must
// have taken nothing and queued nothing.
func delayedHoldRequest(t *testing.T, k delayedHoldKind, retries int, wait bool) {
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
	d := delayThenLetThrough(p, rdb)
	l, err := acquire(ctx)
	<-d.done
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
	time.Sleep(time.Until(d.landed())) // the delayed original has landed
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
}

// go-redis re-sends a command whose reply was lost. An acquire that runs
// twice takes one permit or read hold, and a release that runs twice gives
// back one (not another holder's) and reports the release, not a loss.
//
// One row per kind; this was TestSemaphoreReSentRequestsAreIdempotent and
// TestRWMutexReSentRequestsAreIdempotent.
func TestHoldReSentRequestsAreIdempotent(t *testing.T) {
	t.Parallel()
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
			oldServer(t, direct)                           // (a lost release reply is told by the server's uptime)
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
	t.Parallel()
	long(t)
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
			master, _, link := replicated(t, ctx)
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

// A waiter is woken by the release that hands it the permit, not by a
// timer or by polling: with a TTL of 30s its fallback timer is 10s away,
// yet it has the permit at once, and it sends no script between queueing
// and holding (the handover message carries the grant).
func TestSemaphoreWaiterIsWokenByTheRelease(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			name := fmt.Sprint("sem-woken-", pipelining)
			opts := []dlock.Option{dlock.LeaseTTL(30 * time.Second), pipelined(pipelining)}
			holder, err := newSemaphore(t, newClient(t, rdb, opts...), name, 1).TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wrdb := s.Client(t)
			evals := &countEvals{}
			wrdb.AddHook(evals)
			ws := newSemaphore(t, newClient(t, wrdb, opts...), name, 1)
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, err := ws.Acquire(ctx)
				if err != nil {
					t.Errorf("waiter: Acquire = %v", err)
				}
				got <- l
			}()
			subscribed := func() bool {
				return rdb.PubSubNumSub(ctx, semKey(name)+":ch").Val()[semKey(name)+":ch"] == 1
			}
			if !waitFor(5*time.Second, func() bool { return subscribed() && evals.n.Load() >= 2 }) {
				t.Fatalf("the waiter never queued and subscribed (%d scripts sent)", evals.n.Load())
			}
			time.Sleep(100 * time.Millisecond) // asleep now
			before := evals.n.Load()
			released := time.Now()
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			var l *dlock.Lock
			select {
			case l = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter still waits 5s after the release (its timer: 10s)")
			}
			if l == nil {
				return
			}
			defer l.Release(ctx)
			t.Logf("woken %v after the release; %d scripts sent while waiting", time.Since(released), before)
			if after := evals.n.Load(); after != before {
				t.Errorf("the waiter sent %d scripts after the release, want none: the handover grants the permit", after-before)
			}
			if m := members(ctx, rdb, name); len(m) != 1 || m[0] != l.Token() {
				t.Errorf("permits: %v, want the waiter's alone", m)
			}
		})
	}
}

// A waiting writer sleeps until the last read's release grants it the
// lock: it sends no script after the release.
func TestRWMutexWaiterIsWokenByTheRelease(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "rw-woken"
	opts := []dlock.Option{dlock.LeaseTTL(30 * time.Second)}
	rw := newRW(t, newClient(t, rdb, opts...), name)
	r1, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wrdb := s.Client(t)
	evals := &countEvals{}
	wrdb.AddHook(evals)
	writer := newRW(t, newClient(t, wrdb, opts...), name).Writer()
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := writer.Acquire(ctx)
		if err != nil {
			t.Errorf("writer: Acquire = %v", err)
		}
		got <- l
	}()
	subscribed := func() bool { return rdb.PubSubNumSub(ctx, semKey(name)+":ch").Val()[semKey(name)+":ch"] == 1 }
	if !waitFor(5*time.Second, func() bool { return subscribed() && evals.n.Load() >= 2 }) {
		t.Fatalf("the writer never queued and subscribed (%d scripts sent)", evals.n.Load())
	}
	time.Sleep(100 * time.Millisecond) // asleep now
	before := evals.n.Load()
	r1.Release(ctx)
	select {
	case <-got:
		t.Fatal("the writer was granted the lock while a read is still held")
	case <-time.After(200 * time.Millisecond):
	}
	r2.Release(ctx)
	var l *dlock.Lock
	select {
	case l = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer still waits 5s after the last read was released (its timer: 10s)")
	}
	if l == nil {
		return
	}
	defer l.Release(ctx)
	if after := evals.n.Load(); after != before {
		t.Errorf("the writer sent %d scripts after it queued, want none: the last release grants it the lock", after-before)
	}
}

// Waiters that give up (their context ends at random moments, while
// permits are handed along) leave nothing behind: no permit handed to a
// waiter that is gone stays held, and the queue empties.
func TestSemaphoreWaitersThatGiveUpLeaveNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			name := fmt.Sprint("sem-giveup-", pipelining)
			var wg sync.WaitGroup
			for g := range 8 {
				s := newSemaphore(t, newClient(t, rdb, pipelined(pipelining)), name, 2)
				wg.Go(func() {
					for range 25 {
						wctx, wcancel := context.WithTimeout(ctx, time.Duration(1+rand.IntN(20))*time.Millisecond)
						l, err := s.Acquire(wctx)
						wcancel()
						switch {
						case err == nil:
							time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
							if err := l.Release(ctx); err != nil {
								t.Errorf("goroutine %d: Release = %v", g, err)
							}
						case !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded):
							t.Errorf("goroutine %d: Acquire = %v, want ErrNotAcquired and DeadlineExceeded", g, err)
						}
					}
				})
			}
			wg.Wait()
			key := semKey(name)
			if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, rdb, key, key+":q", key+":qw") == 0 }) {
				t.Errorf("left 5s after every waiter gave up or released: permits %v, queue %v",
					members(ctx, rdb, name), rdb.LRange(ctx, key+":q", 0, -1).Val())
			}
		})
	}
}

// Waiters of both kinds that give up at random moments leave nothing
// behind: no hold granted to a waiter that is gone stays, the queue empties.
func TestRWMutexWaitersThatGiveUpLeaveNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "rw-giveup"
	var wg sync.WaitGroup
	for g := range 8 {
		rw := newRW(t, newClient(t, rdb), name)
		wg.Go(func() {
			for range 25 {
				side := rw.Reader()
				if rand.IntN(3) == 0 {
					side = rw.Writer()
				}
				wctx, wcancel := context.WithTimeout(ctx, time.Duration(1+rand.IntN(20))*time.Millisecond)
				l, err := side.Acquire(wctx)
				wcancel()
				switch {
				case err == nil:
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					if err := l.Release(ctx); err != nil {
						t.Errorf("goroutine %d: Release = %v", g, err)
					}
				case !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded):
					t.Errorf("goroutine %d: Acquire = %v, want ErrNotAcquired and DeadlineExceeded", g, err)
				}
			}
		})
	}
	wg.Wait()
	key := semKey(name)
	if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, rdb, key, key+":q", key+":qw") == 0 }) {
		t.Errorf("left 5s after every waiter gave up or released: holds %v, queue %v",
			rwMembers(ctx, rdb, name), rdb.LRange(ctx, key+":q", 0, -1).Val())
	}
}

// Releasing a permit twice frees one permit, not two: the second Release
// returns nil and changes nothing; a late Release of a permit that expired
// reports ErrNotHeld and frees nobody else's.
func TestSemaphoreReleaseTwiceFreesOnePermit(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "sem-twice"
	s := newSemaphore(t, newClient(t, rdb), name, 2)
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := a.Release(ctx); err != nil {
			t.Errorf("Release #%d = %v, want nil", i+1, err)
		}
	}
	if m := members(ctx, rdb, name); len(m) != 1 || m[0] != b.Token() {
		t.Errorf("permits after releasing one twice: %v, want the other's alone", m)
	}
	c, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after one release = %v", err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with 2 of 2 held after a double release = %v, want ErrNotAcquired", err)
	}
	rdb.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: b.Token()}) // b's deadline passes
	d, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a permit expired = %v", err)
	}
	if err := b.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of an expired permit = %v, want ErrNotHeld", err)
	}
	if m := members(ctx, rdb, name); len(m) != 2 || !slices.Contains(m, c.Token()) || !slices.Contains(m, d.Token()) {
		t.Errorf("permits after an expired permit's Release: %v, want the two live ones", m)
	}
	c.Release(ctx)
	d.Release(ctx)
}

// Releasing a hold twice frees it once: the second Release returns nil and
// changes nothing; a late Release of a hold that expired reports
// ErrNotHeld and frees nobody else's.
func TestRWMutexReleaseTwice(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-twice"
	rw := newRW(t, newClient(t, rdb), name)
	a, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := a.Release(ctx); err != nil {
			t.Errorf("Release #%d = %v, want nil", i+1, err)
		}
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 1 || m[0] != "r:"+b.Token() {
		t.Errorf("holds after releasing one twice: %v, want the other read alone", m)
	}
	rdb.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: "r:" + b.Token()}) // b's deadline passes
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("write TryAcquire once the last read expired = %v", err)
	}
	if err := b.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of an expired read = %v, want ErrNotHeld", err)
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 1 || m[0] != "w:"+w.Token() {
		t.Errorf("holds after an expired read's Release: %v, want the write alone", m)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("the write's Extend = %v", err)
	}
	w.Release(ctx)
}

// A holder that stops without releasing frees its permit at the end of
// its TTL, without anyone releasing it: with the watchdog off in this
// process, and a worker process killed with SIGKILL while its watchdog ran.
func TestSemaphoreDeadHolderFreesItsPermitAfterTTL(t *testing.T) {
	t.Parallel()
	long(t)
	s, rdb := setup(t)
	t.Run("not-released", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		const ttl = 600 * time.Millisecond
		dead := newSemaphore(t, newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false)), "sem-dead", 2)
		var stopped []*dlock.Lock
		for range 2 {
			l, err := dead.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stopped = append(stopped, l) // and never released
		}
		start := time.Now()
		w, err := newSemaphore(t, newClient(t, rdb), "sem-dead", 2).Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire behind two holders that stopped = %v, want a permit after their TTL", err)
		}
		defer w.Release(ctx)
		got := time.Now()
		first := stopped[0].ValidUntil()
		if v := stopped[1].ValidUntil(); v.Before(first) {
			first = v
		}
		if got.Before(first) {
			t.Errorf("a permit was granted %v before the first stopped holder's validity ended", first.Sub(got))
		}
		if d := got.Sub(start); d > ttl+1500*time.Millisecond {
			t.Errorf("a permit was granted %v after the holders stopped, want about their TTL (%v)", d, ttl)
		}
		for i, l := range stopped {
			// (The waiter's permit is the first to expire's: on a loaded
			// machine the second holder took its permit later, and its
			// validity may still run.)
			if !closedWithin(l.Done(), 5*time.Second) {
				t.Fatalf("stopped holder %d still valid 5s after the waiter got its permit", i)
			}
			if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("stopped holder %d: Err = %v, want ErrNotHeld", i, err)
			}
			if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("stopped holder %d: Release = %v, want ErrNotHeld", i, err)
			}
		}
		if m := members(ctx, rdb, "sem-dead"); len(m) != 1 || m[0] != w.Token() {
			t.Errorf("permits after the stopped holders' late Release: %v, want the waiter's alone", m)
		}
	})
	t.Run("process-killed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
		defer cancel()
		const ttl = 2 * time.Second
		h := startHelper(t, s, "hold", "sem-killed", ttl, 0, "DLOCK_PERMITS=1")
		if !h.waitLine("held", 30*time.Second) { // (a process started on a loaded machine)
			t.Fatalf("the worker never took its permit: %s", h.out.String())
		}
		sem := newSemaphore(t, newClient(t, rdb), "sem-killed", 1)
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while the worker holds the permit = %v, want ErrNotAcquired", err)
		}
		time.Sleep(2 * ttl) // the worker's watchdog keeps its permit
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire 2 TTLs later = %v, want ErrNotAcquired (the watchdog extends it)", err)
		}
		h.kill()
		killed := time.Now()
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire after the holder was killed = %v", err)
		}
		defer l.Release(ctx)
		if d := time.Since(killed); d > ttl+1500*time.Millisecond {
			t.Errorf("the killed holder's permit was free %v after the kill, want within its TTL (%v)", d, ttl)
		}
	})
}

// A reader that stops without releasing frees its hold at its TTL: a
// writer gets the lock then, not before the reader's validity ended, and
// no read is left counted.
func TestRWMutexDeadReaderFreesItsHold(t *testing.T) {
	t.Parallel()
	long(t)
	s, rdb := setup(t)
	t.Run("not-released", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		const name, ttl = "rw-dead", 600 * time.Millisecond
		dead := newRW(t, newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false)), name)
		var stopped []*dlock.Lock
		for range 2 {
			l, err := dead.Reader().TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stopped = append(stopped, l) // and never released
		}
		start := time.Now()
		w, err := newRW(t, newClient(t, rdb), name).Writer().Acquire(ctx)
		if err != nil {
			t.Fatalf("write Acquire behind two readers that stopped = %v, want the lock after their TTL", err)
		}
		got := time.Now()
		for i, l := range stopped {
			if got.Before(l.ValidUntil()) {
				t.Errorf("the write was granted %v before stopped reader %d's validity ended", l.ValidUntil().Sub(got), i)
			}
		}
		if d := got.Sub(start); d > ttl+1500*time.Millisecond {
			t.Errorf("the write was granted %v after the readers stopped, want about their TTL (%v)", d, ttl)
		}
		for i, l := range stopped {
			if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("stopped reader %d: Release = %v, want ErrNotHeld", i, err)
			}
		}
		if m := rwMembers(ctx, rdb, name); len(m) != 1 || m[0] != "w:"+w.Token() {
			t.Errorf("holds after the stopped readers' late Release: %v, want the write alone", m)
		}
		w.Release(ctx)
	})
	t.Run("process-killed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
		defer cancel()
		const ttl = 2 * time.Second
		h := startHelper(t, s, "hold", "rw-killed", ttl, 0, "DLOCK_RW=r")
		if !h.waitLine("held", 30*time.Second) { // (a process started on a loaded machine)
			t.Fatalf("the worker never took its read: %s", h.out.String())
		}
		rw := newRW(t, newClient(t, rdb), "rw-killed")
		if l, err := rw.Reader().TryAcquire(ctx); err != nil {
			t.Errorf("read TryAcquire beside the worker's read = %v, want a hold", err)
		} else {
			l.Release(ctx)
		}
		time.Sleep(2 * ttl) // the worker's watchdog keeps its read
		if _, err := rw.Writer().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("write TryAcquire 2 TTLs later = %v, want ErrNotAcquired (the watchdog extends the read)", err)
		}
		h.kill()
		killed := time.Now()
		l, err := rw.Writer().Acquire(ctx)
		if err != nil {
			t.Fatalf("write Acquire after the reader was killed = %v", err)
		}
		defer l.Release(ctx)
		if d := time.Since(killed); d > ttl+1500*time.Millisecond {
			t.Errorf("the killed reader's hold was free %v after the kill, want within its TTL (%v)", d, ttl)
		}
	})
}

// A permit or read handed over to a waiter from the queue extends like any
// other: its queue marker ("q") is not the number of an applied extension,
// which would make a lengthening extension count as a late copy.
func TestHoldGrantedFromTheQueueExtends(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(2*time.Second))
	s, err := c.Semaphore("queued-ext", 1)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("queued-ext-rw")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		first, next interface {
			Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
		}
		lock string // the name the waiter queues on
	}{
		{"permit", s, s, "queued-ext"},
		{"read after a write", rw.Writer(), rw.Reader(), "queued-ext-rw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, err := tc.first.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, err := tc.next.Acquire(ctx, dlock.MaxWait(5*time.Second))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			if !queued(ctx, rdb, tc.lock, 1) {
				t.Fatal("the waiter never queued behind the first")
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l == nil {
				return
			}
			defer l.Release(ctx)
			if err := l.Extend(ctx, 5*time.Second); err != nil {
				t.Fatalf("Extend of a hold granted from the queue = %v, want nil", err)
			}
			if left := time.Until(l.ValidUntil()); left < 4*time.Second {
				t.Errorf("validity after Extend(5s) is %v", left)
			}
		})
	}
}
