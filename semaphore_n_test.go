package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// Several permits at once (Semaphore.AcquireN): one Lock for n permits,
// counted as n by everyone, released, extended and fenced as one.
func TestSemaphoreAcquireN(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "sem-n"
	c := newClient(t, rdb)
	s := newSemaphore(t, c, name, 5)

	three, err := s.AcquireN(ctx, 3, dlock.MaxWait(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, semKey(name)).Val(); n != 3 {
		t.Fatalf("members after AcquireN(3) = %d, want 3", n)
	}
	if _, err := s.AcquireN(ctx, 3, dlock.MaxWait(50*time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("AcquireN(3) with 3 of 5 held = %v, want ErrNotAcquired", err)
	}
	one, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a single permit with 3 of 5 held: %v", err)
	}
	hs, err := s.Holders(ctx)
	if err != nil || len(hs) != 2 {
		t.Fatalf("Holders = %v, %v; want two holds", hs, err)
	}
	for _, h := range hs {
		if want := map[string]int{three.Token(): 3, one.Token(): 1}[h.Token]; h.Count != want {
			t.Errorf("Holders: %s counts %d, want %d", h.Token, h.Count, want)
		}
	}
	if f, err := three.Fence(ctx); err != nil || f <= 0 {
		t.Errorf("Fence of a hold of 3 = %d, %v", f, err)
	}
	if err := three.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{three.Token(), three.Token() + " 2", three.Token() + " 3"} {
		if left := rdb.ZScore(ctx, semKey(name), m).Val() - float64(time.Now().UnixMilli()); left < 15000 {
			t.Errorf("member %q has %.0fms left after Extend(20s)", m, left)
		}
	}
	if err := three.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, semKey(name)).Val(); n != 1 {
		t.Fatalf("members after releasing the 3 = %d, want 1", n)
	}
	four, err := s.AcquireN(ctx, 4, dlock.MaxWait(time.Nanosecond))
	if err != nil {
		t.Fatalf("AcquireN(4) with 1 of 5 held: %v", err)
	}
	if ok, err := c.ForceRelease(ctx, name); !ok || err != nil {
		t.Fatalf("ForceRelease over a hold of 4 = %v, %v", ok, err)
	}
	four.Release(ctx)
	one.Release(ctx)

	for _, n := range []int{0, -1, 6} {
		if _, err := s.AcquireN(ctx, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("AcquireN(%d) of 5 = %v, want ErrInvalid", n, err)
		}
	}
	// (Redis refuses 6: the size in force could be one kept there, above 5.)
	if _, err := s.AcquireN(ctx, 6); err == nil || !strings.HasSuffix(err.Error(), "asks 6 permits of a semaphore of 5") {
		t.Errorf("AcquireN(6) of 5 = %v, want its refusal to say the size", err)
	}
}

// Callers wanting several permits never deadlock and never hold more than N
// between them (two callers taking 3 of 10 one by one can); a caller
// wanting all N is not starved by a stream of single permits.
func TestSemaphoreAcquireNConcurrent(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name, permits = "sem-n-many", 10
	var held, most atomic.Int32
	take := func(c *dlock.Client, n int) error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := newSemaphore(t, c, name, permits).AcquireN(wctx, n)
		if err != nil {
			return err
		}
		now := held.Add(int32(n))
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		held.Add(-int32(n))
		return l.Release(ctx)
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(4 * time.Second)
	for g := range 8 {
		c := newClient(t, redis.NewClient(rdb.Options()))
		wg.Go(func() {
			for i := 0; i < 15 && time.Now().Before(deadline); i++ {
				if err := take(c, 1+(g+i)%4); err != nil {
					t.Errorf("AcquireN: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > permits {
		t.Errorf("%d permits held at once, N is %d", most.Load(), permits)
	}

	// All ten, against a stream of singles.
	stop := make(chan struct{})
	var singles sync.WaitGroup
	for range 4 {
		c := newClient(t, redis.NewClient(rdb.Options()))
		singles.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := take(c, 1); err != nil && ctx.Err() == nil {
					t.Errorf("a single permit: %v", err)
					return
				}
			}
		})
	}
	if !waitFor(5*time.Second, func() bool { return held.Load() > 0 }) { // the singles stream
		t.Fatal("no single permit was taken")
	}
	all := make(chan error, 1)
	go func() { all <- take(newClient(t, rdb), permits) }()
	select {
	case err := <-all:
		if err != nil {
			t.Errorf("AcquireN(all) among singles: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Error("AcquireN(all) starved by a stream of single permits for 8s")
	}
	close(stop)
	singles.Wait()
	if most.Load() > permits {
		t.Errorf("%d permits held at once, N is %d", most.Load(), permits)
	}
}

// liveMembers returns the semaphore's members whose deadline is ahead of
// the server's clock, and the time it read.
func liveMembers(ctx context.Context, rdb *redis.Client, key string) []string {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil
	}
	return rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key, ByScore: true, Start: "(" + strconv.FormatInt(now.UnixMilli(), 10), Stop: "+inf"}).Val()
}

// Mixed k (1..N, N included) on one name, with a chaos goroutine that makes
// whole holds lapse server-side (ZADD XX of a small score on all members of
// a hold): live members never exceed N, a hold's members are all there or
// none, and Holders' counts add up to the live members.
func TestSemaphoreMixedAcquireNUnderLapsesNeverOverN(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	ctx := t.Context()
	const name, N = "mixed", 4
	key := semKey(name)
	var bad atomic.Int64
	var mu sync.Mutex
	var errs []string
	report := func(s string) {
		bad.Add(1)
		mu.Lock()
		if len(errs) < 10 {
			errs = append(errs, s)
		}
		mu.Unlock()
	}
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var taken atomic.Int64
	for w := range 6 {
		c := newClient(t, rdb)
		s := newSemaphore(t, c, name, N)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 5))
			for i := 0; i < 400 && time.Now().Before(stop); i++ {
				k := 1 + r.IntN(N)
				l, err := s.AcquireN(ctx, k, dlock.MaxWait(200*time.Millisecond), dlock.LeaseTTL(time.Second))
				if err != nil {
					if !errors.Is(err, dlock.ErrNotAcquired) {
						report(fmt.Sprintf("AcquireN(%d): %v", k, err))
					}
					continue
				}
				taken.Add(1)
				time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond)
				if r.IntN(3) == 0 {
					l.Extend(ctx, time.Second)
				}
				l.Release(ctx)
			}
		})
	}
	wg.Go(func() { // chaos: lapse a random hold, whole
		r := rand.New(rand.NewPCG(99, 5))
		for time.Now().Before(stop) {
			lapseRandomHold(ctx, rdb, key, r)
			time.Sleep(time.Duration(5+r.IntN(20)) * time.Millisecond)
		}
	})
	wg.Go(func() { // checker
		c := newClient(t, rdb)
		s := newSemaphore(t, c, name, N)
		for time.Now().Before(stop) {
			checkLiveHolds(ctx, rdb, s, key, N, report)
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()
	t.Logf("%d holds taken", taken.Load())
	if bad.Load() > 0 {
		t.Fatalf("%d violations: %v", bad.Load(), errs)
	}
}

// lapseRandomHold makes one hold of the semaphore at key, picked by r,
// lapse whole: every member of it gets a score in the past.
func lapseRandomHold(ctx context.Context, rdb *redis.Client, key string, r *rand.Rand) {
	ms := rdb.ZRange(ctx, key, 0, -1).Val()
	if len(ms) == 0 {
		return
	}
	base, _, _ := strings.Cut(ms[r.IntN(len(ms))], " ")
	var zs []redis.Z
	for _, m := range ms {
		if b, _, _ := strings.Cut(m, " "); b == base {
			zs = append(zs, redis.Z{Score: 1, Member: m})
		}
	}
	rdb.ZAddXX(ctx, key, zs...)
}

// checkLiveHolds reports a semaphore of N at key with more than N live
// members, a live member of a hold whose first member is not live, or
// Holders' counts out of range or adding up to more than N.
func checkLiveHolds(ctx context.Context, rdb *redis.Client, s *dlock.Semaphore, key string, N int, report func(string)) {
	live := liveMembers(ctx, rdb, key)
	if len(live) > N {
		report(fmt.Sprintf("%d live members > N=%d: %v", len(live), N, live))
	}
	// Sibling consistency: every "<t> i" has its "<t>" and i ≤ count.
	bases := map[string]bool{}
	for _, m := range live {
		if !strings.Contains(m, " ") {
			bases[m] = true
		}
	}
	for _, m := range live {
		if b, _, ok := strings.Cut(m, " "); ok && !bases[b] {
			report(fmt.Sprintf("member %q live without its hold's first member: %v", m, live))
		}
	}
	if hs, err := s.Holders(ctx); err == nil {
		sum := 0
		for _, h := range hs {
			if h.Count < 1 || h.Count > N {
				report(fmt.Sprintf("Holders: %s counts %d", h.Token, h.Count))
			}
			sum += h.Count
		}
		if sum > N {
			report(fmt.Sprintf("Holders count %d > N", sum))
		}
	}
}

// TestSemaphorePartlyLapsedHoldIsNotExtended: a hold whose members' scores
// diverge (something dlock's own scripts never write, e.g. an operator's or
// a foreign ZADD) must not be renewed as a whole by checking its first
// member only: its lapsed members would stay lapsed while Extend returned
// nil, and another caller could be granted them. A hold of N=3 whose
// members "<t> 2" and "<t> 3" lapse (forced: ZADD of a past score on those
// members only) while "<t>" stays. Another caller then takes the freed
// permits; the holder's Extend (or TTL) must not report the hold of 3 as
// still held, or two callers believe they share more than N.
func TestSemaphorePartlyLapsedHoldIsNotExtended(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "partial"
	key := semKey(name)
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	s := newSemaphore(t, c, name, 3)
	three, err := s.AcquireN(ctx, 3, dlock.MaxWait(time.Nanosecond), dlock.LeaseTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer three.Release(ctx)
	tok := three.Token()
	rdb.ZAddXX(ctx, key, redis.Z{Score: 1, Member: tok + " 2"}, redis.Z{Score: 1, Member: tok + " 3"})
	two, err := s.AcquireN(ctx, 2, dlock.MaxWait(time.Nanosecond))
	if err != nil {
		t.Skipf("the freed permits were not granted (%v): nothing to test", err)
	}
	defer two.Release(ctx)
	eerr := three.Extend(ctx, 10*time.Second)
	believed := 2
	if eerr == nil {
		believed += 3
	}
	live := liveMembers(ctx, rdb, key)
	t.Logf("Extend of the partly lapsed hold: %v; live members %v", eerr, live)
	if believed > 3 {
		t.Errorf("after a partial lapse of a hold of 3 of N=3 and a grant of 2, the hold's Extend succeeded: holders believe %d permits held of 3", believed)
	}
}

// ForceRelease counts holds: a semaphore with a hold of 3 (meta with spaces
// and '#') and a single permit is force-released, and Inspect shows Count.
func TestSemaphoreForceReleaseCountsHolds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "force"
	c := newClient(t, rdb)
	s := newSemaphore(t, c, name, 5)
	three, err := s.AcquireN(ctx, 3, dlock.HolderMeta("a b #c"))
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.TryAcquire(ctx, dlock.HolderMeta("#"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, p := range in.Permits {
		counts[p.Meta] += p.Count
	}
	if counts["a b #c"] != 3 || counts["#"] != 1 || len(in.Permits) != 2 {
		t.Errorf("Inspect permits = %+v", in.Permits)
	}
	ok, err := c.ForceRelease(ctx, name)
	if err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	if n := rdb.Exists(ctx, semKey(name)).Val(); n != 0 {
		t.Errorf("key still there after ForceRelease")
	}
	if err := three.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after ForceRelease = %v", err)
	}
	_ = one
}

// A waiter for k = N is not starved by four streams of single permits with
// short holds, in arrival order; and k > its own N is refused even when
// another Semaphore of bigger N on the same name holds nothing.
func TestSemaphoreWaiterForAllPermitsIsNotStarved(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name, N = "kn", 3
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		c := newClient(t, rdb)
		s := newSemaphore(t, c, name, N)
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := s.Acquire(ctx, dlock.MaxWait(2*time.Second))
				if err == nil {
					time.Sleep(3 * time.Millisecond)
					l.Release(ctx)
				}
			}
		})
	}
	if !waitFor(5*time.Second, func() bool { return len(liveMembers(ctx, rdb, semKey(name))) > 0 }) { // the singles stream
		t.Fatal("no single permit was taken")
	}
	c := newClient(t, rdb)
	s := newSemaphore(t, c, name, N)
	start := time.Now()
	l, err := s.AcquireN(ctx, N, dlock.MaxWait(3*time.Second))
	close(stop)
	if err != nil {
		t.Errorf("AcquireN(N) among single-permit streams: %v after %v", err, time.Since(start))
	} else {
		if live := liveMembers(ctx, rdb, semKey(name)); len(live) != N {
			t.Errorf("with AcquireN(N) held, live members = %v", live)
		}
		l.Release(ctx)
	}
	wg.Wait()
}

// Late copies of an AcquireN (k=3) request: after the hold was released,
// and after the waiter gave up, they take nothing and queue nothing. (A
// copy can exist only for a lease that ends marked: here a resumed one,
// whose first holder's requests may still be in flight, and an undone one.)
func TestSemaphoreLateAcquireNCopiesTakeNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "late-n"
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	s := newSemaphore(t, c, name, 4)
	first, err := s.AcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireN(ctx, 3, dlock.Resume(first.Token()))
	if err != nil {
		t.Fatal(err)
	}
	tok, key := l.Token(), l.Key()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{key, key + ":fence", key + ":q", key + ":qw", key + ":r:" + tok}
	for _, queue := range []int{0, 1} {
		err = script.Named("hold_acquire").Run(ctx, rdb, keys, tok, 10000, queue, 10000, key+":ch", "PUBLISH", 10000, 4, 3).Err()
		if err == nil {
			t.Errorf("queue=%d: a late AcquireN copy after release was granted", queue)
		}
	}
	if ms := members(ctx, rdb, name); len(ms) != 0 {
		t.Errorf("members after late copies: %v", ms)
	}
	// A waiter for 3 that gives up (MaxWait) while 2 are held; then its
	// late copy lands: refused, nothing added, no queue entry.
	two, err := s.AcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Release(ctx)
	_, err = s.AcquireN(ctx, 3, dlock.MaxWait(100*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("AcquireN(3) with 2 of 4 held: %v", err)
	}
	if n := rdb.LLen(ctx, key+":q").Val(); n != 0 {
		t.Errorf("queue after the waiter gave up: %d", n)
	}
	one, err := s.TryAcquire(ctx)
	if err != nil {
		t.Errorf("a single permit with 2 of 4 held after the 3-waiter left: %v", err)
	} else {
		one.Release(ctx)
	}
}

// AcquireN through a proxy that delays requests past the caller's ctx: the
// late request lands after the caller's undo or before it; either way the
// permits end free, and N is never exceeded meanwhile.
func TestSemaphoreDelayedAcquireNLeavesThePermitsFree(t *testing.T) {
	t.Parallel()
	srv, rdb := setup(t)
	ctx := t.Context()
	const name, N = "delay-n", 3
	p := redistest.NewProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { prdb.Close() })
	c := newClient(t, prdb)
	s := newSemaphore(t, c, name, N)
	direct := newSemaphore(t, newClient(t, rdb), name, N)
	hold, err := direct.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p.Delay(150*time.Millisecond, 0)
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		l, err := s.AcquireN(cctx, 2)
		cancel()
		if err == nil {
			l.Release(ctx)
		}
		p.Delay(0, 0)
		time.Sleep(50 * time.Millisecond)
		if live := liveMembers(ctx, rdb, semKey(name)); len(live) > N {
			t.Fatalf("round %d: live %v", i, live)
		}
		if !waitFor(3*time.Second, func() bool { return len(liveMembers(ctx, rdb, semKey(name))) == 1 }) {
			t.Errorf("round %d: permits left by a late AcquireN: %v", i, liveMembers(ctx, rdb, semKey(name)))
		}
	}
	hold.Release(ctx)
}
