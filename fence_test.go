package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

func TestFenceStrictlyIncreases(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	var last int64
	check := func(how string) {
		t.Helper()
		l, err := c.TryAcquire(ctx, "fenced")
		if err != nil {
			t.Fatalf("TryAcquire %s = %v", how, err)
		}
		if fenceOf(t, l) <= last {
			t.Errorf("Fence() %s = %d, want > %d", how, fenceOf(t, l), last)
		}
		last = fenceOf(t, l)
		if how == "after expiry" || how == "after restart" {
			return
		}
		rdb.PExpire(ctx, l.Key(), time.Millisecond) // let it expire instead of releasing
		waitFor(time.Second, func() bool { return liveKeys(ctx, rdb, l.Key()) == 0 })
	}
	for range 5 {
		check("in a row")
	}
	check("after expiry")
	rdb.Del(ctx, "dlock:{fenced}")

	// A server without persistence comes back empty: the counter is gone,
	// the fence must still rise.
	s.Restart()
	check("after restart")

	// And a fence counter pushed far ahead of the clock keeps counting.
	rdb.Del(ctx, "dlock:{fenced}")
	rdb.Set(ctx, "dlock:{fenced}:fence", "9000000000000000", 0)
	l, err := c.TryAcquire(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fenceOf(t, l), int64(9000000000000001); got != want {
		t.Errorf("Fence() after counter 9e15 = %d, want %d", got, want)
	}
}

// A holder paused past its lease writes late; the guard refuses it because
// a later holder has written with a higher fence.
func TestGuardRejectsLateWrite(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	g := dlock.NewGuard(rdb)

	a, err := c.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Write(ctx, "resource", "a1", fenceOf(t, a), a.Token()); err != nil {
		t.Fatalf("first holder's write = %v", err)
	}
	rdb.Del(ctx, a.Key()) // A pauses; its lease is gone

	b, err := c.TryAcquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if err := g.Write(ctx, "resource", "b1", fenceOf(t, b), b.Token()); err != nil {
		t.Fatalf("second holder's write = %v", err)
	}
	if err := g.Write(ctx, "resource", "b2", fenceOf(t, b), b.Token()); err != nil {
		t.Errorf("second holder's second write = %v, want nil (same fence, same owner)", err)
	}
	if err := g.Write(ctx, "resource", "a2", fenceOf(t, a), a.Token()); !errors.Is(err, dlock.ErrStaleFence) {
		t.Errorf("late write with an older fence = %v, want ErrStaleFence", err)
	}
	if err := g.Write(ctx, "resource", "x", fenceOf(t, b), "another-token"); !errors.Is(err, dlock.ErrStaleFence) {
		t.Errorf("write with an equal fence and another token = %v, want ErrStaleFence", err)
	}
	v, fence, err := g.Read(ctx, "resource")
	if err != nil || v != "b2" || fence != fenceOf(t, b) {
		t.Errorf("Read = %q, %d, %v, want %q, %d, nil", v, fence, err, "b2", fenceOf(t, b))
	}
}

// A foreign value at the fence key fails what issues a fence, with a clear
// error and nothing written: a reentrant acquisition (its fence is issued
// with the first hold), or Fence of a plain lease (issued when asked for),
// which leaves the lease held.
func TestForeignFenceKeyLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, false) {
		name := "foreign-" + m.name
		rdb.RPush(t.Context(), "dlock:{"+name+"}:fence", "not a counter")
		l, err := m.new(t).TryAcquire(m.ctx(t.Context()), name)
		if m.name != "reentrant" {
			if err != nil {
				t.Fatalf("%s: TryAcquire with a list at the fence key = %v, want the lock (no fence asked for)", m.name, err)
			}
			_, err = l.Fence(t.Context())
			if l.Err() != nil {
				t.Errorf("%s: the lease after a failed Fence: %v, want it held", m.name, l.Err())
			}
			l.Release(t.Context())
		}
		if !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("%s: with a list at the fence key: %v, want ErrWrongType", m.name, err)
		} else if strings.Contains(err.Error(), "script") {
			t.Errorf("%s: error text %q shows the script's internals", m.name, err)
		}
		if n := liveKeys(t.Context(), rdb, "dlock:{"+name+"}"); n != 0 {
			t.Errorf("%s: lock key left behind", m.name)
		}
	}
}
