package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// multiModes are the Clients a multi-lock must work with; multiClients
// also makes "noscript" ones (WithoutScripts).
var multiModes = []string{"unfair", "fair", "reentrant", "quorum"}

// multiClients returns n Clients of mode, on one server (or, for "quorum",
// on three), and a go-redis client where the test keeps its counters.
func multiClients(t *testing.T, mode string, n int, opts ...dlock.Option) ([]*dlock.Client, *redis.Client) {
	t.Helper()
	_, rdb := setup(t)
	var cs []*dlock.Client
	for range n {
		switch mode {
		case "quorum":
			if len(cs) == 0 {
				var nodes []redis.UniversalClient
				for range 3 {
					nodes = append(nodes, redistest.Start(t).Client(t))
				}
				t.Cleanup(func() {
					for _, n := range nodes {
						n.Close()
					}
				})
				// A node timeout of a second: a release that a loaded machine's
				// nodes answer late is still a release (these tests pin exclusion).
				cs = append(cs, newRedlock(t, nodes, time.Second, opts...))
				continue
			}
			cs = append(cs, cs[0]) // (one quorum's nodes, shared)
		case "noscript":
			cs = append(cs, newClient(t, rdb, append([]dlock.Option{dlock.WithoutScripts()}, opts...)...))
		default:
			cs = append(cs, newClient(t, rdb, append([]dlock.Option{
				waiting(mode == "fair"), dlock.WithReentrant(mode == "reentrant")}, opts...)...))
		}
	}
	return cs, rdb
}

// Goroutines of two Clients take random overlapping subsets of five names,
// in random order, with AcquireAll, DoAll and TryAcquireAll, and do a
// non-atomic read-modify-write of a counter per name while they hold it.
// The ordered acquisition must never deadlock (every call has a deadline,
// and the test fails if one runs out) and never let two holders of one name
// in (overlaps counted, lost updates checked).
func TestAcquireAllExcludesWithoutDeadlock(t *testing.T) {
	t.Parallel()
	long(t)
	for _, mode := range multiModes {
		t.Run(mode, func(t *testing.T) { testAcquireAllExcludes(t, mode) })
	}
}

func testAcquireAllExcludes(t *testing.T, mode string) {
	const (
		names      = 5
		goroutines = 8 // per Client
	)
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	cs, rdb := multiClients(t, mode, 2, dlock.LeaseTTL(2*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var (
		inside     [names]atomic.Int32
		violations atomic.Int32
		held       [names]atomic.Int32 // completed critical sections per name
		wg         sync.WaitGroup
	)
	critical := func(ctx context.Context, set []int) error {
		for _, i := range set {
			if inside[i].Add(1) > 1 {
				violations.Add(1)
			}
		}
		defer func() { // (also after an error: a section left counted would count every later one as an overlap)
			for _, i := range set {
				inside[i].Add(-1)
			}
		}()
		for _, i := range set { // a lost update shows as a short count
			key := fmt.Sprint("test:multi:", i)
			v, err := rdb.Get(ctx, key).Int()
			if err != nil && err != redis.Nil {
				return err
			}
			time.Sleep(50 * time.Microsecond)
			if err := rdb.Set(ctx, key, v+1, 0).Err(); err != nil {
				return err
			}
			held[i].Add(1)
		}
		return nil
	}
	errs := make(chan error, 2*goroutines)
	for ci, c := range cs {
		for g := range goroutines {
			c := asOwner(t, c, fmt.Sprint("g", ci, "-", g))
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(g)))
			wg.Go(func() {
				for r := range rounds {
					set := rng.Perm(names)[:2+rng.IntN(names-1)]
					if err := multiRound(ctx, c, set, r%3, critical); err != nil {
						errs <- fmt.Errorf("client %d goroutine %d round %d, names %v: %w", ci, g, r, set, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v := violations.Load(); v != 0 {
		t.Errorf("%d overlapping holders of one name, want 0", v)
	}
	for i := range names {
		if got, _ := rdb.Get(t.Context(), fmt.Sprint("test:multi:", i)).Int(); int32(got) != held[i].Load() {
			t.Errorf("counter of name %d = %d, want %d (lost updates)", i, got, held[i].Load())
		}
	}
}

// multiRound takes the names of set with AcquireAll (how 0), DoAll (1) or
// TryAcquireAll (2; not finding them free is no error), and runs critical
// while it holds them.
func multiRound(ctx context.Context, c *dlock.Client, set []int, how int, critical func(context.Context, []int) error) error {
	var names []string
	for _, i := range set {
		names = append(names, fmt.Sprint("m", i))
	}
	switch how {
	case 1:
		return c.DoAll(ctx, names, func(ctx context.Context, m *dlock.MultiLock) error { return critical(ctx, set) })
	case 2:
		m, err := c.TryAcquireAll(ctx, names)
		if errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() == nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := critical(ctx, set); err != nil {
			return err
		}
		return m.Release(context.WithoutCancel(ctx))
	}
	m, err := c.AcquireAll(ctx, names)
	if err != nil {
		return fmt.Errorf("AcquireAll(%v) = %w (a deadlock?)", names, err)
	}
	if err := critical(ctx, set); err != nil {
		return err
	}
	return m.Release(context.WithoutCancel(ctx))
}

// lockKeys returns the lock keys of names.
func lockKeys(names ...string) []string {
	var keys []string
	for _, n := range names {
		keys = append(keys, "dlock:{"+n+"}")
	}
	return keys
}

// When one name of the set is held by another, TryAcquireAll fails with an
// error that names it, and leaves none of the others held: their lock keys
// are gone (checked in Redis) and they are free for anyone at once.
func TestTryAcquireAllIsAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range multiModes {
		t.Run(mode, func(t *testing.T) {
			cs, rdb := multiClients(t, mode, 2)
			c, other := cs[0], asOwner(t, cs[1], "other")
			c = asOwner(t, c, "me")
			ctx := t.Context()
			blocker, err := other.TryAcquire(ctx, "c")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.TryAcquireAll(ctx, []string{"d", "a", "c", "b"})
			if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(fmt.Sprint(err), `"c"`) {
				t.Errorf("TryAcquireAll(d, a, c, b) with c held = %v, want ErrNotAcquired naming \"c\"", err)
			}
			if mode != "quorum" { // (a quorum's keys live on its nodes)
				if n := liveKeys(ctx, rdb, lockKeys("a", "b", "d")...); n != 0 {
					t.Errorf("after a failed TryAcquireAll: %d of the lock keys of a, b, d left, want 0", n)
				}
			}
			for _, name := range []string{"a", "b", "d"} {
				l, err := other.TryAcquire(ctx, name)
				if err != nil {
					t.Errorf("TryAcquire(%q) by another after the failed TryAcquireAll = %v, want it free", name, err)
					continue
				}
				l.Release(ctx)
			}
			blocker.Release(ctx)
			m, err := c.TryAcquireAll(ctx, []string{"d", "a", "c", "b"})
			if err != nil {
				t.Fatalf("TryAcquireAll(d, a, c, b), all free = %v", err)
			}
			if err := m.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}

// An AcquireAll waiting for one name of its set gives every other name back
// when its context ends, leaves no queue entry behind, and returns an error
// that names the name it waited for and matches ErrNotAcquired and the
// context's error.
func TestAcquireAllCancelledLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"unfair", "fair"} {
		t.Run(mode, func(t *testing.T) {
			cs, rdb := multiClients(t, mode, 2)
			c, other := cs[0], cs[1]
			blocker, err := other.TryAcquire(t.Context(), "n2")
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Release(t.Context())
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() {
				_, err := c.AcquireAll(ctx, []string{"n3", "n2", "n1"})
				errc <- err
			}()
			// Cancel once it holds n1 and waits for n2.
			if !waitFor(5*time.Second, func() bool { return rdb.Exists(t.Context(), "dlock:{n1}").Val() == 1 }) {
				t.Fatal("AcquireAll never took n1")
			}
			if !waitFor(5*time.Second, func() bool { return c.Stats().Waiting == 1 }) {
				t.Fatal("AcquireAll never waited for n2")
			}
			cancel()
			select {
			case err = <-errc:
			case <-time.After(5 * time.Second):
				t.Fatal("AcquireAll did not return within 5s of its context's end")
			}
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) || !strings.Contains(fmt.Sprint(err), `"n2"`) {
				t.Errorf("AcquireAll cancelled = %v, want ErrNotAcquired and context.Canceled, naming \"n2\"", err)
			}
			if n := liveKeys(t.Context(), rdb, append(lockKeys("n1", "n3"), "dlock:{n2}:q", "dlock:{n2}:qw")...); n != 0 {
				t.Errorf("after a cancelled AcquireAll: %d lock or queue keys left, want 0", n)
			}
			if err := blocker.Err(); err != nil {
				t.Errorf("the other holder of n2: Err() = %v, want nil", err)
			}
		})
	}
}

// When one part's key disappears (deleted, or an operator's ForceRelease),
// the MultiLock's Done closes and Err names that part; the other parts stay
// held until Release, which reports the lost part and frees the rest.
func TestMultiLockLossOfOnePart(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"del", "force", "released apart"} {
		t.Run(how, func(t *testing.T) {
			cs, rdb := multiClients(t, "fair", 1, dlock.LeaseTTL(1500*time.Millisecond))
			c := cs[0]
			ctx := t.Context()
			m, err := c.AcquireAll(ctx, []string{"p1", "p2", "p3"})
			if err != nil {
				t.Fatal(err)
			}
			switch how {
			case "del":
				rdb.Del(ctx, "dlock:{p2}")
			case "force":
				if ok, err := c.ForceRelease(ctx, "p2"); !ok || err != nil {
					t.Fatalf("ForceRelease(p2) = %v, %v", ok, err)
				}
			default: // the part's own Release succeeds; the set counts it as lost
				if err := m.Locks()[1].Release(ctx); err != nil {
					t.Fatalf("p2's own Release = %v", err)
				}
			}
			if !closedWithin(m.Done(), 3*time.Second) {
				t.Fatal("Done() still open 3s after a part was lost")
			}
			if err := m.Err(); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), `"p2"`) {
				t.Errorf("Err() = %v, want ErrNotHeld naming \"p2\"", err)
			}
			time.Sleep(2 * time.Second) // over a TTL: the others are still extended
			if n := liveKeys(ctx, rdb, lockKeys("p1", "p3")...); n != 2 {
				t.Errorf("%d of p1, p3 held after p2 was lost, want 2 (held until Release)", n)
			}
			err = m.Release(ctx)
			if !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), `"p2"`) ||
				strings.Contains(err.Error(), `"p1"`) || strings.Contains(err.Error(), `"p3"`) {
				t.Errorf("Release = %v, want ErrNotHeld naming \"p2\" alone", err)
			}
			if n := liveKeys(ctx, rdb, lockKeys("p1", "p2", "p3")...); n != 0 {
				t.Errorf("%d lock keys left after Release, want 0", n)
			}
			if err := m.Release(ctx); err != nil {
				t.Errorf("second Release = %v, want nil", err)
			}
			if err := m.Err(); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Err() after Release = %v, want the loss (ErrNotHeld)", err)
			}
		})
	}
}

// DoAll cancels fn's context, with a cause naming the lost part, when one
// part is lost; it returns that loss and releases the other parts.
func TestDoAllCancelsOnPartLoss(t *testing.T) {
	t.Parallel()
	cs, rdb := multiClients(t, "fair", 1, dlock.LeaseTTL(1500*time.Millisecond))
	c := cs[0]
	ctx := t.Context()
	var cause error
	err := c.DoAll(ctx, []string{"x", "y"}, func(fctx context.Context, m *dlock.MultiLock) error {
		rdb.Del(ctx, "dlock:{y}")
		select {
		case <-fctx.Done():
			cause = context.Cause(fctx)
		case <-time.After(3 * time.Second):
			return errors.New("fn's context was not cancelled within 3s of the loss")
		}
		return nil
	})
	if !errors.Is(cause, dlock.ErrNotHeld) || !strings.Contains(fmt.Sprint(cause), `"y"`) {
		t.Errorf("fn's context cause = %v, want ErrNotHeld naming \"y\"", cause)
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("DoAll = %v, want ErrNotHeld", err)
	}
	if n := liveKeys(ctx, rdb, lockKeys("x", "y")...); n != 0 {
		t.Errorf("%d lock keys left after DoAll, want 0", n)
	}
}

// DoAll's fn context is done by the time a part's loss is reported, as a
// Do's is when its Lock's is: an Extend of a part that finds it gone
// returns with the channel fn took from ctx.Done() already closed.
func TestDoAllContextIsDoneWhenAPartLossIsReported(t *testing.T) {
	t.Parallel()
	cs, rdb := multiClients(t, "unfair", 1)
	ctx := t.Context()
	for i := range 5 { // (each round a fresh set: the loss is reported at once or never)
		names := []string{fmt.Sprint("x", i), fmt.Sprint("y", i)}
		var problem error
		err := cs[0].DoAll(ctx, names, func(fctx context.Context, m *dlock.MultiLock) error {
			done := fctx.Done()
			rdb.Del(ctx, lockKeys(names[1])...)
			if err := m.Locks()[1].Extend(ctx, dlock.DefaultTTL); !errors.Is(err, dlock.ErrNotHeld) {
				problem = fmt.Errorf("Extend of the deleted part = %v, want ErrNotHeld", err)
				return nil
			}
			select {
			case <-done:
			default:
				problem = errors.New("fn's context was not done when the part's Extend reported its loss")
			}
			return nil
		})
		if problem != nil {
			t.Fatalf("round %d: %v", i, problem)
		}
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("round %d: DoAll = %v, want the part's loss (ErrNotHeld)", i, err)
		}
	}
}

// DoAll releases every part when fn panics, and the panic goes on.
func TestDoAllReleasesOnPanic(t *testing.T) {
	t.Parallel()
	cs, rdb := multiClients(t, "fair", 1)
	ctx := t.Context()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic of fn", r)
			}
		}()
		cs[0].DoAll(ctx, []string{"x", "y"}, func(context.Context, *dlock.MultiLock) error { panic("boom") })
	}()
	if n := liveKeys(ctx, rdb, lockKeys("x", "y")...); n != 0 {
		t.Errorf("%d lock keys left after a panicking DoAll, want 0", n)
	}
}

// Bad input is refused with ErrInvalid before anything is sent.
func TestAcquireAllRefusesBadInput(t *testing.T) {
	t.Parallel()
	cs, rdb := multiClients(t, "fair", 1)
	c := cs[0]
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"no names", nil},
		{"duplicate", []string{"a", "b", "a"}},
		{"empty name", []string{"a", ""}},
		{"long name", []string{"a", strings.Repeat("x", dlock.MaxNameLen+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.AcquireAll(ctx, tc.names); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("AcquireAll(%s) = %v, want ErrInvalid", tc.name, err)
			}
			if _, err := c.TryAcquireAll(ctx, tc.names); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("TryAcquireAll(%s) = %v, want ErrInvalid", tc.name, err)
			}
			called := false
			err := c.DoAll(ctx, tc.names, func(context.Context, *dlock.MultiLock) error { called = true; return nil })
			if !errors.Is(err, dlock.ErrInvalid) || called {
				t.Errorf("DoAll(%s) = %v (fn called: %v), want ErrInvalid and fn not called", tc.name, err, called)
			}
		})
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys in Redis after refused calls, want 0", n)
	}
}

// The handle: Locks in the order given, a fence per part, ValidUntil the
// earliest part's, Extend moving every part, and the released state.
func TestMultiLockHandle(t *testing.T) {
	t.Parallel()
	cs, rdb := multiClients(t, "fair", 1, dlock.LeaseTTL(time.Second), dlock.WithAutoExtend(false))
	ctx := t.Context()
	m, err := cs[0].AcquireAll(ctx, []string{"zeta", "alpha", "mid"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Names(); fmt.Sprint(got) != "[zeta alpha mid]" {
		t.Errorf("Names() = %v, want [zeta alpha mid]", got)
	}
	earliest := m.Locks()[0].ValidUntil()
	for i, l := range m.Locks() {
		if l.Name() != m.Names()[i] {
			t.Errorf("Locks()[%d].Name() = %q, want %q", i, l.Name(), m.Names()[i])
		}
		if fenceOf(t, l) <= 0 {
			t.Errorf("Fence of part %q not positive", l.Name())
		}
		if l.ValidUntil().Before(earliest) {
			earliest = l.ValidUntil()
		}
	}
	if !m.ValidUntil().Equal(earliest) {
		t.Errorf("ValidUntil() = %v, want the earliest part's, %v", m.ValidUntil(), earliest)
	}
	if err := m.Extend(ctx, time.Millisecond); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Extend(1ms) = %v, want ErrInvalid", err)
	}
	before := m.ValidUntil()
	if err := m.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend(10s) = %v", err)
	}
	if !m.ValidUntil().After(before.Add(5 * time.Second)) {
		t.Errorf("ValidUntil() after Extend(10s) = %v, want about 9s later than %v", m.ValidUntil(), before)
	}
	for _, k := range lockKeys("zeta", "alpha", "mid") {
		if pttl := rdb.PTTL(ctx, k).Val(); pttl < 5*time.Second {
			t.Errorf("PTTL(%s) after Extend(10s) = %v, want about 10s", k, pttl)
		}
	}
	select {
	case <-m.Done():
		t.Error("Done() closed while held")
	default:
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
	if !closedWithin(m.Done(), 0) || m.Err() != dlock.ErrReleased {
		t.Errorf("after Release: Err() = %v, want ErrReleased and Done closed", m.Err())
	}
	if err := m.Extend(ctx, time.Second); err != dlock.ErrReleased {
		t.Errorf("Extend after Release = %v, want ErrReleased", err)
	}
	if n := liveKeys(ctx, rdb, lockKeys("zeta", "alpha", "mid")...); n != 0 {
		t.Errorf("%d lock keys left after Release, want 0", n)
	}
}

// Without auto-extend, an earlier part can run out while AcquireAll waits
// for a later one: AcquireAll gives everything back, starts over, and
// returns a set whose parts are all held.
func TestAcquireAllStartsOverWhenAnEarlierPartRanOut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	var taken atomic.Int32 // acquisitions of s1
	hooks := dlock.WithObserver(dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		if e.Op == dlock.OpAcquire && e.Err == nil && e.Name == "s1" {
			taken.Add(1)
		}
	}})
	cs, rdb := multiClients(t, "fair", 1, dlock.LeaseTTL(time.Second), dlock.WithAutoExtend(false), hooks)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// s2 is held for 1.5s: s1, taken first for a lease of 1s that is not
	// extended, runs out while AcquireAll waits for s2.
	blocker, err := newClient(t, rdb).TryAcquire(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(1500*time.Millisecond, func() { blocker.Release(context.Background()) })
	m, err := cs[0].AcquireAll(ctx, []string{"s1", "s2"})
	if err != nil {
		t.Fatalf("AcquireAll(s1, s2) = %v", err)
	}
	defer m.Release(ctx)
	if err := m.Err(); err != nil {
		t.Errorf("Err() = %v, want nil: every part held", err)
	}
	if n := taken.Load(); n != 2 {
		t.Errorf("s1 taken %d times, want 2 (once more after it ran out)", n)
	}
	for _, l := range m.Locks() {
		if got := rdb.Get(ctx, l.Key()).Val(); holderOf(got) != l.Token() {
			t.Errorf("%s holds %q, want the part's token %q", l.Key(), got, l.Token())
		}
	}
}

// On a Cluster the parts of a set live in different slots, and on different
// nodes (the acquisition is a sequence of per-slot steps); names that share
// their text up to the first '}' share a slot. TryAcquireAll across slots
// is still all or nothing.
func TestClusterAcquireAll(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	leakcheck.Check(t)
	_, cc := startCluster(t)
	ctx := t.Context()
	c := newClient(t, cc, dlock.LeaseTTL(time.Second))
	names := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
	m, err := c.AcquireAll(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]bool{}
	for _, l := range m.Locks() {
		slots[cc.ClusterKeySlot(ctx, l.Key()).Val()] = true
		if got := cc.Get(ctx, l.Key()).Val(); holderOf(got) != l.Token() {
			t.Errorf("%s holds %q, want the part's token", l.Key(), got)
		}
	}
	if len(slots) < 2 {
		t.Errorf("%d names in %d slots, want them spread", len(names), len(slots))
	}
	other := newClient(t, cc)
	if _, err := other.TryAcquireAll(ctx, []string{"c0", "c3", "c9"}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireAll(c0, c3, c9) with c3 held = %v, want ErrNotAcquired", err)
	}
	for _, k := range lockKeys("c0", "c9") {
		if n := cc.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s left after a failed TryAcquireAll", k)
		}
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}

	tagged, err := c.AcquireAll(ctx, []string{"{order:42}:items", "{order:42}:payment"})
	if err != nil {
		t.Fatal(err)
	}
	defer tagged.Release(ctx)
	ls := tagged.Locks()
	if a, b := cc.ClusterKeySlot(ctx, ls[0].Key()).Val(), cc.ClusterKeySlot(ctx, ls[1].Key()).Val(); a != b {
		t.Errorf("slots of %q and %q = %d, %d, want one slot", ls[0].Name(), ls[1].Name(), a, b)
	}
}

// With a reentrant Client, a set re-enters the names its owner already
// holds: releasing the set ends its own holds and leaves the outer one.
func TestAcquireAllReentersOwnersHolds(t *testing.T) {
	t.Parallel()
	cs, rdb := multiClients(t, "reentrant", 1)
	ctx := t.Context()
	owner := asOwner(t, cs[0], "job-1")
	outer, err := owner.Acquire(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := owner.TryAcquireAll(ctx, []string{"r2", "r1"})
	if err != nil {
		t.Fatalf("TryAcquireAll(r2, r1) by the owner of r1 = %v, want it to re-enter r1", err)
	}
	if _, err := asOwner(t, cs[0], "job-2").TryAcquireAll(ctx, []string{"r0", "r1"}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireAll(r0, r1) by another owner = %v, want ErrNotAcquired", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release of the set = %v", err)
	}
	if n := liveKeys(ctx, rdb, lockKeys("r1")...); n != 1 || outer.Err() != nil {
		t.Errorf("after the set's release: r1 key count %d, outer Err() = %v; want the outer hold kept", n, outer.Err())
	}
	if n := liveKeys(ctx, rdb, lockKeys("r0", "r2")...); n != 0 {
		t.Errorf("%d of r0, r2 left, want 0", n)
	}
	if err := outer.Release(ctx); err != nil {
		t.Errorf("outer Release = %v", err)
	}
}

// Per-call options apply to every part of a multi-lock: LeaseTTL and
// HolderMeta to each part's lease (its TTL in Redis and Inspect, its
// metadata in Inspect and in a refused caller's *NotAcquiredError), MaxHold
// to each part (the set is lost at the cap, with an error that says so),
// and MaxWait to the whole acquisition: a part taken late has only what is
// left of it. The next call without options gets the Client's again.
func TestAcquireAllLockOptions(t *testing.T) {
	t.Parallel()
	long(t)
	modes := multiModes
	if testing.Short() { // the options are read before the mode's path: one mode covers them
		modes = modes[:1]
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cs, rdb := multiClients(t, mode, 2, dlock.LeaseTTL(30*time.Second), dlock.HolderMeta("client-meta"))
			c, other := cs[0], cs[1]
			names := []string{"o2", "o1"}
			checkParts := func(what string, ls []*dlock.Lock, meta string, ttlMax time.Duration, ttlMin time.Duration) {
				t.Helper()
				checkMultiParts(ctx, t, c, rdb, mode, what, ls, meta, ttlMax, ttlMin)
			}
			m, err := c.AcquireAll(ctx, names, dlock.LeaseTTL(2*time.Second), dlock.HolderMeta("batch-7"))
			if err != nil {
				t.Fatal(err)
			}
			checkParts("AcquireAll(LeaseTTL(2s), HolderMeta)", m.Locks(), "batch-7", 2*time.Second, 0)
			_, err = other.TryAcquireAll(ctx, []string{"o3", "o1"})
			if na, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || na.Name != "o1" || na.Meta != "batch-7" {
				t.Errorf("TryAcquireAll(o3, o1) with o1 held = %v: NotAcquiredError %+v, want one naming o1 and its holder's metadata", err, na)
			}
			acquireAllMaxWaitBoundsTheWhole(ctx, t, other, rdb, mode)
			if err := m.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}

			// DoAll: the options apply to its parts; MaxHold cancels fn.
			err = c.DoAll(ctx, names, func(ctx context.Context, m *dlock.MultiLock) error {
				checkParts("DoAll(LeaseTTL(2s), HolderMeta)", m.Locks(), "do-meta", 2*time.Second, 0)
				return nil
			}, dlock.LeaseTTL(2*time.Second), dlock.HolderMeta("do-meta"))
			if err != nil {
				t.Errorf("DoAll(LeaseTTL, HolderMeta) = %v", err)
			}
			multiMaxHold(ctx, t, c, names)

			// Without options, the Client's again.
			plain, err := c.AcquireAll(ctx, names)
			if err != nil {
				t.Fatalf("AcquireAll after calls with options = %v", err)
			}
			checkParts("AcquireAll without options", plain.Locks(), "client-meta", 30*time.Second, 10*time.Second)
			for _, l := range plain.Locks() {
				if _, ok := l.Deadline(); ok {
					t.Errorf("part %s without options after calls with MaxHold: Deadline() ok, want no cap", l.Name())
				}
			}
			plain.Release(ctx)
		})
	}
}

// checkMultiParts checks that every part in ls has metadata meta and a TTL
// in (ttlMin, ttlMax], by the Lock, by Inspect and (but over a quorum) in
// Redis.
func checkMultiParts(ctx context.Context, t *testing.T, c *dlock.Client, rdb *redis.Client, mode, what string, ls []*dlock.Lock, meta string, ttlMax, ttlMin time.Duration) {
	t.Helper()
	for _, l := range ls {
		info, err := c.Inspect(ctx, l.Name())
		if d, err := l.TTL(ctx); err != nil || d <= ttlMin || d > ttlMax {
			t.Errorf("%s: part %s: TTL() = %v, %v; want in (%v, %v]", what, l.Name(), d, err, ttlMin, ttlMax)
		}
		if err != nil || info.Meta != meta || l.Meta() != meta || info.TTL <= ttlMin || info.TTL > ttlMax {
			t.Errorf("%s: part %s: Inspect = %+v, %v, Meta() %q; want metadata %q and a TTL in (%v, %v]", what, l.Name(), info, err, l.Meta(), meta, ttlMin, ttlMax)
		}
		if mode != "quorum" {
			if d := rdb.PTTL(ctx, semKey(l.Name())).Val(); d <= ttlMin || d > ttlMax {
				t.Errorf("%s: part %s: PTTL = %v, want in (%v, %v]", what, l.Name(), d, ttlMin, ttlMax)
			}
		}
	}
}

// acquireAllMaxWaitBoundsTheWhole: with o1 held, MaxWait bounds the whole
// of an AcquireAll: o0 comes free halfway through the wait, o1 never; o1's
// part may wait only for what is left, and the parts it took go back.
func acquireAllMaxWaitBoundsTheWhole(ctx context.Context, t *testing.T, other *dlock.Client, rdb *redis.Client, mode string) {
	t.Helper()
	const wait = 4 * time.Second
	held, err := asOwner(t, other, "job-2").TryAcquire(ctx, "o0")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(2 * time.Second)
		released <- time.Now()
		held.Release(context.WithoutCancel(ctx))
	}()
	_, err = asOwner(t, other, "job-3").AcquireAll(ctx, []string{"o0", "o3", "o1"}, dlock.MaxWait(wait))
	end := time.Now()
	rel := <-released
	if !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		!strings.Contains(err.Error(), `"o1"`) || !strings.Contains(err.Error(), "MaxWait") {
		t.Errorf("AcquireAll(o0, o3, o1, MaxWait(%v)) with o1 held = %v, want ErrNotAcquired alone, naming o1 and the wait", wait, err)
	}
	// A wait per part would have waited for o1 from when o0 came free.
	if end.Sub(start) < wait || !end.Before(rel.Add(wait)) {
		t.Errorf("AcquireAll(MaxWait(%v)) returned %v after it began, with o0 free after %v: want the wait bounded over every part", wait, end.Sub(start), rel.Sub(start))
	}
	if given, err := other.TryAcquireAll(ctx, []string{"o0", "o3"}); err != nil {
		t.Errorf("the parts an AcquireAll that waited out its MaxWait took are still held: %v", err)
	} else {
		given.Release(ctx)
	}
	if mode != "quorum" {
		if n := rdb.Exists(ctx, semKey("o1")+":q", semKey("o1")+":qw").Val(); n != 0 {
			t.Errorf("the AcquireAll that waited out its MaxWait left %d queue keys for o1", n)
		}
	}
}

// multiMaxHold: MaxHold cancels DoAll's fn with ErrMaxHold, and ends an
// AcquireAll's multi-lock with a loss that says why.
func multiMaxHold(ctx context.Context, t *testing.T, c *dlock.Client, names []string) {
	t.Helper()
	var cause error
	err := c.DoAll(ctx, names, func(ctx context.Context, m *dlock.MultiLock) error {
		cause = doneCause(ctx)
		return nil
	}, dlock.MaxHold(300*time.Millisecond))
	if !errors.Is(cause, dlock.ErrMaxHold) || !errors.Is(cause, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("DoAll(MaxHold(300ms)): fn's cause %v, DoAll's error %v; want ErrMaxHold and ErrNotHeld", cause, err)
	}
	capped, err := c.AcquireAll(ctx, names, dlock.MaxHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	endedByMaxHold(t, "multi-lock", capped)
	if err := capped.Release(ctx); !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Release of a multi-lock at its max hold = %v, want ErrMaxHold", err)
	}
}

// Invalid options, and options that do not apply (a wait on
// TryAcquireAll), fail AcquireAll, TryAcquireAll and DoAll with ErrInvalid
// before anything is sent to Redis.
func TestAcquireAllLockOptionsBadInputSendsNothing(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	rdb := srv.Client(t)
	sent := &countEvals{}
	rdb.AddHook(sent)
	c := newClient(t, rdb)
	ctx := t.Context()
	names := []string{"b", "a"}
	checkBadLockOptions(t, func(opts ...dlock.LockOption) error {
		_, err := c.TryAcquireAll(ctx, names, opts...)
		return err
	}, func(opts ...dlock.LockOption) error {
		_, err := c.AcquireAll(ctx, names, opts...)
		return err
	}, func(called *bool, opts ...dlock.LockOption) error {
		return c.DoAll(ctx, names, func(context.Context, *dlock.MultiLock) error { *called = true; return nil }, opts...)
	})
	if n := sent.all.Load(); n != 0 {
		t.Errorf("refused calls sent %d commands, want none", n)
	}
}

// checkPartRefused checks the error of a multi acquisition that did not
// take the part: it matches ErrNotAcquired, names the part in its text and
// carries a *NotAcquiredError whose Name is the part; it matches the
// context errors in ctxErrs (and any other errors there, a cause) and no
// other context error.
func checkPartRefused(t *testing.T, what string, err error, part string, ctxErrs ...error) {
	t.Helper()
	na, ok := errors.AsType[*dlock.NotAcquiredError](err)
	if !errors.Is(err, dlock.ErrNotAcquired) || !ok || na.Name != part || !strings.Contains(fmt.Sprint(err), `"`+part+`"`) {
		t.Errorf("%s = %v: NotAcquiredError %+v, want ErrNotAcquired and one naming %q", what, err, na, part)
	}
	for _, ce := range []error{context.Canceled, context.DeadlineExceeded} {
		want := false
		for _, e := range ctxErrs {
			want = want || e == ce
		}
		if errors.Is(err, ce) != want {
			t.Errorf("%s = %v: errors.Is(%v) = %v, want %v", what, err, ce, !want, want)
		}
	}
	for _, e := range ctxErrs {
		if !errors.Is(err, e) {
			t.Errorf("%s = %v, want it to match %v", what, err, e)
		}
	}
}

// Every refusal or give-up of AcquireAll, TryAcquireAll and DoAll carries
// a *NotAcquiredError whose Name is the part that was not taken, as the
// README says: the context already done (then the error matches ctx.Err()
// and its cause too, as a single Acquire's does), the context ending or
// MaxWait running out while a part is awaited, a part held by another, and,
// over a quorum, a part no majority could be reached for. Nothing is left
// held.
func TestMultiLockRefusalNamesThePart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, mode := range append(multiModes[:len(multiModes):len(multiModes)], "noscript") {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cs, _ := multiClients(t, mode, 2)
			c, other := asOwner(t, cs[0], "me"), asOwner(t, cs[1], "other")
			blocker, err := other.TryAcquire(ctx, "r2")
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Release(context.WithoutCancel(ctx))
			names := []string{"r3", "r2", "r1"}
			fn := func(context.Context, *dlock.MultiLock) error {
				t.Error("DoAll ran fn without its locks")
				return nil
			}

			why := errors.New("shutting down")
			done, stop := context.WithCancelCause(ctx)
			stop(why)
			_, err = c.AcquireAll(done, names)
			checkPartRefused(t, "AcquireAll with its context done", err, "r1", context.Canceled, why)
			_, err = c.AcquireAll(done, names, dlock.MaxWait(time.Second))
			checkPartRefused(t, "AcquireAll(MaxWait(1s)) with its context done", err, "r1", context.Canceled, why)
			_, err = c.TryAcquireAll(done, names)
			checkPartRefused(t, "TryAcquireAll with its context done", err, "r1", context.Canceled, why)
			err = c.DoAll(done, names, fn)
			checkPartRefused(t, "DoAll with its context done", err, "r1", context.Canceled, why)

			short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = c.AcquireAll(short, names)
			cancelShort()
			checkPartRefused(t, "AcquireAll whose context ended while it waited for r2", err, "r2", context.DeadlineExceeded)
			_, err = c.AcquireAll(ctx, names, dlock.MaxWait(300*time.Millisecond))
			checkPartRefused(t, "AcquireAll(MaxWait(300ms)) with r2 held", err, "r2")
			err = c.DoAll(ctx, names, fn, dlock.MaxWait(300*time.Millisecond))
			checkPartRefused(t, "DoAll(MaxWait(300ms)) with r2 held", err, "r2")
			_, err = c.TryAcquireAll(ctx, names)
			checkPartRefused(t, "TryAcquireAll with r2 held", err, "r2")

			if given, err := other.TryAcquireAll(ctx, []string{"r1", "r3"}); err != nil {
				t.Errorf("r1 and r3 after the refused calls: %v, want them free", err)
			} else {
				given.Release(ctx)
			}
		})
	}
	t.Run("quorum unreachable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		srvs, nodes := startQuorum(t, 3)
		c := newRedlock(t, nodes, 250*time.Millisecond)
		srvs[1].Kill()
		srvs[2].Kill()
		_, err := c.TryAcquireAll(ctx, []string{"u2", "u1"})
		checkPartRefused(t, "TryAcquireAll with 2 of 3 nodes down", err, "u1")
		_, err = c.AcquireAll(ctx, []string{"u2", "u1"}, dlock.MaxWait(300*time.Millisecond))
		checkPartRefused(t, "AcquireAll(MaxWait(300ms)) with 2 of 3 nodes down", err, "u1")
		if _, ok := errors.AsType[*dlock.QuorumError](err); !ok {
			t.Errorf("AcquireAll(MaxWait(300ms)) with 2 of 3 nodes down = %v, want the last QuorumError too", err)
		}
	})
}

// A MaxWait however short makes one attempt at every part, as it does for
// a single Acquire: AcquireAll and DoAll with MaxWait(1ns) take a set of
// free names, and with one name held they are refused by that part (its
// holder named), give back the parts taken before it, and leave no queue
// entry.
func TestAcquireAllTinyMaxWaitTriesEveryPart(t *testing.T) {
	t.Parallel()
	for _, mode := range append(multiModes[:len(multiModes):len(multiModes)], "noscript") {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cs, rdb := multiClients(t, mode, 2)
			c, other := asOwner(t, cs[0], "me"), asOwner(t, cs[1], "other")
			names := []string{"t3", "t1", "t2"}
			m, err := c.AcquireAll(ctx, names, dlock.MaxWait(time.Nanosecond))
			if err != nil {
				t.Fatalf("AcquireAll(MaxWait(1ns)) of free names = %v, want them taken", err)
			}
			if err := m.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
			ran := false
			err = c.DoAll(ctx, names, func(context.Context, *dlock.MultiLock) error { ran = true; return nil }, dlock.MaxWait(time.Nanosecond))
			if err != nil || !ran {
				t.Errorf("DoAll(MaxWait(1ns)) of free names = %v, fn ran: %v; want it run", err, ran)
			}

			blocker, err := other.TryAcquire(ctx, "t2", dlock.HolderMeta("blocker"))
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Release(context.WithoutCancel(ctx))
			_, err = c.AcquireAll(ctx, names, dlock.MaxWait(time.Nanosecond))
			checkPartRefused(t, "AcquireAll(MaxWait(1ns)) with t2 held", err, "t2")
			if na, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || na.Meta != "blocker" {
				t.Errorf("AcquireAll(MaxWait(1ns)) with t2 held = %v: NotAcquiredError %+v, want t2's holder named", err, na)
			}
			err = c.DoAll(ctx, names, func(context.Context, *dlock.MultiLock) error {
				t.Error("DoAll ran fn without its locks")
				return nil
			}, dlock.MaxWait(time.Nanosecond))
			checkPartRefused(t, "DoAll(MaxWait(1ns)) with t2 held", err, "t2")
			if given, err := other.TryAcquireAll(ctx, []string{"t1", "t3"}); err != nil {
				t.Errorf("t1 and t3 after the refused calls: %v, want them free", err)
			} else {
				given.Release(ctx)
			}
			if mode != "quorum" {
				if n := rdb.Exists(ctx, "dlock:{t2}:q", "dlock:{t2}:qw").Val(); n != 0 {
					t.Errorf("the refused calls left %d queue keys for t2, want none", n)
				}
			}
		})
	}
}

// TestAcquireAllCancelledWhileAPartIsInFlight: AcquireAll holds m1 and
// its request for m2 is in flight to a Redis that froze (SIGSTOP); the
// context ends. AcquireAll returns within a few seconds with an error that
// matches the context's and names m2, and once Redis answers again nothing
// is left held: m1 given back, m2's request (which lands on resume) undone.
func TestAcquireAllCancelledWhileAPartIsInFlight(t *testing.T) {
	// Serial: it bounds how soon AcquireAll returns (under go-redis's 3s read timeout); a busy machine outlasts the bound.
	long(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			srv, rdb := setup(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var froze sync.Once
			c := newClient(t, rdb, waiting(fair), dlock.WithObserver(dlock.Observer{
				Start: func(ctx context.Context, e *dlock.Event) context.Context {
					if e.Name == "m2" && e.Op == dlock.OpAcquire {
						froze.Do(func() {
							srv.Pause()
							time.AfterFunc(100*time.Millisecond, cancel)
						})
					}
					return ctx
				},
			}))
			start := time.Now()
			_, err := c.AcquireAll(ctx, []string{"m2", "m1"})
			took := time.Since(start)
			srv.Resume()
			if took > 3*time.Second {
				t.Errorf("AcquireAll returned %v after its context ended", took-100*time.Millisecond)
			}
			var nae *dlock.NotAcquiredError
			if !errors.Is(err, context.Canceled) || !errors.As(err, &nae) || nae.Name != "m2" {
				t.Errorf("AcquireAll = %v; want context.Canceled and a *NotAcquiredError naming m2", err)
			}
			if !waitFor(5*time.Second, func() bool {
				return liveKeys(context.Background(), rdb, "dlock:{m1}", "dlock:{m2}", "dlock:{m2}:q", "dlock:{m2}:qw") == 0
			}) {
				t.Errorf("5s after Redis answered again: m1 %q, m2 %q still there", rdb.Get(context.Background(), "dlock:{m1}").Val(), rdb.Get(context.Background(), "dlock:{m2}").Val())
			}
			other := newClient(t, rdb, waiting(fair))
			for _, n := range []string{"m1", "m2"} {
				if l, err := other.TryAcquire(context.Background(), n); err != nil {
					t.Errorf("TryAcquire(%s) after = %v", n, err)
				} else {
					l.Release(context.Background())
				}
			}
			c.Close(context.Background())
		})
	}
}

// A Resume names one lease: AcquireAll, TryAcquireAll and DoAll refuse it
// with ErrInvalid, naming the first name in acquisition order, before
// anything is sent, and the lease it names is left to its holder.
func TestAcquireAllRefusesResume(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	rdb := srv.Client(t)
	c := newClient(t, rdb)
	ctx := t.Context()
	held, err := c.TryAcquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	sent := &countEvals{}
	rdb.AddHook(sent)
	names := []string{"b", "a"}
	resume := dlock.Resume(held.Token())
	want := `Resume names one lease, not a multi-lock's`
	if _, err := c.AcquireAll(ctx, names, resume); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), `"a": `+want) {
		t.Errorf("AcquireAll(Resume) = %v, want ErrInvalid naming \"a\": %s", err, want)
	}
	if _, err := c.TryAcquireAll(ctx, names, resume); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquireAll(Resume) = %v, want ErrInvalid", err)
	}
	called := false
	err = c.DoAll(ctx, names, func(context.Context, *dlock.MultiLock) error { called = true; return nil }, resume)
	if !errors.Is(err, dlock.ErrInvalid) || called {
		t.Errorf("DoAll(Resume) = %v (fn called: %v), want ErrInvalid and no call", err, called)
	}
	if n := sent.all.Load(); n != 0 {
		t.Errorf("refused calls sent %d commands, want none", n)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release of the lease the refused calls named = %v, want nil", err)
	}
}
