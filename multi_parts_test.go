package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A multi-lock over two independent deployments (AcquireParts): all or
// nothing, each part on its own server, overlapping sets given in either
// order never deadlock nor overlap, bad sets refused before anything is
// sent, and a part's loss told.
func TestAcquirePartsAcrossDeployments(t *testing.T) {
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

	// Overlapping sets in either order: no deadlock, no overlap.
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
