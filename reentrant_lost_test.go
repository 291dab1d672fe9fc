package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// A nested hold of a reentrant lock whose acquire or release reply is lost
// takes nothing from the outer hold: the unknown acquire is undone (one
// hold left), a Release asked again after its lost reply reports success,
// and the outer hold's Release then frees the name for another owner.
func TestReentrantNestedHoldWithALostReplyLeavesTheOuterHold(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 0)
	ctx := t.Context()
	oldServer(t, direct)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true), pipelined(false), dlock.LeaseTTL(20*time.Second)), "x")
	other := asOwner(t, newClient(t, direct, dlock.WithReentrant(true)), "y")
	holds := func() int64 {
		info, err := other.Inspect(ctx, "re-lost")
		if err != nil || len(info.Owners) != 1 {
			return -1
		}
		return info.Owners[0].Holds
	}
	outer, err := c.Acquire(ctx, "re-lost")
	if err != nil {
		t.Fatal(err)
	}
	p.StallReplies()
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Acquire(sctx, "re-lost")
	cancel()
	p.Cut()
	if err == nil {
		t.Fatal("a nested Acquire whose reply was stalled succeeded")
	}
	if !waitFor(10*time.Second, func() bool { return holds() == 1 }) {
		t.Fatalf("after the unknown nested Acquire the owner has %d holds, want 1 (the outer)", holds())
	}
	inner, err := c.Acquire(ctx, "re-lost")
	if err != nil || holds() != 2 {
		t.Fatalf("a nested Acquire after the undo = %v with %d holds, want 2", err, holds())
	}
	p.StallReplies()
	sctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	err = inner.Release(sctx)
	cancel()
	p.Cut()
	if err == nil {
		t.Fatal("a nested Release whose reply was stalled succeeded")
	}
	if err := inner.Release(ctx); err != nil {
		t.Errorf("the nested Release asked again after its lost reply = %v, want nil", err)
	}
	if err := outer.Extend(ctx, 20*time.Second); err != nil || holds() != 1 {
		t.Errorf("the outer hold after the nested one's lost replies: Extend = %v, %d holds; want nil, 1", err, holds())
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryAcquire(ctx, "re-lost")
	if err != nil {
		t.Fatalf("another owner after the outer Release: %v", err)
	}
	l.Release(ctx)
}
