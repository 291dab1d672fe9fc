package dlock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// newSemaphore returns c.Semaphore(name, permits), failing the test if it
// is refused.
func newSemaphore(tb testing.TB, c *dlock.Client, name string, permits int) *dlock.Semaphore {
	tb.Helper()
	s, err := c.Semaphore(name, permits)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// semKey is the Redis key of the semaphore name (default prefix).
func semKey(name string) string { return "dlock:{" + name + "}" }

// members returns the permit tokens in the semaphore's sorted set, live or
// not yet dropped.
func members(ctx context.Context, rdb redis.Cmdable, name string) []string {
	return rdb.ZRange(ctx, semKey(name), 0, -1).Val()
}

// span is when one holder held a permit: from Acquire's return to the
// call of Release.
type span struct{ from, to time.Time }

// maxOverlap returns the most spans that overlap at one instant.
func maxOverlap(spans []span) int {
	type event struct {
		at    time.Time
		delta int
	}
	var events []event
	for _, s := range spans {
		events = append(events, event{s.from, 1}, event{s.to, -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	n, most := 0, 0
	for _, e := range events {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// Goroutines of several Clients take permits of one semaphore (N = 3) with
// Acquire and TryAcquire and hold them for a random moment. No more than N
// are ever held: counted in the process as they enter, in Redis, and over
// the recorded holding spans afterwards; every span ends before its
// permit's validity deadline. Both the pipelined path and the direct one.
func TestSemaphoreNeverMoreThanNHolders(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			const permits, clients, perClient, rounds = 3, 4, 5, 40
			name := fmt.Sprint("sem-exclusion-", pipelining)
			var (
				inside, violations, overran, acquired atomic.Int32
				mu                                    sync.Mutex
				spans                                 []span
				wg                                    sync.WaitGroup
			)
			for range clients {
				s := newSemaphore(t, newClient(t, rdb, dlock.LeaseTTL(2*time.Second), pipelined(pipelining)), name, permits)
				for g := range perClient {
					wg.Go(func() {
						for r := range rounds {
							var (
								l   *dlock.Lock
								err error
							)
							if (g+r)%3 == 0 {
								if l, err = s.TryAcquire(ctx); errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() == nil {
									continue
								}
							} else {
								l, err = s.Acquire(ctx)
							}
							if err != nil {
								t.Errorf("acquire a permit: %v", err)
								return
							}
							from := time.Now()
							acquired.Add(1)
							if inside.Add(1) > permits {
								violations.Add(1)
							}
							if n := rdb.ZCard(ctx, semKey(name)).Val(); n > permits {
								violations.Add(1)
							}
							time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
							inside.Add(-1)
							to := time.Now()
							if !to.Before(l.ValidUntil()) {
								overran.Add(1)
							}
							if err := l.Release(ctx); err != nil {
								t.Errorf("Release = %v", err)
							}
							mu.Lock()
							spans = append(spans, span{from, to})
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			if n := violations.Load(); n != 0 {
				t.Errorf("%d times more than %d holders at once, want 0", n, permits)
			}
			if n := overran.Load(); n != 0 {
				t.Errorf("%d holders still held their permit past its validity, want 0", n)
			}
			most := maxOverlap(spans)
			if most > permits {
				t.Errorf("at most %d holding spans overlap, want at most %d", most, permits)
			}
			t.Logf("%d permits taken, at most %d held at once", acquired.Load(), most)
			if left := members(ctx, rdb, name); len(left) != 0 {
				t.Errorf("permits left after every holder released: %v", left)
			}
		})
	}
}

// A semaphore lets N holders in at once and no more; each permit is a lease
// of its own, with its own token, fence, TTL and release.
func TestSemaphorePermitsAreLeases(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const permits = 3
	var held []*dlock.Lock
	for i := range permits {
		l, err := newSemaphore(t, newClient(t, rdb), "sem-leases", permits).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire of permit %d of %d = %v", i+1, permits, err)
		}
		held = append(held, l)
	}
	s := newSemaphore(t, newClient(t, rdb), "sem-leases", permits)
	if l, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with all %d permits held = %v, %v, want ErrNotAcquired", permits, l, err)
	}
	holders, err := s.Holders(ctx)
	if err != nil || len(holders) != permits {
		t.Errorf("Holders = %v, %v, want %d permits", holders, err, permits)
	}
	var last int64
	tokens := map[string]bool{}
	for i, l := range held {
		tokens[l.Token()] = true
		if f := fenceOf(t, l); f <= last {
			t.Errorf("permit %d: Fence = %d, want above the previous permit's %d", i, f, last)
		} else {
			last = f
		}
		if d, err := l.TTL(ctx); err != nil || d <= 0 || d > dlock.DefaultTTL {
			t.Errorf("permit %d: TTL = %v, %v, want in (0, %v]", i, d, err, dlock.DefaultTTL)
		}
	}
	if len(tokens) != permits {
		t.Errorf("%d distinct tokens among %d permits", len(tokens), permits)
	}
	if err := held[0].Extend(ctx, 300*time.Millisecond); err != nil {
		t.Errorf("Extend(300ms) = %v", err)
	}
	if d, _ := held[0].TTL(ctx); d > 300*time.Millisecond {
		t.Errorf("TTL after Extend(300ms) = %v, want at most 300ms", d)
	}
	if d := rdb.PTTL(ctx, semKey("sem-leases")).Val(); d < 9*time.Second {
		t.Errorf("the key expires in %v after one permit was shortened, want with the latest permit (~10s)", d)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after one permit was released = %v", err)
	}
	if f := fenceOf(t, l); f <= last {
		t.Errorf("a later permit's Fence = %d, want above %d", f, last)
	}
	for _, l := range append(held, l) {
		l.Release(ctx)
	}
	if n := rdb.Exists(ctx, semKey("sem-leases")).Val(); n != 0 {
		t.Errorf("the semaphore's key exists after every permit was released")
	}
}

// A permit lost in Redis (its member removed, as an operator or a failover
// could) is noticed by the watchdog: Done closes, Err wraps ErrNotHeld, a
// Fence is refused and Do's function sees its context cancelled.
func TestSemaphoreLostPermitIsTold(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	s := newSemaphore(t, newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond)), "sem-lost", 2)
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.ZRem(ctx, semKey("sem-lost"), l.Token())
	if !closedWithin(l.Done(), 2*time.Second) {
		t.Fatal("Done still open 2s after the permit was removed (watchdog every 100ms)")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Err = %v, want ErrNotHeld", err)
	}
	if _, err := l.Fence(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Fence of a lost permit = %v, want ErrNotHeld", err)
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of a lost permit = %v, want ErrNotHeld", err)
	}

	err = s.Do(ctx, func(ctx context.Context, l *dlock.Lock) error {
		rdb.ZRem(ctx, semKey("sem-lost"), l.Token())
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(2 * time.Second):
			return errors.New("fn's context still open 2s after its permit was removed")
		}
	})
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Do whose permit was lost = %v, want ErrNotHeld", err)
	}
}

// Do gives the permit back when its function returns, and when it panics.
func TestSemaphoreDoReleases(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	s := newSemaphore(t, newClient(t, rdb), "sem-do", 1)
	ran := false
	if err := s.Do(ctx, func(ctx context.Context, l *dlock.Lock) error {
		ran = len(members(ctx, rdb, "sem-do")) == 1
		return nil
	}); err != nil || !ran {
		t.Errorf("Do = %v, fn ran holding a permit: %v", err, ran)
	}
	func() {
		defer func() { recover() }()
		s.Do(ctx, func(context.Context, *dlock.Lock) error { panic("boom") })
	}()
	if left := members(ctx, rdb, "sem-do"); len(left) != 0 {
		t.Errorf("permits left after Do returned and after Do panicked: %v", left)
	}
}

// Waiters get permits in the order they arrived, one per release, and a
// TryAcquire does not take a permit while others are queued.
func TestSemaphoreWaitersServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name, permits, waiters = "sem-fifo", 2, 6
	c := newClient(t, rdb)
	s := newSemaphore(t, c, name, permits)
	var holders []*dlock.Lock
	for range permits {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		ws := newSemaphore(t, newClient(t, rdb), name, permits) // a Client each: independent waiters
		wg.Go(func() {
			l, err := ws.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter %d: Acquire = %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release = %v", i, err)
			}
		})
		if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, semKey(name)+":q").Val() == int64(i+1) }) {
			t.Fatalf("waiter %d never queued", i)
		}
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with waiters queued = %v, want ErrNotAcquired", err)
	}
	holders[0].Release(ctx) // one permit goes round the queue; the other stays held
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2 3 4 5]" {
		t.Errorf("order of the waiters' permits = %v, want arrival order [0 1 2 3 4 5]", order)
	}
	holders[1].Release(ctx)
	if n := liveKeys(ctx, rdb, semKey(name), semKey(name)+":q", semKey(name)+":qw"); n != 0 {
		t.Errorf("%d semaphore or queue keys left after everyone released, want 0", n)
	}
}

// A permit freed by expiry (its holder died) while a waiter is queued goes
// to that waiter, not to a TryAcquire that comes first: the TryAcquire's
// own call hands it over.
func TestSemaphoreTryAcquireDoesNotJumpTheQueue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "sem-nojump"
	s := newSemaphore(t, newClient(t, rdb, dlock.WithAutoExtend(false)), name, 1)
	holder, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := newSemaphore(t, newClient(t, rdb), name, 1).Acquire(ctx)
		if err != nil {
			t.Errorf("queued waiter: Acquire = %v", err)
		}
		got <- l
	}()
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, semKey(name)+":q").Val() == 1 }) {
		t.Fatal("the waiter never queued")
	}
	rdb.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: holder.Token()}) // the holder's deadline has passed
	if l, err := newSemaphore(t, newClient(t, rdb), name, 1).TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Errorf("TryAcquire with a free permit and a waiter queued = %v, want ErrNotAcquired", err)
	}
	select {
	case l := <-got:
		if l != nil {
			if m := members(ctx, rdb, name); len(m) != 1 || m[0] != l.Token() {
				t.Errorf("permits: %v, want the waiter's alone", m)
			}
			l.Release(ctx)
		}
	case <-time.After(5 * time.Second):
		t.Error("the queued waiter was not handed the free permit within 5s")
	}
}

// countEvals counts the scripts a go-redis client sends, pipelined or not
// (n), and every command it sends (all).
type countEvals struct{ n, all atomic.Int64 }

func (h *countEvals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countEvals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *countEvals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *countEvals) count(cmd redis.Cmder) {
	h.all.Add(1)
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		h.n.Add(1)
	}
}

// Bad input gets an error wrapping ErrInvalid, and no Semaphore.
func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	_, nodes := startQuorum(t, 3)
	plain := newClient(t, rdb)
	tooMany := int64(math.MaxInt32) + 1
	for _, tc := range []struct {
		name    string
		c       *dlock.Client
		sem     string
		permits int
	}{
		{"negative permits", plain, "s", -1},
		{"too many permits", plain, "s", int(tooMany)},
		{"empty name", plain, "", 2},
		{"name too long", plain, strings.Repeat("x", dlock.MaxNameLen+1), 2},
		{"reentrant Client", newClient(t, rdb, dlock.WithReentrant(true)), "s", 2},
		{"quorum", newRedlock(t, nodes, 0), "s", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.c.Semaphore(tc.sem, tc.permits)
			if !errors.Is(err, dlock.ErrInvalid) || s != nil {
				t.Errorf("Semaphore(%.20q, %d) = %v, %v, want ErrInvalid", tc.sem, tc.permits, s, err)
			}
		})
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys written by refused calls, want none", n)
	}
}

// A name is a lock or a semaphore: whichever holds it, the other kind gets
// ErrWrongType (TryAcquire and a waiting Acquire alike), and nothing is
// written or left stuck: the holder goes on and releases as usual.
func TestSemaphoreAndLockOfOneNameGetErrWrongType(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(m.ctx(t.Context()), 10*time.Second)
			defer cancel()
			name := "sem-wrongtype-" + m.name
			key := semKey(name)
			queueKeys := func() int64 { return liveKeys(ctx, rdb, key+":q", key+":qw") }

			// A lock holds the name: the semaphore is refused.
			lock, err := m.new(t).TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			s := newSemaphore(t, newClient(t, rdb), name, 3)
			if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
				t.Errorf("Semaphore.TryAcquire on a held lock = %v, want ErrWrongType", err)
			}
			if _, err := s.Acquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
				t.Errorf("Semaphore.Acquire on a held lock = %v, want ErrWrongType", err)
			}
			if _, err := s.Holders(ctx); !errors.Is(err, dlock.ErrWrongType) || prefixes(err.Error()) != 1 {
				t.Errorf("Holders of a held lock = %v, want ErrWrongType, with one dlock: prefix", err)
			}
			if n := queueKeys(); n != 0 {
				t.Errorf("the refused semaphore calls left %d queue keys", n)
			}
			if err := lock.Release(ctx); err != nil {
				t.Errorf("the lock's Release after the refused semaphore calls = %v", err)
			}

			// A semaphore holds the name: the lock is refused.
			permit, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c := m.new(t)
			if _, err := c.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
				t.Errorf("TryAcquire of a name held as a semaphore = %v, want ErrWrongType", err)
			}
			if _, err := c.Acquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
				t.Errorf("Acquire of a name held as a semaphore = %v, want ErrWrongType", err)
			}
			if mm := members(ctx, rdb, name); len(mm) != 1 || mm[0] != permit.Token() || queueKeys() != 0 {
				t.Errorf("after the refused lock calls: permits %v, %d queue keys; want the permit alone", mm, queueKeys())
			}
			if err := permit.Extend(ctx, 5*time.Second); err != nil {
				t.Errorf("the permit's Extend after the refused lock calls = %v", err)
			}
			if err := permit.Release(ctx); err != nil {
				t.Errorf("the permit's Release after the refused lock calls = %v", err)
			}
			if liveKeys(ctx, rdb, key) != 0 {
				t.Errorf("the semaphore's key left after its last permit was released")
			}
		})
	}
}

// N travels with each request: a permit is granted only while fewer than
// the requester's own N are held. Raising N lets more in at once; lowering
// it takes no permit away, and nobody is let in until the holders have
// drained below it. A waiter at the head of the queue whose N is lower
// than the permits held holds up the waiters behind it.
func TestSemaphoreChangingN(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "sem-n"
	c := newClient(t, rdb)
	two, three, one := newSemaphore(t, c, name, 2), newSemaphore(t, c, name, 3), newSemaphore(t, c, name, 1)
	take := func(s *dlock.Semaphore) *dlock.Lock {
		t.Helper()
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire with N=%d and %d held = %v", s.Permits(), len(members(ctx, rdb, name)), err)
		}
		return l
	}
	refused := func(s *dlock.Semaphore) {
		t.Helper()
		if l, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			if l != nil {
				l.Release(ctx)
			}
			t.Errorf("TryAcquire with N=%d and %d held = %v, want ErrNotAcquired", s.Permits(), len(members(ctx, rdb, name)), err)
		}
	}
	a, b := take(two), take(two)
	refused(two)
	x := take(three) // raised: a third at once
	refused(three)
	refused(one) // lowered: nobody is let in ...
	for _, l := range []*dlock.Lock{a, b, x} {
		if err := l.Err(); err != nil {
			t.Errorf("a permit taken under a higher N: Err = %v, want held", err) // ... and nobody is revoked
		}
	}
	a.Release(ctx)
	b.Release(ctx)
	refused(one) // 1 held (x): not below 1 yet
	y := take(two)
	y.Release(ctx)
	semaphoreQueueHeadKeepsItsN(ctx, t, rdb, name, x, func() { refused(three) })
}

// semaphoreQueueHeadKeepsItsN queues a waiter with N=1 before one with N=3
// while x holds the one permit of name: refusedThree must see a refusal for
// N=3 (a permit free, but waiters queued), the N=3 waiter is not served
// before the head, and once x is released both are, N=1 first.
func semaphoreQueueHeadKeepsItsN(ctx context.Context, t *testing.T, rdb *redis.Client, name string, x *dlock.Lock, refusedThree func()) {
	t.Helper()
	type grant struct {
		permits int
		fence   int64
	}
	got := make(chan grant, 2)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	for i, s := range []*dlock.Semaphore{newSemaphore(t, newClient(t, rdb), name, 1), newSemaphore(t, newClient(t, rdb), name, 3)} {
		wg.Go(func() {
			l, err := s.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter with N=%d: Acquire = %v", s.Permits(), err)
				got <- grant{-1, 0}
				return
			}
			got <- grant{s.Permits(), fenceOf(t, l)} // (a handover's fence comes with it, issued as granted)
			<-done
			l.Release(context.WithoutCancel(ctx))
		})
		if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, semKey(name)+":q").Val() == int64(i+1) }) {
			t.Fatalf("waiter %d never queued", i)
		}
	}
	refusedThree() // a permit is free for N=3, but waiters are queued
	select {
	case g := <-got:
		t.Errorf("the waiter with N=%d got a permit while the head of the queue (N=1) may not have one", g.permits)
	case <-time.After(300 * time.Millisecond):
	}
	x.Release(ctx) // 0 held: the N=1 waiter gets one, then the N=3 waiter behind it
	var grants []grant
	for range 2 {
		select {
		case g := <-got:
			grants = append(grants, g)
		case <-time.After(5 * time.Second):
			t.Fatalf("waiters served after the last release: %v, want both", grants)
		}
	}
	// The two are woken at about the same time; the order of their grants
	// is the order of their fences.
	slices.SortFunc(grants, func(a, b grant) int { return cmp.Compare(a.fence, b.fence) })
	if grants[0].permits != 1 || grants[1].permits != 3 {
		t.Errorf("waiters granted in the order of their N: %v, want N=1 then N=3", grants)
	}
}

// Semaphores used once each, with waiters handed permits on some, leave
// nothing in Redis once the windows have passed but fence counters, each
// for its minute: no permit, queue or marker key.
func TestSemaphoreNothingLeftPerName(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const names, workers = 2000, 16
	ttl := 2 * time.Second
	c := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < names; i += workers {
				name := fmt.Sprint("sem-left:", i)
				s, err := c.Semaphore(name, 2)
				if err != nil {
					t.Error(err)
					return
				}
				a, err := s.TryAcquire(ctx)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				b, err := s.TryAcquire(ctx)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				if i%100 == 0 {
					fenceOf(t, a) // a counter for a minute
				}
				var got chan *dlock.Lock
				if i%20 == 0 { // a waiter, handed a's permit
					got = make(chan *dlock.Lock, 1)
					go func() {
						l, err := s.Acquire(ctx)
						if err != nil {
							t.Errorf("%s: waiter: %v", name, err)
						}
						got <- l
					}()
					if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, semKey(name)+":q").Val() == 1 }) {
						t.Errorf("%s: the waiter never queued", name)
					}
				}
				a.Release(ctx)
				if got != nil {
					if l := <-got; l != nil {
						l.Release(ctx)
					}
				}
				b.Release(ctx)
			}
		})
	}
	wg.Wait()
	var left []string
	waitFor(ttl+2*time.Second, func() bool {
		left = left[:0]
		iter := rdb.Scan(ctx, 0, "dlock:*", 1000).Iterator()
		for iter.Next(ctx) {
			if !strings.HasSuffix(iter.Val(), ":fence") {
				left = append(left, iter.Val())
			}
		}
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Errorf("%d keys left after the windows, e.g. %v", len(left), left[:min(3, len(left))])
	}
	iter := rdb.Scan(ctx, 0, "dlock:*:fence", 1000).Iterator()
	for iter.Next(ctx) {
		if d := rdb.PTTL(ctx, iter.Val()).Val(); d <= 0 || d > time.Minute {
			t.Errorf("%s lives %v, want at most the fence window (1m)", iter.Val(), d)
		}
	}
}

// Per-call options apply to a permit's lease: its lease time (the permit's
// own TTL in Redis, in Holders and in the key's expiry), its metadata
// (Holders, Permit.Meta), the wait (MaxWait ends it with ErrNotAcquired and
// no context error) and its max hold. The next call without options gets
// the Client's again: nothing leaks from one call to the next. A refusal
// carries a *NotAcquiredError that names the semaphore and its N.
func TestSemaphoreLockOptions(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const name = "sem-options"
	s := newSemaphore(t, newClient(t, rdb, dlock.LeaseTTL(30*time.Second), dlock.HolderMeta("client-meta")), name, 3)
	a, err := s.Acquire(ctx, dlock.LeaseTTL(2*time.Second), dlock.HolderMeta("exporter-a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx, dlock.LeaseTTL(time.Second), dlock.HolderMeta("exporter-b"))
	if err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(ctx, semKey(name)).Val(); d <= 0 || d > 2*time.Second {
		t.Errorf("PTTL of the semaphore holding permits of LeaseTTL(2s) and (1s) = %v, want at most 2s", d)
	}
	want := map[string]struct {
		meta string
		ttl  time.Duration
	}{a.Token(): {"exporter-a", 2 * time.Second}, b.Token(): {"exporter-b", time.Second}}
	checkRefused := func(what string, err error) { t.Helper(); semaphoreRefusedFull(t, what, err, name) }
	err = s.Do(ctx, func(ctx context.Context, l *dlock.Lock) error {
		want[l.Token()] = struct {
			meta string
			ttl  time.Duration
		}{"exporter-c", 1500 * time.Millisecond}
		hs, err := s.Holders(ctx)
		if err != nil || len(hs) != 3 {
			t.Errorf("Holders = %+v, %v; want 3 permits", hs, err)
		}
		for _, h := range hs {
			if w := want[h.Token]; h.Meta != w.meta || h.TTL <= 0 || h.TTL > w.ttl {
				t.Errorf("Holders: permit %+v, want metadata %q and a TTL within %v", h, w.meta, w.ttl)
			}
		}
		_, err = s.TryAcquire(ctx)
		checkRefused("TryAcquire of a 4th permit of 3", err)
		_, err = s.Acquire(ctx, dlock.MaxWait(200*time.Millisecond))
		checkRefused("Acquire(MaxWait(200ms)) of a 4th permit of 3", err)
		if !strings.Contains(fmt.Sprint(err), "MaxWait") {
			t.Errorf("Acquire(MaxWait(200ms)) = %v, want it to say that the wait ran out", err)
		}
		if n := rdb.LLen(ctx, semKey(name)+":q").Val(); n != 0 {
			t.Errorf("the waiter that waited out its MaxWait left %d queue entries", n)
		}
		called := false
		err = s.Do(ctx, func(context.Context, *dlock.Lock) error { called = true; return nil }, dlock.MaxWait(0))
		checkRefused("Do(MaxWait(0)) of a 4th permit of 3", err)
		if called {
			t.Error("Do(MaxWait(0)) ran fn without a permit")
		}
		return nil
	}, dlock.LeaseTTL(1500*time.Millisecond), dlock.HolderMeta("exporter-c"))
	if err != nil {
		t.Fatalf("Do(LeaseTTL(1.5s), HolderMeta) = %v", err)
	}

	// The next permit, asked for without options, is the Client's.
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := p.TTL(ctx); p.Meta() != "client-meta" || err != nil || d <= 10*time.Second {
		t.Errorf("a permit without options after permits with them: Meta %q, TTL %v, %v; want the Client's (30s)", p.Meta(), d, err)
	}
	if d := rdb.PTTL(ctx, semKey(name)).Val(); d <= 10*time.Second {
		t.Errorf("PTTL of the semaphore with a permit of the Client's TTL = %v, want about 30s", d)
	}
	for _, l := range []*dlock.Lock{a, b, p} {
		l.Release(ctx)
	}
	semaphoreMaxHold(ctx, t, rdb, s, name)
}

// semaphoreRefusedFull checks that err is a refusal of a 4th permit of the
// 3 of name, all taken: ErrNotAcquired alone, with a NotAcquiredError that
// names the semaphore, its permits and the soonest end within 2s, and says
// "dlock: " once.
func semaphoreRefusedFull(t *testing.T, what string, err error, name string) {
	t.Helper()
	na, ok := errors.AsType[*dlock.NotAcquiredError](err)
	switch {
	case !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		t.Errorf("%s = %v, want ErrNotAcquired alone", what, err)
	case !ok || na.Name != name || na.Permits != 3 || na.Holder != "" || na.Meta != "" || na.TTL <= 0 || na.TTL > 2*time.Second:
		t.Errorf("%s = %v: NotAcquiredError %+v, want one naming %q and its 3 permits, the soonest ending within 2s", what, err, na, name)
	case prefixes(err.Error()) != 1 || !strings.Contains(err.Error(), "no permit free"):
		t.Errorf("%s = %q, want one dlock: prefix and the reason", what, err)
	}
}

// semaphoreMaxHold: MaxHold ends a permit of s with a loss that says why,
// and gives it back; Do's fn sees the cause; the next permit has no cap.
func semaphoreMaxHold(ctx context.Context, t *testing.T, rdb *redis.Client, s *dlock.Semaphore, name string) {
	t.Helper()
	m, err := s.Acquire(ctx, dlock.MaxHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	endedByMaxHold(t, "permit", m)
	if !waitFor(10*time.Second, func() bool { return !slices.Contains(members(ctx, rdb, name), m.Token()) }) {
		t.Errorf("the permit ended by its max hold is still in Redis: %v", members(ctx, rdb, name))
	}
	var cause error
	err = s.Do(ctx, func(ctx context.Context, l *dlock.Lock) error {
		cause = doneCause(ctx)
		return nil
	}, dlock.MaxHold(300*time.Millisecond))
	if !errors.Is(cause, dlock.ErrMaxHold) || !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Do(MaxHold(300ms)): fn's cause %v, Do's error %v; want both ErrMaxHold", cause, err)
	}
	if l, err := s.TryAcquire(ctx); err != nil {
		t.Errorf("TryAcquire after permits with a max hold = %v", err)
	} else {
		if _, capped := l.Deadline(); capped {
			t.Error("a permit without options after one with MaxHold: Deadline() ok, want no cap")
		}
		l.Release(ctx)
	}
}

// Invalid options, and options that do not apply, fail every acquisition
// of a permit with ErrInvalid before anything is sent to Redis.
func TestSemaphoreLockOptionsBadInputSendsNothing(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	rdb := srv.Client(t)
	sent := &countEvals{}
	rdb.AddHook(sent)
	s := newSemaphore(t, newClient(t, rdb), "sem-bad-options", 2)
	ctx := t.Context()
	checkBadLockOptions(t, func(opts ...dlock.LockOption) error {
		_, err := s.TryAcquire(ctx, opts...)
		return err
	}, func(opts ...dlock.LockOption) error {
		_, err := s.Acquire(ctx, opts...)
		return err
	}, func(called *bool, opts ...dlock.LockOption) error {
		return s.Do(ctx, func(context.Context, *dlock.Lock) error { *called = true; return nil }, opts...)
	})
	if n := sent.all.Load(); n != 0 {
		t.Errorf("refused calls sent %d commands, want none", n)
	}
}

// A permit forced past its deadline (not dropped) is dropped by the next
// grant; its Release then reports ErrNotHeld, and never more than N live.
func TestSemaphoreLapsedPermitDroppedByTheNextGrant(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "sem-lapsed"
	s := newSemaphore(t, newClient(t, rdb, dlock.WithAutoExtend(false)), name, 2)
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: a.Token()})
	c, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire past a lapsed permit = %v", err)
	}
	if _, err := s.TryAcquire(ctx); err == nil {
		t.Fatal("a third live permit of 2")
	}
	if err := a.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of the lapsed permit whose place was taken = %v, want ErrNotHeld", err)
	}
	b.Release(ctx)
	c.Release(ctx)
}
