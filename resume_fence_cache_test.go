package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A Lock that asked for its fence, then learned that another Lock resumed
// its lease (its Extend said so), gets no fence any more: its cached one
// is below the resumer's.
func TestFenceOfALockKnownSupersededFails(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	ca, cb := newClient(t, rdb, dlock.WithUnfair(nil), dlock.LeaseTTL(5*time.Second)), newClient(t, rdb, dlock.WithUnfair(nil), dlock.LeaseTTL(5*time.Second))
	a, err := ca.Acquire(ctx, "fence-superseded")
	if err != nil {
		t.Fatal(err)
	}
	fa := fenceOf(t, a)
	b, err := cb.Acquire(ctx, "fence-superseded", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if err := a.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("superseded Extend = %v", err)
	}
	if f, err := a.Fence(ctx); err == nil {
		t.Errorf("Fence of a Lock known superseded (Err %v) = %d (was %d), nil error", a.Err(), f, fa)
	} else if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Fence of a Lock known superseded = %v, want ErrNotHeld", err)
	}
}
