package dlock_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Client.Held counts each lease by its mode from its acquisition to its
// release or its loss, across the kinds a Client hands out, and a failed
// acquisition counts nothing.
func TestHeldCountsLeasesFromAcquisitionToReleaseOrLoss(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithUnfair(nil))
	want := func(m map[string]int64) {
		t.Helper()
		if got := c.Held(); !maps.Equal(got, m) {
			t.Fatalf("Held() = %v, want %v", got, m)
		}
	}
	want(map[string]int64{})
	a, err := c.Acquire(ctx, "held-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "held-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "held-a"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held name: %v", err)
	}
	sem, err := c.Semaphore("held-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("held-rw")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.Reader().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want(map[string]int64{"unfair": 2, "semaphore": 1, "read": 1})

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key()).Err(); err != nil { // b's lease ends under it
		t.Fatal(err)
	}
	if err := b.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend of a deleted lease: %v", err)
	}
	if err := b.Release(ctx); err == nil {
		t.Fatal("Release of a lost lease succeeded")
	}
	p.Release(ctx)
	r.Release(ctx)
	want(map[string]int64{"unfair": 0, "semaphore": 0, "read": 0})

	// A lease that runs out unextended is no longer held once its holder knows.
	l, err := c.Acquire(ctx, "held-short", dlock.LeaseTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a 200ms lease never ended")
	}
	want(map[string]int64{"unfair": 0, "semaphore": 0, "read": 0})
}

// A write hold downgraded to a read counts as a read from the downgrade
// on, and as neither once released.
func TestHeldCountsADowngradedWriteAsARead(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	rw := newRW(t, c, "held-down")
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Held(), map[string]int64{"write": 1}; !maps.Equal(got, want) {
		t.Fatalf("Held() with a write hold = %v, want %v", got, want)
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Held(), map[string]int64{"write": 0, "read": 1}; !maps.Equal(got, want) {
		t.Errorf("Held() after the downgrade = %v, want %v", got, want)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Held(), map[string]int64{"write": 0, "read": 0}; !maps.Equal(got, want) {
		t.Errorf("Held() after the release = %v, want %v", got, want)
	}
}

// A lease resumed in the Client that still holds its old Lock counts twice
// until the old Lock learns that it was resumed (here, at an extension),
// then once until its release.
func TestHeldCountsAResumedLeaseOnceItsOldLockLearns(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithUnfair(nil))
	old, err := c.TryAcquire(ctx, "held-resumed")
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "held-resumed", dlock.Resume(old.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Held(), map[string]int64{"unfair": 2}; !maps.Equal(got, want) {
		t.Errorf("Held() with the old Lock unaware = %v, want %v", got, want)
	}
	if err := old.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend of the resumed lease's old Lock = %v, want ErrNotHeld", err)
	}
	if got, want := c.Held(), map[string]int64{"unfair": 1}; !maps.Equal(got, want) {
		t.Errorf("Held() once the old Lock learned = %v, want %v", got, want)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Held(), map[string]int64{"unfair": 0}; !maps.Equal(got, want) {
		t.Errorf("Held() after the release = %v, want %v", got, want)
	}
}
