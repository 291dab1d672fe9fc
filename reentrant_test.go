package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

func TestReentrantHoldsCount(t *testing.T) {
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "job-7")
	ctx := t.Context()
	var holds []*dlock.Lock
	for i := range 3 {
		l, err := c.TryAcquire(ctx, "re")
		if err != nil {
			t.Fatalf("hold %d: TryAcquire = %v, want re-entry", i+1, err)
		}
		holds = append(holds, l)
	}
	if fenceOf(t, holds[1]) != fenceOf(t, holds[0]) || fenceOf(t, holds[2]) != fenceOf(t, holds[0]) {
		t.Errorf("fences of nested holds = %d, %d, %d, want the first hold's", fenceOf(t, holds[0]), fenceOf(t, holds[1]), fenceOf(t, holds[2]))
	}
	info, err := c.Inspect(ctx, "re")
	if err != nil || len(info.Owners) != 1 || info.Owners[0].Holds != 3 || info.Type != "hash" {
		t.Fatalf("Inspect = %+v, %v, want one owner with 3 holds", info, err)
	}
	for i, l := range holds { // nested holds share the owner's token, as they share the fence
		if l.Token() != holds[0].Token() || l.Token() != info.Owners[0].ID {
			t.Errorf("hold %d: Token() = %q, want the owner's id %q", i+1, l.Token(), info.Owners[0].ID)
		}
	}
	other := newClient(t, rdb, dlock.WithReentrant(true))
	for i, l := range holds {
		if _, err := asOwner(t, other, "job-7").TryAcquire(t.Context(), "re"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("another Client with the same owner string, %d holds left: %v, want ErrNotAcquired", 3-i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %d = %v", i+1, err)
		}
		want := int64(1)
		if i == 2 {
			want = 0
		}
		if n := liveKeys(ctx, rdb, "dlock:{re}"); n != want {
			t.Errorf("after %d of 3 releases: EXISTS = %d, want %d", i+1, n, want)
		}
	}
	if l, err := other.TryAcquire(ctx, "re"); err != nil {
		t.Errorf("TryAcquire after the last release = %v, want the lock", err)
	} else {
		l.Release(ctx)
	}
}

func TestReentrantNonOwnerReleaseRefused(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.WithAutoExtend(false))
	b, err := asOwner(t, c, "b").TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dlock:{re}") // b's lease is gone
	a, err := asOwner(t, c, "a").TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	if err := b.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("non-owner Release = %v, want ErrNotHeld", err)
	}
	if info, _ := c.Inspect(ctx, "re"); len(info.Owners) != 1 || info.Owners[0].Holds != 1 || info.Owners[0].ID != a.Token() {
		t.Errorf("owner's hold after a non-owner's release: %+v, want it unchanged", info.Owners)
	}
}

func TestReentrantHoldLostBehindItsBack(t *testing.T) {
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "x")
	ctx := t.Context()
	h1, _ := c.TryAcquire(ctx, "re")
	h2, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	// One hold lost behind our back: the first hold field in the hash.
	fields, _ := rdb.HKeys(ctx, "dlock:{re}").Result()
	for _, f := range fields {
		if strings.HasPrefix(f, "h:") {
			rdb.HDel(ctx, "dlock:{re}", f)
			break
		}
	}
	// Whichever hold it was, its Release reports the loss, the other's does
	// not, and the key stays until the last live hold is released.
	e1 := h1.Release(ctx)
	if n := liveKeys(ctx, rdb, "dlock:{re}"); errors.Is(e1, dlock.ErrNotHeld) == (n == 0) {
		t.Errorf("after the first Release (%v): EXISTS = %d", e1, n)
	}
	e2 := h2.Release(ctx)
	if errors.Is(e1, dlock.ErrNotHeld) == errors.Is(e2, dlock.ErrNotHeld) || (e1 != nil && e2 != nil) {
		t.Errorf("Releases = %v, %v: want exactly one ErrNotHeld (the lost hold) and one nil", e1, e2)
	}
	if n := liveKeys(ctx, rdb, "dlock:{re}"); n != 0 {
		t.Errorf("after the last hold's Release: EXISTS = %d, want 0", n)
	}
}

func TestReentrantExpiryDuringNestedHoldSignalsOuter(t *testing.T) {
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(300*time.Millisecond)), "x")
	ctx := t.Context()
	outer, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dlock:{re}") // the lease is lost while nested
	for name, l := range map[string]*dlock.Lock{"outer": outer, "inner": inner} {
		if !closedWithin(l.Done(), 2*time.Second) {
			t.Errorf("%s hold: Done() still open 2s after the lease was lost", name)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s hold: Err() = %v, want ErrNotHeld", name, err)
		}
		l.Release(ctx)
	}
}

func TestReentrantDoInsideDo(t *testing.T) {
	_, rdb := setup(t)
	rc := newClient(t, rdb, dlock.WithReentrant(true))
	c := asOwner(t, rc, "request-1")
	ctx := t.Context()
	err := c.Do(ctx, "re", func(ctx context.Context, outer *dlock.Lock) error {
		// Another flow (another owner, or none) must wait, not re-enter.
		for _, other := range []*dlock.Client{rc, asOwner(t, rc, "request-2")} {
			if _, err := other.TryAcquire(t.Context(), "re"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire by another flow = %v, want ErrNotAcquired", err)
			}
		}
		return c.Do(ctx, "re", func(ctx context.Context, inner *dlock.Lock) error {
			if fenceOf(t, inner) != fenceOf(t, outer) || inner.Token() != outer.Token() {
				t.Errorf("nested Do's Lock: fence %d, token %q; want the outer hold's, %d and %q",
					fenceOf(t, inner), inner.Token(), fenceOf(t, outer), outer.Token())
			}
			info, _ := c.Inspect(ctx, "re")
			if len(info.Owners) != 1 || info.Owners[0].Holds != 2 {
				t.Errorf("inside nested Do: owners = %+v, want one with 2 holds", info.Owners)
			}
			return nil
		})
	})
	if err != nil {
		t.Errorf("nested Do = %v", err)
	}
	if n := liveKeys(ctx, rdb, "dlock:{re}"); n != 0 {
		t.Error("lock still held after the outer Do returned")
	}
	// A plain lock and a reentrant lock cannot share a name.
	rdb.Set(ctx, "dlock:{mixed}", "plain-token", time.Minute)
	if _, err := c.TryAcquire(ctx, "mixed"); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("reentrant TryAcquire on a plain lock's key = %v, want ErrWrongType", err)
	}
}

// An owner is given only to a reentrant Client, and is not empty.
func TestOwnerRefusedWhereItDoesNotApply(t *testing.T) {
	_, rdb := setup(t)
	if _, err := newClient(t, rdb).Owner("job-7"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Owner on a plain Client = %v, want ErrInvalid", err)
	}
	if _, err := newClient(t, rdb, dlock.WithReentrant(true)).Owner(""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Owner(\"\") = %v, want ErrInvalid", err)
	}
}
