package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A write hold downgraded to a read is a read in its later events, as
// Held counts it: its extension's and its release's Mode say "read".
func TestDowngradedHoldsEventsNameItARead(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var mu sync.Mutex
	var modes []string // "<op> <mode>" of each event's end
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithObserver(dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		modes = append(modes, string(e.Op)+" "+e.Mode)
	}}))
	rw := newRW(t, c, "downgraded-events")
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{string(dlock.OpAcquire) + " write", string(dlock.OpExtend) + " write", string(dlock.OpExtend) + " read", string(dlock.OpRelease) + " read"}
	if !slices.Equal(modes, want) {
		t.Errorf("events' ops and modes = %q, want %q", modes, want)
	}
}

// Inside a write's Do that downgraded it, the context holds a read: a read
// of the same lock is refused as a read inside a read, not as one inside
// the write.
func TestReadInsideADowngradedDoIsRefusedAsAReadInsideARead(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rw := newRW(t, newClient(t, rdb), "downgraded-nested")
	err := rw.Writer().Do(ctx, func(ctx context.Context, w *dlock.Lock) error {
		if err := rw.Downgrade(ctx, w); err != nil {
			return err
		}
		_, err := rw.Reader().TryAcquire(ctx)
		if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "a read inside a read") {
			t.Errorf("a read inside the downgraded write's Do = %v, want ErrInvalid for a read inside a read", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
}

// A hold's Lock.Context carries it as a Do's context does: a hold of the
// same lock asked for under it is refused as nested, not left to wait for
// the hold itself; once the hold is released, the lock is free again.
func TestHoldAskedUnderAHoldsContextIsRefusedAsNested(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rw := newRW(t, newClient(t, rdb), "context-nested")
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rw.Reader().Acquire(w.Context())
	if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "holds the write of the same lock") {
		t.Errorf("a read asked under the write's Context = %v, want ErrInvalid for the nesting", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a read once the write was released = %v", err)
	}
	r.Release(ctx)
}
