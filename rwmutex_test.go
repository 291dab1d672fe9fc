package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// newRW returns c.RWMutex(name), failing the test if it is refused.
func newRW(tb testing.TB, c *dlock.Client, name string) *dlock.RWMutex {
	tb.Helper()
	rw, err := c.RWMutex(name)
	if err != nil {
		tb.Fatal(err)
	}
	return rw
}

// rwMembers returns the members of the read-write lock's sorted set ("r:<token>"
// or "w:<token>"), live or not yet dropped.
func rwMembers(ctx context.Context, rdb redis.Cmdable, name string) []string {
	return rdb.ZRange(ctx, semKey(name), 0, -1).Val()
}

// rwQueued returns how many waiters the read-write lock's queue holds.
func rwQueued(ctx context.Context, rdb redis.Cmdable, name string) int64 {
	return rdb.LLen(ctx, semKey(name)+":q").Val()
}

// Many goroutines on several Clients take reads and writes of one name, by
// Acquire and TryAcquire: never a writer with a reader or another writer,
// checked both by counters inside the critical sections and by the holds
// Redis has at each entry.
func TestRWMutexExclusion(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	_, rdb := setup(t)
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			const clients, perClient, rounds = 4, 5, 30
			name := fmt.Sprint("rw-exclusion-", pipelining)
			var (
				tally rwTally
				wg    sync.WaitGroup
			)
			for range clients {
				rw := newRW(t, newClient(t, rdb, dlock.LeaseTTL(2*time.Second), pipelined(pipelining)), name)
				for g := range perClient {
					wg.Go(func() { tally.run(ctx, t, rdb, rw, name, g, rounds) })
				}
			}
			wg.Wait()
			if n := tally.violations.Load(); n != 0 {
				t.Errorf("%d times a writer held with a reader or another writer, want 0", n)
			}
			if n := tally.overran.Load(); n != 0 {
				t.Errorf("%d holders still held past their validity, want 0", n)
			}
			t.Logf("%d reads, %d writes; at most %d readers at once", tally.reads.Load(), tally.writes.Load(), tally.mostReaders.Load())
			key := semKey(name)
			if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, rdb, key, key+":q", key+":qw") == 0 }) {
				t.Errorf("left after every holder released: holds %v, queue %v", rwMembers(ctx, rdb, name), rdb.LRange(ctx, key+":q", 0, -1).Val())
			}
		})
	}
}

// rwTally counts what the holders of TestRWMutexExclusion saw.
type rwTally struct {
	readers, writers                   atomic.Int32
	violations, overran, reads, writes atomic.Int32
	mostReaders                        atomic.Int32
}

// run takes rounds holds of rw (a write one time in four, a TryAcquire
// one time in three), each checked against the others in the tally and
// against the holds in Redis, and held for up to 1.5ms.
func (tl *rwTally) run(ctx context.Context, t *testing.T, rdb *redis.Client, rw *dlock.RWMutex, name string, g, rounds int) {
	for r := range rounds {
		write := rand.IntN(4) == 0
		side := rw.Reader()
		if write {
			side = rw.Writer()
		}
		var (
			l   *dlock.Lock
			err error
		)
		if (g+r)%3 == 0 {
			if l, err = side.TryAcquire(ctx); errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() == nil {
				continue
			}
		} else {
			l, err = side.Acquire(ctx)
		}
		if err != nil {
			t.Errorf("acquire (write %v): %v", write, err)
			return
		}
		if write {
			tl.writes.Add(1)
			if tl.writers.Add(1) != 1 || tl.readers.Load() != 0 {
				tl.violations.Add(1)
			}
		} else {
			tl.reads.Add(1)
			n := tl.readers.Add(1)
			if tl.writers.Load() != 0 {
				tl.violations.Add(1)
			}
			for m := tl.mostReaders.Load(); n > m && !tl.mostReaders.CompareAndSwap(m, n); m = tl.mostReaders.Load() {
			}
		}
		held := rwMembers(ctx, rdb, name)
		if write && len(held) != 1 {
			tl.violations.Add(1)
		}
		for _, m := range held {
			if strings.HasPrefix(m, "w:") && !write {
				tl.violations.Add(1)
			}
		}
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		if write {
			tl.writers.Add(-1)
		} else {
			tl.readers.Add(-1)
		}
		if !time.Now().Before(l.ValidUntil()) {
			tl.overran.Add(1)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	}
}

// Reads share the lock and a write excludes everything; each hold is a
// lease of its own (token, TTL, Extend, fence, release), and Holders lists
// them.
func TestRWMutexHoldsAreLeases(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-leases"
	rw := newRW(t, newClient(t, rdb), name)
	var reads []*dlock.Lock
	for range 3 {
		l, err := rw.Reader().TryAcquire(ctx)
		if err != nil {
			t.Fatalf("read TryAcquire with only reads held = %v, want a hold", err)
		}
		reads = append(reads, l)
	}
	if _, err := rw.Writer().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("write TryAcquire with 3 reads held = %v, want ErrNotAcquired", err)
	}
	hs, err := rw.Holders(ctx)
	if err != nil || len(hs) != 3 {
		t.Fatalf("Holders = %v, %v, want 3 reads", hs, err)
	}
	for _, h := range hs {
		if h.Write || h.TTL <= 0 || !slices.ContainsFunc(reads, func(l *dlock.Lock) bool { return l.Token() == h.Token }) {
			t.Errorf("Holders: %+v, want a live read of ours", h)
		}
	}
	if err := reads[0].Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("a read's Extend = %v", err)
	}
	if d, err := reads[0].TTL(ctx); err != nil || d <= 0 || d > 5*time.Second {
		t.Errorf("a read's TTL after Extend(5s) = %v, %v", d, err)
	}
	fences := map[int64]bool{}
	for _, l := range reads {
		fences[fenceOf(t, l)] = true
	}
	if len(fences) != 3 {
		t.Errorf("the reads' fences %v, want 3 distinct", fences)
	}
	for _, l := range reads {
		if err := l.Release(ctx); err != nil {
			t.Errorf("a read's Release = %v", err)
		}
	}
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("write TryAcquire once the reads were released = %v", err)
	}
	if _, err := rw.Reader().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("read TryAcquire while a write is held = %v, want ErrNotAcquired", err)
	}
	if _, err := rw.Writer().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a second write TryAcquire = %v, want ErrNotAcquired", err)
	}
	if hs, err := rw.Holders(ctx); err != nil || len(hs) != 1 || !hs[0].Write || hs[0].Token != w.Token() {
		t.Errorf("Holders while a write is held = %+v, %v, want the write", hs, err)
	}
	info, err := newClient(t, rdb).Inspect(ctx, name)
	if err != nil || info.Type != "zset" || len(info.RWHolds) != 1 || info.Permits != nil {
		t.Errorf("Inspect while a write is held = %+v, %v, want its hold in RWHolds", info, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Errorf("the write's Release = %v", err)
	}
	if n := liveKeys(ctx, rdb, semKey(name)); n != 0 {
		t.Errorf("the lock's key is left after every hold was released")
	}
}

// A reader that comes while a writer waits queues behind it, TryAcquire
// does not jump the line, and a release grants the head of the line: the
// writer first, then every reader queued after it, together.
func TestRWMutexQueueOrder(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "rw-order"
	first, err := newRW(t, newClient(t, rdb), name).Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		l   *dlock.Lock
	}
	got := make(chan result, 4)
	queue := func(who string, write bool, n int64) {
		rw := newRW(t, newClient(t, rdb), name)
		side := rw.Reader()
		if write {
			side = rw.Writer()
		}
		go func() {
			l, err := side.Acquire(ctx)
			if err != nil {
				t.Errorf("%s: Acquire = %v", who, err)
			}
			got <- result{who, l}
		}()
		if !waitFor(5*time.Second, func() bool { return rwQueued(ctx, rdb, name) == n }) {
			t.Fatalf("%s never queued", who)
		}
	}
	queue("writer", true, 1)
	if l, err := newRW(t, newClient(t, rdb), name).Reader().TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Errorf("read TryAcquire with reads held and a writer waiting = %v, want ErrNotAcquired", err)
	}
	queue("reader-1", false, 2)
	queue("reader-2", false, 3)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w result
	select {
	case w = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody was granted the lock 10s after the last read was released")
	}
	if w.who != "writer" {
		t.Fatalf("first granted after the read: %s, want the writer queued first", w.who)
	}
	select {
	case r := <-got:
		t.Errorf("%s granted while the writer holds", r.who)
	case <-time.After(200 * time.Millisecond):
	}
	if w.l != nil {
		w.l.Release(ctx)
	}
	var rs []*dlock.Lock
	for range 2 {
		select {
		case r := <-got:
			rs = append(rs, r.l)
		case <-time.After(10 * time.Second):
			t.Fatal("a queued reader was not granted 10s after the writer released")
		}
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 2 {
		t.Errorf("holds after the writer released: %v, want both readers at once", m)
	}
	for _, l := range rs {
		if l != nil {
			l.Release(ctx)
		}
	}
}

// A writer is not starved by a stream of readers that always keep the
// lock read-held: readers that come after it queue behind it.
func TestRWMutexWriterNotStarved(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const name = "rw-starve"
	stop := make(chan struct{})
	var (
		wg    sync.WaitGroup
		reads atomic.Int32
	)
	for range 6 {
		rw := newRW(t, newClient(t, rdb), name)
		wg.Go(func() {
			for i := 0; i < 10000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.Reader().Acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("reader: Acquire = %v", err)
					}
					return
				}
				reads.Add(1)
				time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
				l.Release(ctx)
			}
		})
	}
	if !waitFor(10*time.Second, func() bool { return reads.Load() >= 20 }) {
		t.Fatal("the readers never got going")
	}
	for i := range 3 {
		before := reads.Load()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		l, err := newRW(t, newClient(t, rdb), name).Writer().Acquire(wctx)
		wcancel()
		if err != nil {
			t.Errorf("writer %d under a stream of readers: Acquire = %v (%d reads meanwhile), want the lock", i, err, reads.Load()-before)
			break
		}
		if m := rwMembers(ctx, rdb, name); len(m) != 1 || m[0] != "w:"+l.Token() {
			t.Errorf("holds while writer %d holds: %v, want its write alone", i, m)
		}
		l.Release(ctx)
	}
	close(stop)
	wg.Wait()
}

// Fences order writes after the reads they exclude, and reads after the
// writes before them: every hold's fence is above the fences of the holds
// granted before it that it excludes or that excluded it.
func TestRWMutexFences(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-fences"
	rw := newRW(t, newClient(t, rdb), name)
	var last int64
	for round := range 5 {
		var rs []*dlock.Lock
		highest := last
		for range 3 {
			l, err := rw.Reader().TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, l)
			f := fenceOf(t, l)
			if f <= last {
				t.Errorf("round %d: a read's fence %d, not above the last write's %d", round, f, last)
			}
			highest = max(highest, f)
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			l, err := rw.Writer().Acquire(ctx) // waits for the reads
			if err != nil {
				t.Errorf("writer: Acquire = %v", err)
			}
			got <- l
		}()
		if !waitFor(5*time.Second, func() bool { return rwQueued(ctx, rdb, name) == 1 }) {
			t.Fatal("the writer never queued")
		}
		for _, l := range rs {
			l.Release(ctx)
		}
		w := <-got
		if w == nil {
			return
		}
		if f := fenceOf(t, w); f <= highest {
			t.Errorf("round %d: the write's fence %d, not above its reads' highest %d", round, f, highest)
		} else {
			last = f
		}
		w.Release(ctx)
	}
}

// Per-call options apply to holds: LeaseTTL sets the hold's lease,
// HolderMeta is read back from its token, MaxWait bounds a writer's wait,
// MaxHold ends a hold.
func TestRWMutexLockOptions(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-options"
	rw := newRW(t, newClient(t, rdb, dlock.LeaseTTL(30*time.Second)), name)
	r, err := rw.Reader().Acquire(ctx, dlock.LeaseTTL(2*time.Second), dlock.HolderMeta("reporting"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := r.TTL(ctx); err != nil || d <= 0 || d > 2*time.Second {
		t.Errorf("TTL of a read taken with LeaseTTL(2s) = %v, %v", d, err)
	}
	if info, err := newClient(t, rdb).Inspect(ctx, name); err != nil || info.Meta != "reporting" || len(info.RWHolds) != 1 ||
		info.RWHolds[0].Meta != "reporting" {
		t.Errorf("Inspect = %+v, %v, want the read's metadata", info, err)
	}
	start := time.Now()
	_, err = rw.Writer().Acquire(ctx, dlock.MaxWait(200*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Errorf("write Acquire with MaxWait(200ms) behind a read = %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("write Acquire with MaxWait(200ms) returned after %v", d)
	}
	if n := rwQueued(ctx, rdb, name); n != 0 {
		t.Errorf("the writer that waited out its MaxWait left %d queue entries", n)
	}
	r.Release(ctx)
	w, err := rw.Writer().Acquire(ctx, dlock.MaxHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(w.Done(), 10*time.Second) || !errors.Is(w.Err(), dlock.ErrMaxHold) {
		t.Errorf("a write with MaxHold(300ms): Err = %v, want ErrMaxHold", w.Err())
	}
	if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, rdb, semKey(name)) == 0 }) {
		t.Errorf("the write ended by its max hold is still in Redis: %v", rwMembers(ctx, rdb, name))
	}
	if _, err := rw.Reader().Acquire(ctx, dlock.LeaseTTL(-time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("read Acquire with LeaseTTL(-1s) = %v, want ErrInvalid", err)
	}
}

// Bad input gets an error wrapping ErrInvalid: a bad name, a Client that
// cannot keep a read-write lock, and a hold asked for inside a hold of the
// same name (an upgrade from read to write, a read in a read, anything in
// a write), which would wait for itself.
func TestRWMutexBadInput(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	_, nodes := startQuorum(t, 3)
	plain := newClient(t, rdb)
	for _, tc := range []struct {
		name string
		c    *dlock.Client
		rw   string
	}{
		{"empty name", plain, ""},
		{"name too long", plain, strings.Repeat("x", dlock.MaxNameLen+1)},
		{"reentrant Client", newClient(t, rdb, dlock.WithReentrant(true)), "rw"},
		{"quorum", newRedlock(t, nodes, 0), "rw"},
		{"without scripts", newClient(t, rdb, dlock.WithoutScripts()), "rw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rw, err := tc.c.RWMutex(tc.rw)
			if !errors.Is(err, dlock.ErrInvalid) || rw != nil {
				t.Errorf("RWMutex(%.20q) = %v, %v, want ErrInvalid", tc.rw, rw, err)
			}
		})
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys written by refused calls, want none", n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const name = "rw-nested"
	rw := newRW(t, plain, name)
	other := newRW(t, plain, name+"-other") // another name: nesting is fine
	sameFamily := newRW(t, plain, name)     // another RWMutex value of the name: refused alike
	for _, outer := range []*dlock.RWLocker{rw.Reader(), rw.Writer()} {
		err := outer.Do(ctx, func(ctx context.Context, l *dlock.Lock) error {
			for _, inner := range []*dlock.RWLocker{rw.Reader(), rw.Writer(), sameFamily.Writer()} {
				if _, err := inner.TryAcquire(ctx); !errors.Is(err, dlock.ErrInvalid) || prefixes(err.Error()) != 1 {
					t.Errorf("TryAcquire (write %v) inside Do (write %v) of the same name = %v, want ErrInvalid, with one dlock: prefix", inner.Write(), outer.Write(), err)
				}
				if _, err := inner.Acquire(ctx); !errors.Is(err, dlock.ErrInvalid) {
					t.Errorf("Acquire (write %v) inside Do (write %v) of the same name = %v, want ErrInvalid", inner.Write(), outer.Write(), err)
				}
				if err := inner.Do(ctx, func(context.Context, *dlock.Lock) error { return nil }); !errors.Is(err, dlock.ErrInvalid) {
					t.Errorf("Do (write %v) inside Do (write %v) of the same name = %v, want ErrInvalid", inner.Write(), outer.Write(), err)
				}
			}
			return other.Writer().Do(ctx, func(context.Context, *dlock.Lock) error { return nil })
		})
		if err != nil {
			t.Errorf("Do (write %v) = %v, want nil", outer.Write(), err)
		}
	}
	if n := liveKeys(ctx, rdb, semKey(name), semKey(name)+":q", semKey(name)+":qw"); n != 0 {
		t.Errorf("%d keys left by the refused nested calls, want none", n)
	}
}

// A name is one kind of lock: whichever kind holds it (a lock, a
// semaphore, a read-write lock), the other kinds get ErrWrongType, and
// nothing is written or left stuck: the holder goes on and releases.
func TestRWMutexAndOtherKindsGetErrWrongType(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			name := "rw-wrongtype-" + m.name
			key := semKey(name)
			queueKeys := func() int64 { return liveKeys(ctx, rdb, key+":q", key+":qw") }
			rw := newRW(t, newClient(t, rdb), name)
			sem := newSemaphore(t, newClient(t, rdb), name, 3)

			lock, err := m.new(t).TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, side := range []*dlock.RWLocker{rw.Reader(), rw.Writer()} {
				if _, err := side.TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
					t.Errorf("TryAcquire (write %v) of a held lock = %v, want ErrWrongType", side.Write(), err)
				}
				if _, err := side.Acquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
					t.Errorf("Acquire (write %v) of a held lock = %v, want ErrWrongType", side.Write(), err)
				}
			}
			if _, err := rw.Holders(ctx); !errors.Is(err, dlock.ErrWrongType) || prefixes(err.Error()) != 1 {
				t.Errorf("Holders of a held lock = %v, want ErrWrongType, with one dlock: prefix", err)
			}
			if n := queueKeys(); n != 0 {
				t.Errorf("the refused calls left %d queue keys", n)
			}
			if err := lock.Release(ctx); err != nil {
				t.Errorf("the lock's Release after the refused calls = %v", err)
			}

			for _, write := range []bool{false, true} {
				rwHeldRefusesOtherKinds(ctx, t, rdb, m, rw, sem, name, write)
			}

			permit, err := sem.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, side := range []*dlock.RWLocker{rw.Reader(), rw.Writer()} {
				if _, err := side.TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
					t.Errorf("TryAcquire (write %v) of a held semaphore = %v, want ErrWrongType", side.Write(), err)
				}
			}
			if _, err := rw.Holders(ctx); !errors.Is(err, dlock.ErrWrongType) || prefixes(err.Error()) != 1 {
				t.Errorf("Holders of a held semaphore = %v, want ErrWrongType, with one dlock: prefix", err)
			}
			if err := permit.Release(ctx); err != nil {
				t.Errorf("the permit's Release after the refused calls = %v", err)
			}
			if liveKeys(ctx, rdb, key) != 0 {
				t.Errorf("the key is left after its last hold was released")
			}
		})
	}
}

// rwHeldRefusesOtherKinds holds name as a read (or a write) of rw and
// checks that a lock of mode m, a semaphore and a script-free Client are
// refused with ErrWrongType, leave the hold alone and queue nothing.
func rwHeldRefusesOtherKinds(ctx context.Context, t *testing.T, rdb *redis.Client, m mode, rw *dlock.RWMutex, sem *dlock.Semaphore, name string, write bool) {
	t.Helper()
	key := semKey(name)
	queueKeys := func() int64 { return liveKeys(ctx, rdb, key+":q", key+":qw") }
	side := rw.Reader()
	if write {
		side = rw.Writer()
	}
	hold, err := side.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := m.new(t)
	if _, err := c.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("TryAcquire of a name held as a read-write lock (write %v) = %v, want ErrWrongType", write, err)
	}
	if _, err := c.Acquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Acquire of a name held as a read-write lock (write %v) = %v, want ErrWrongType", write, err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Semaphore.TryAcquire of a name held as a read-write lock (write %v) = %v, want ErrWrongType", write, err)
	}
	if _, err := newClient(t, rdb, dlock.WithoutScripts()).TryAcquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("TryAcquire WithoutScripts of a name held as a read-write lock (write %v) = %v, want ErrWrongType", write, err)
	}
	if _, err := sem.Acquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Semaphore.Acquire of a name held as a read-write lock (write %v) = %v, want ErrWrongType", write, err)
	}
	if _, err := sem.Holders(ctx); !errors.Is(err, dlock.ErrWrongType) || prefixes(err.Error()) != 1 {
		t.Errorf("Semaphore.Holders of a read-write lock = %v, want ErrWrongType, with one dlock: prefix", err)
	}
	if mm := rwMembers(ctx, rdb, name); len(mm) != 1 || !strings.HasSuffix(mm[0], ":"+hold.Token()) || queueKeys() != 0 {
		t.Errorf("after the refused calls: holds %v, %d queue keys; want the hold alone", mm, queueKeys())
	}
	if err := hold.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("the hold's Extend after the refused calls = %v", err)
	}
	if err := hold.Release(ctx); err != nil {
		t.Errorf("the hold's Release after the refused calls = %v", err)
	}
}

// ForceRelease ends every hold of a read-write lock, as long as they are
// the holds it read; their holders learn of it at their next extension,
// and a writer waiting behind them is granted the lock.
func TestRWMutexForceRelease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "rw-force"
	c := newClient(t, rdb)
	rw := newRW(t, c, name)
	var reads []*dlock.Lock
	for range 2 {
		l, err := rw.Reader().TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, l)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := newRW(t, newClient(t, rdb), name).Writer().Acquire(ctx)
		if err != nil {
			t.Errorf("writer: Acquire = %v", err)
		}
		got <- l
	}()
	if !waitFor(5*time.Second, func() bool { return rwQueued(ctx, rdb, name) == 1 }) {
		t.Fatal("the writer never queued")
	}
	if ok, err := c.ForceRelease(ctx, name); !ok || err != nil {
		t.Fatalf("ForceRelease of 2 reads = %v, %v, want true", ok, err)
	}
	for i, l := range reads {
		if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("read %d's Extend after ForceRelease = %v, want ErrNotHeld", i, err)
		}
	}
	select {
	case w := <-got:
		if w != nil {
			if m := rwMembers(ctx, rdb, name); len(m) != 1 || m[0] != "w:"+w.Token() {
				t.Errorf("holds after the force release: %v, want the writer's alone", m)
			}
			w.Release(ctx)
		}
	case <-time.After(10 * time.Second):
		t.Error("the waiting writer was not granted the lock 10s after the force release")
	}
}

// A read-write lock's refusals carry a *NotAcquiredError, as a lock's and a
// semaphore's do: TryAcquire's, and that of an Acquire whose MaxWait ran
// out. It names the lock and the remaining lease of the hold that ends
// first; Holder and Meta are "" (a read-write lock has no one holder).
func TestRWMutexRefusalCarriesNotAcquiredError(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-refusal"
	rw := newRW(t, newClient(t, rdb, dlock.LeaseTTL(30*time.Second)), name)
	r, err := rw.Reader().TryAcquire(ctx, dlock.LeaseTTL(5*time.Second), dlock.HolderMeta("reader"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	_, tried := rw.Writer().TryAcquire(ctx)
	_, waited := rw.Writer().Acquire(ctx, dlock.MaxWait(50*time.Millisecond))
	for what, err := range map[string]error{"TryAcquire": tried, "Acquire with MaxWait": waited} {
		na, ok := errors.AsType[*dlock.NotAcquiredError](err)
		switch {
		case !errors.Is(err, dlock.ErrNotAcquired):
			t.Errorf("%s of a write while a read is held = %v, want ErrNotAcquired", what, err)
		case !ok || na.Name != name || na.Holder != "" || na.Meta != "" || na.TTL <= 0 || na.TTL > 5*time.Second:
			t.Errorf("%s = %v: NotAcquiredError %+v, want one naming %q, the read ending within 5s", what, err, na, name)
		case prefixes(err.Error()) != 1 || !strings.Contains(err.Error(), "the lock is held"):
			t.Errorf("%s = %q, want one dlock: prefix and the reason", what, err)
		}
	}
}

// A queued writer that gives up must not block the readers behind it.
func TestRWMutexWriterThatGivesUpDoesNotBlockReaders(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-giveup"
	c := newClient(t, rdb, dlock.LeaseTTL(30*time.Second))
	rw := newRW(t, c, name)
	r1, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = rw.Writer().Acquire(wctx)
	cancel()
	if err == nil {
		t.Fatal("writer got the lock while a read was held")
	}
	if n := rwQueued(ctx, rdb, name); n != 0 {
		t.Errorf("queue after the writer gave up: %d entries", n)
	}
	start := time.Now()
	actx, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	r2, err := rw.Reader().Acquire(actx)
	if err != nil {
		t.Fatalf("second read after the writer left: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("second read waited %v", d)
	}
	r1.Release(ctx)
	r2.Release(ctx)
}

// A writer waits behind a reader; Redis becomes unreachable from the
// writer's process for a moment, and the writer's Acquire ends with that
// error. Acquire's documentation says that the end of a wait leaves no
// queue entry behind, and RWMutex's that a line is held only by those who
// wait in it; but the attempt that failed never reached Redis (or, if it
// did, its undo found the connection refused and took that as a server
// that is gone with its data), so the entry of the attempt before it was
// left: a write that nobody waits for any more held back every reader
// behind it for max(TTL, 1s), and the reader's release then granted the
// write to nobody, for another TTL.
func TestRWMutexWriterFailedByTheNetworkLeavesItsPlace(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, direct := setup(t)
	rdb, d := refusable(t, s)
	ctx := t.Context()
	const name = "rw-failed-writer"
	const ttl = 20 * time.Second // longer than the test: what is left is not gone by expiry
	w := newRW(t, newClient(t, rdb, dlock.LeaseTTL(ttl)), name).Writer()
	rw := newRW(t, newClient(t, direct, dlock.LeaseTTL(ttl)), name)
	// The read's short lease (kept by its watchdog) wakes the writer often:
	// it sleeps until the earliest hold's deadline at most.
	r, err := rw.Reader().TryAcquire(ctx, dlock.LeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	errc := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx)
		if l != nil {
			l.Release(ctx)
		}
		errc <- err
	}()
	if !waitFor(10*time.Second, func() bool { return rwQueued(ctx, direct, name) == 1 }) {
		t.Fatal("the writer never queued")
	}
	d.cutAndRefuse()
	var werr error
	select {
	case werr = <-errc: // at its next attempt, when the read's lease would end
	case <-time.After(30 * time.Second):
		t.Fatal("the writer's Acquire did not end 30s after Redis became unreachable")
	}
	d.allow() // Redis is reachable again: a clean-up still under way gets through
	if werr == nil {
		t.Fatal("the writer's Acquire succeeded with Redis unreachable")
	}
	if !waitFor(5*time.Second, func() bool { return rwQueued(ctx, direct, name) == 0 }) {
		t.Errorf("the writer's Acquire returned %q and left its place in the line: %v", werr,
			direct.HGetAll(ctx, semKey(name)+":qw").Val())
	}
	if l, err := rw.Reader().TryAcquire(ctx); err != nil {
		t.Errorf("a second read while one is held and the writer gave up = %v, want held", err)
	} else {
		l.Release(ctx)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if m := rwMembers(ctx, direct, name); len(m) > 0 {
		t.Errorf("after the reader released: holds %v, want none (the write granted to a writer that gave up)", m)
	}
}

// Errors read once, "dlock: <op> "<name>": <cause>" (errors.go): the
// refusal of a hold asked for inside a hold of the name, and Holders on a
// name of another kind, said "dlock: " twice ("dlock: acquire "x": dlock:
// invalid argument: …").
func TestRWMutexErrorsSayDlockOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	const name = "rw-errors-once"
	rw := newRW(t, c, name)
	var nested error
	if err := rw.Reader().Do(ctx, func(ctx context.Context, _ *dlock.Lock) error {
		_, nested = rw.Writer().TryAcquire(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "rw-errors-once-lock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, wrong := newRW(t, c, "rw-errors-once-lock").Holders(ctx)
	for what, err := range map[string]error{"a write inside a read": nested, "Holders of a lock's name": wrong} {
		if err == nil {
			t.Errorf("%s: nil error", what)
		} else if n := strings.Count(err.Error(), "dlock: "); n != 1 {
			t.Errorf("%s: %q says \"dlock: \" %d times, want once", what, err, n)
		}
	}
}
