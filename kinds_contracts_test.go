package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A Leadership's Value is the campaign's value until a Proclaim is
// answered: a Proclaim not sent (its context over) and one refused
// after the term ended leave the value proclaimed last.
func TestLeadershipValueChangesOnlyWithAnAnsweredProclaim(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false))
	ld, err := newElection(t, c, "ldv").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if ld.Value() != "a" {
		t.Errorf("Value before any Proclaim = %q, want the campaign's a", ld.Value())
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if err := ld.Proclaim(done, "unsent"); err == nil || ld.Value() != "a" {
		t.Errorf("Proclaim under a context over = %v, Value %q; want an error and a", err, ld.Value())
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil || ld.Value() != "a2" {
		t.Fatalf("Proclaim(a2) = %v, Value %q; want a2", err, ld.Value())
	}
	if !waitFor(10*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{ldv}").Val() == 0 }) {
		t.Fatal("the 300ms lease never lapsed")
	}
	if err := ld.Proclaim(ctx, "stale"); !errors.Is(err, dlock.ErrNotHeld) || ld.Value() != "a2" {
		t.Errorf("Proclaim after the term ended = %v, Value %q; want ErrNotHeld and a2", err, ld.Value())
	}
}

// Observe delivers a leadership once: a re-read that finds it unchanged
// (a Proclaim of the same value wakes the reader) sends nothing, and the
// next value the reader takes is the next change.
func TestObserveDoesNotRedeliverAnUnchangedLeadership(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	e := newElection(t, newClient(t, rdb, dlock.LeaseTTL(5*time.Second)), "obs-once")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(context.WithoutCancel(ctx))
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := e.Observe(octx)
	take := func() dlock.Leader {
		t.Helper()
		select {
		case got := <-seen:
			return got
		case <-ctx.Done():
			t.Fatal("Observe delivered nothing")
		}
		return dlock.Leader{}
	}
	if got := take(); got.Value != "a" || got.Fence != ld.Fence() {
		t.Fatalf("Observe's first value = %+v, want a at fence %d", got, ld.Fence())
	}
	for range 3 {
		if err := ld.Proclaim(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		select { // (a bound on the look, not on the test: a pass waits it out)
		case got := <-seen:
			t.Errorf("Observe delivered %+v again after a Proclaim of the same value", got)
		case <-time.After(300 * time.Millisecond):
		}
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if got := take(); got.Value != "a2" || got.Fence != ld.Fence() {
		t.Errorf("Observe's value after Proclaims of a, a, a and a2 = %+v, want a2 (a once only)", got)
	}
}

// A read or write hold asked for inside a Do of the same name is refused
// as nested before anything else is checked, a nil function included,
// and the refusal names the lock once.
func TestRWDoInsideAHoldOfTheNameIsRefusedAsNestedBeforeItsFunc(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rw := newRW(t, newClient(t, rdb), "rw-nil-nested")
	err := rw.Writer().Do(ctx, func(ctx context.Context, _ *dlock.Lock) error {
		for _, inner := range []*dlock.RWLocker{rw.Reader(), rw.Writer()} {
			err := inner.Do(ctx, nil)
			if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "would wait for") || prefixes(err.Error()) != 1 {
				t.Errorf("Do(nil) (write %v) inside the write's Do = %v, want ErrInvalid for the nesting", inner.Write(), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	// The mark is Do's own: the caller's context carries none after it.
	if err := rw.Reader().Do(ctx, nil); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "the function to run is nil") {
		t.Errorf("Do(nil) under the caller's context = %v, want ErrInvalid for the nil function", err)
	}
	if err := rw.Reader().Do(ctx, func(context.Context, *dlock.Lock) error { return nil }); err != nil {
		t.Errorf("Do under the caller's context after the write's Do = %v, want nil", err)
	}
}

// A semaphore asked with N = 0 (the size kept in Redis) refuses in its own
// words, which name no count, and its NotAcquiredError says Permits 0.
func TestSemaphoreOfTheStoredSizeRefusesWithoutACount(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := newSemaphore(t, newClient(t, rdb), "sem-stored", 0)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits(1) = %v, %v", ok, err)
	}
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = s.TryAcquire(ctx)
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) || !errors.Is(err, dlock.ErrNotAcquired) || na.Permits != 0 ||
		na.Error() != "no permit free: all held, or others waiting ahead" {
		t.Errorf("TryAcquire with the one permit held = %v (%+v), want the refusal without a count", err, na)
	}
}

// A reentrant lock's hash that names no owner (no Client writes one) is
// still a refusal, not an error: it matches ErrNotAcquired and names the
// hold it found.
func TestReentrantRefusalByAHashWithAnEmptyOwnerNamesItsHold(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const key = "dlock:{re-empty-owner}"
	deadline := time.Now().Add(time.Minute).UnixMilli()
	if err := rdb.HSet(ctx, key, "owner", "", "fence", "1", "h:tok", deadline).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, key, time.Minute)
	_, err := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "bob").TryAcquire(ctx, "re-empty-owner")
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) || !errors.Is(err, dlock.ErrNotAcquired) || na.Holder != "tok" || !strings.HasPrefix(na.Error(), "held by another ") {
		t.Errorf("TryAcquire on a hash with an empty owner = %v (%+v), want a refusal naming the hold tok", err, na)
	}
	if n, _ := rdb.HLen(ctx, key).Result(); n != 3 {
		t.Errorf("the refused attempt changed the hash: %d fields, want 3", n)
	}
}

// A zero RWLocker (made by no RWMutex, or a zero RWMutex's) given a nil
// function to run gets ErrInvalid, not a panic.
func TestZeroRWLockerDoOfANilFuncIsInvalid(t *testing.T) {
	t.Parallel()
	var l dlock.RWLocker
	var rw dlock.RWMutex
	for name, do := range map[string]func() error{
		"Do":                   func() error { return l.Do(t.Context(), nil) },
		"TryDo":                func() error { return l.TryDo(t.Context(), nil) },
		"zero RWMutex's Do":    func() error { return rw.Writer().Do(t.Context(), nil) },
		"zero RWMutex's TryDo": func() error { return rw.Reader().TryDo(t.Context(), nil) },
	} {
		if err := noPanic(do); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s(nil) on a zero RWLocker = %v, want ErrInvalid", name, err)
		}
	}
}

// A zero or nil RWLocker's acquisitions get ErrInvalid, not a panic.
func TestZeroRWLockerAcquisitionsAreInvalid(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fn := func(context.Context, *dlock.Lock) error { return nil }
	for _, l := range []*dlock.RWLocker{{}, nil} {
		for name, call := range map[string]func() error{
			"TryAcquire": func() error { _, err := l.TryAcquire(ctx); return err },
			"Acquire":    func() error { _, err := l.Acquire(ctx); return err },
			"Do":         func() error { return l.Do(ctx, fn) },
			"TryDo":      func() error { return l.TryDo(ctx, fn) },
		} {
			if err := noPanic(call); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("%s on RWLocker %p = %v, want ErrInvalid", name, l, err)
			}
		}
	}
}

// noPanic returns f's error, or an error saying that f panicked.
func noPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}
