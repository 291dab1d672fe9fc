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

// A multi-lock over two independent deployments (AcquireParts): all or
// nothing, each part on its own server, overlapping sets given in either
// order never deadlock nor overlap, bad sets refused before anything is
// sent, and a part's loss told.
func TestAcquirePartsAcrossDeployments(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	rdb1, rdb2 := redistest.Start(t).Client(t), redistest.Start(t).Client(t)
	c1, c2 := newClient(t, rdb1), newClient(t, rdb2)
	ab := []dlock.Part{{Client: c1, Name: "accounts:a"}, {Client: c2, Name: "accounts:b"}}

	m, err := dlock.AcquireParts(ctx, ab)
	if err != nil {
		t.Fatal(err)
	}
	if liveKeys(ctx, rdb1, "dlock:{accounts:a}") != 1 || liveKeys(ctx, rdb2, "dlock:{accounts:b}") != 1 {
		t.Fatal("each part is not held on its own server")
	}
	if got := m.Names(); len(got) != 2 || got[0] != "accounts:a" || got[1] != "accounts:b" {
		t.Errorf("Names = %v, want the parts' names in the order given", got)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if liveKeys(ctx, rdb1, "dlock:{accounts:a}")+liveKeys(ctx, rdb2, "dlock:{accounts:b}") != 0 {
		t.Fatal("Release left a part held")
	}

	// All or nothing: b is held elsewhere, a is given back.
	other := newClient(t, rdb2)
	held, err := other.TryAcquire(ctx, "accounts:b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = dlock.AcquireParts(ctx, ab, dlock.MaxWait(100*time.Millisecond))
	var na *dlock.NotAcquiredError
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &na) || na.Name != "accounts:b" {
		t.Fatalf("AcquireParts with b held = %v, want ErrNotAcquired naming accounts:b", err)
	}
	if liveKeys(ctx, rdb1, "dlock:{accounts:a}") != 0 {
		t.Fatal("the part taken before the refusal was not given back")
	}
	held.Release(ctx)

	partsOverlappingInEitherOrder(ctx, t, ab)

	// Refused before anything is sent.
	for _, bad := range [][]dlock.Part{
		nil,
		{{Client: nil, Name: "x"}},
		{{Client: c1, Name: "same"}, {Client: c1, Name: "same"}},
		{{Client: c1, Name: "same"}, {Client: c2, Name: "same"}}, // one key, on two servers: a quorum's job
		{{Client: c1, Name: ""}},
	} {
		if _, err := dlock.AcquireParts(ctx, bad); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("AcquireParts(%v) = %v, want ErrInvalid", bad, err)
		}
	}

	// A part lost: the set is told, naming it.
	m, err = dlock.AcquireParts(ctx, ab)
	if err != nil {
		t.Fatal(err)
	}
	rdb2.Del(ctx, "dlock:{accounts:b}")
	if err := m.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend with b gone = %v, want ErrNotHeld", err)
	}
	if !closedWithin(m.Done(), time.Second) {
		t.Fatal("Done not closed after a part was lost")
	}
	m.Release(ctx)
}

// partsOverlappingInEitherOrder: goroutines take the set ab in either
// order: no deadlock, no overlap.
func partsOverlappingInEitherOrder(ctx context.Context, t *testing.T, ab []dlock.Part) {
	t.Helper()
	var inside, overlaps, done atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for g := range 6 {
		wg.Go(func() {
			parts := ab
			if g%2 == 1 {
				parts = []dlock.Part{ab[1], ab[0]}
			}
			for i := 0; i < 10 && time.Now().Before(deadline); i++ {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				m, err := dlock.AcquireParts(wctx, parts)
				cancel()
				if err != nil {
					t.Errorf("AcquireParts: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := m.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Errorf("%d overlaps of sets that share their locks", overlaps.Load())
	}
	if done.Load() == 0 {
		t.Error("no set was ever taken")
	}
}

// AcquireParts over three servers, one paused: all or nothing, nothing left
// held on the others (now or once the paused one resumes).
func TestAcquirePartsWithAServerPausedIsAllOrNothing(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb1 := setup(t)
	s2 := redistest.Start(t)
	s3 := redistest.Start(t)
	rdb2, rdb3 := s2.Client(t), s3.Client(t)
	ctx := t.Context()
	c1, c2, c3 := newClient(t, rdb1), newClient(t, rdb2), newClient(t, rdb3)
	parts := []dlock.Part{{Client: c3, Name: "a"}, {Client: c1, Name: "b"}, {Client: c2, Name: "c"}}
	s2.Pause()
	start := time.Now()
	// (MaxWait alone does not bound a call to a server that does not
	// answer, for Acquire as for AcquireParts: go-redis's timeouts do, 12s;
	// a ctx deadline bounds it.)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	m, err := dlock.AcquireParts(cctx, parts, dlock.MaxWait(300*time.Millisecond), dlock.LeaseTTL(2*time.Second))
	cancel()
	el := time.Since(start)
	s2.Resume()
	if err == nil {
		m.Release(ctx)
		t.Fatal("AcquireParts with a paused server succeeded")
	}
	t.Logf("refused after %v: %v", el, err)
	if el > 15*time.Second { // pre-existing: a single Acquire takes ~5s here too (go-redis read timeout, ctx not used for I/O)
		t.Errorf("refusal took %v", el)
	}
	check := func() []string {
		var held []string
		for _, p := range []struct {
			rdb  *redis.Client
			name string
		}{{rdb3, "a"}, {rdb1, "b"}, {rdb2, "c"}} {
			if p.rdb.Exists(ctx, "dlock:{"+p.name+"}").Val() == 1 {
				held = append(held, p.name)
			}
		}
		return held
	}
	if h := check(); len(h) > 0 && !waitFor(3*time.Second, func() bool { return len(check()) == 0 }) {
		t.Errorf("left held after the refusal: %v", check())
	}
	// Now all are free: the same call succeeds at once.
	m, err = dlock.AcquireParts(ctx, parts, dlock.MaxWait(time.Second))
	if err != nil {
		t.Fatalf("AcquireParts after resume: %v", err)
	}
	m.Release(ctx)
}

// Overlapping AcquireParts over 3 servers in varied orders, with prefixes:
// no deadlock, no overlap, one key twice (two Clients, same server, same
// prefix) refused, the same name under two prefixes on one server allowed.
func TestAcquirePartsOverlappingNeitherDeadlockNorOverlap(t *testing.T) {
	t.Parallel()
	_, rdb1 := setup(t)
	s2, s3 := redistest.Start(t), redistest.Start(t)
	rdb2, rdb3 := s2.Client(t), s3.Client(t)
	ctx := t.Context()
	cs := []*dlock.Client{newClient(t, rdb1), newClient(t, rdb2), newClient(t, rdb3), newClient(t, rdb1, dlock.WithPrefix("other:"))}
	type res struct {
		c    int
		name string
	}
	all := []res{{0, "x"}, {1, "y"}, {2, "z"}, {3, "x"}, {1, "w"}}
	inside := map[res]*atomic.Int32{}
	for _, r := range all {
		inside[r] = new(atomic.Int32)
	}
	var over atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	var done atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 60 && time.Now().Before(deadline); i++ {
				perm := r.Perm(len(all))[:2+r.IntN(len(all)-1)]
				var ps []dlock.Part
				var rs []res
				for _, j := range perm {
					ps = append(ps, dlock.Part{Client: cs[all[j].c], Name: all[j].name})
					rs = append(rs, all[j])
				}
				m, err := dlock.AcquireParts(ctx, ps, dlock.MaxWait(2*time.Second))
				if err != nil {
					t.Errorf("AcquireParts(%v): %v", rs, err)
					return
				}
				for _, x := range rs {
					if inside[x].Add(1) > 1 {
						over.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
				for _, x := range rs {
					inside[x].Add(-1)
				}
				if err := m.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d multi-locks", done.Load())
	if over.Load() > 0 {
		t.Errorf("%d overlaps", over.Load())
	}
	c1b := newClient(t, rdb1)
	if _, err := dlock.AcquireParts(ctx, []dlock.Part{{Client: cs[0], Name: "q"}, {Client: c1b, Name: "q"}}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("same key via two Clients of one server: %v, want ErrInvalid", err)
	}
}

// AcquireParts with MaxWait(0) tries each part once, as TryAcquireAll does:
// with a part held elsewhere it returns ErrNotAcquired without waiting
// (its ctx has no deadline), and keeps nothing.
func TestAcquirePartsWithMaxWaitZeroTriesOnce(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	rdb1, rdb2 := redistest.Start(t).Client(t), redistest.Start(t).Client(t)
	c1, c2 := newClient(t, rdb1), newClient(t, rdb2)
	held, err := newClient(t, rdb2).TryAcquire(ctx, "parts-once:b")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := dlock.AcquireParts(ctx, []dlock.Part{{Client: c1, Name: "parts-once:a"}, {Client: c2, Name: "parts-once:b"}}, dlock.MaxWait(0))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("AcquireParts(MaxWait(0)) with a part held = %v, want ErrNotAcquired", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("AcquireParts(MaxWait(0)) with a part held waited")
	}
	if liveKeys(ctx, rdb1, "dlock:{parts-once:a}") != 0 {
		t.Fatal("the part taken before the refusal was not given back")
	}
}

// AcquireParts over Clients with different prefixes, given in an order
// that is neither their names' nor their keys' (the acquisition order):
// Locks and Names follow the order given, each Lock the part's own key.
func TestAcquirePartsLocksFollowTheGivenOrderAcrossPrefixes(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	cz, ca, cd := newClient(t, rdb, dlock.WithPrefix("z:")), newClient(t, rdb, dlock.WithPrefix("a:")), newClient(t, rdb)
	parts := []dlock.Part{{Client: cz, Name: "a"}, {Client: ca, Name: "z"}, {Client: cd, Name: "m"}, {Client: ca, Name: "b"}, {Client: cz, Name: "0"}}
	keys := []string{"z:{a}", "a:{z}", "dlock:{m}", "a:{b}", "z:{0}"}
	m, err := dlock.AcquireParts(ctx, parts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	locks, names := m.Locks(), m.Names()
	if len(locks) != len(parts) || len(names) != len(parts) {
		t.Fatalf("%d Locks and %d Names, want %d", len(locks), len(names), len(parts))
	}
	for i, p := range parts {
		if locks[i].Name() != p.Name || locks[i].Key() != keys[i] || names[i] != p.Name {
			t.Errorf("part %d: Lock %q at %q, name %q; want %q at %q", i, locks[i].Name(), locks[i].Key(), names[i], p.Name, keys[i])
		}
		if n := liveKeys(ctx, rdb, keys[i]); n != 1 {
			t.Errorf("part %d: %s not held", i, keys[i])
		}
	}
}

// A part with no Client is refused with ErrInvalid, numbered as given,
// before its name is looked at; a bad name of a part that has one is
// refused with the name's own error, numbered too.
func TestAcquirePartsRefusesAPartWithNoClient(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb)
	for _, tc := range []struct {
		parts []dlock.Part
		want  string
	}{
		{[]dlock.Part{{Client: c, Name: "a"}, {Name: "b"}}, `part 2 of 2 ("b") has no Client`},
		{[]dlock.Part{{Client: c, Name: "a"}, {Name: ""}}, `part 2 of 2 ("") has no Client`},
		{[]dlock.Part{{Client: c, Name: ""}, {Client: c, Name: "b"}}, `empty lock name (name 1 of 2)`},
	} {
		if _, err := dlock.AcquireParts(t.Context(), tc.parts); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("AcquireParts(%v) = %v, want ErrInvalid saying %s", tc.parts, err, tc.want)
		}
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys in Redis after refused calls, want 0", n)
	}
}
