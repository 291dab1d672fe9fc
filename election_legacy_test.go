package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A leadership that a version of dlock before the marks took (its token
// without "e:", the tag 1 in the low bits of its 22nd character) may still
// be held when this one starts: Leader reads it as the leader, a Resume
// of it as a plain lock is refused, and one as a leadership takes it over.
// A plain lock whose metadata holds "e:" names no leader.
func TestALeadershipFromBeforeTheMarksIsStillALeaders(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	const name, old = "before-marks", "QQQQQQQQQQQQQQQQQQQQQR.node-a:8080" // ('R': the tag 1)
	if err := rdb.Set(ctx, "dlock:{"+name+"}", old, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	e := newElection(t, c, name)
	if ld, err := e.Leader(ctx); err != nil || ld.Token != old || ld.Value != "node-a:8080" {
		t.Errorf("Leader = %+v, %v; want the leadership of %q", ld, err, old)
	}
	if l, err := c.TryAcquire(ctx, name, dlock.Resume(old)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resumed as a plain lock: %v, %v; want ErrNotHeld", l, err)
	}
	ld, err := e.Campaign(ctx, "node-a:8080", dlock.Resume(old))
	if err != nil {
		t.Fatalf("resumed as a leadership: %v", err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Errorf("Resign: %v", err)
	}

	l, err := c.TryAcquire(ctx, "marked-meta", dlock.HolderMeta("e:x"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if got, err := newElection(t, c, "marked-meta").Leader(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Leader of a lock whose metadata is %q = %+v, %v; want ErrWrongType", "e:x", got, err)
	}
}
