package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// The append-only file turned off while a durable lease is held: its
// extension fails as not durable, in dlock's words, and leaves the lease
// held; the lease is not lost, nor the extension taken for a refusal to
// acquire.
func TestDurableExtensionWithTheAppendOnlyFileTurnedOffFailsAsNotDurable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "everysec")
	c := newClient(t, rdb, dlock.WithDurableGrants(time.Second), dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))
	l, err := c.TryAcquire(ctx, "off")
	if err != nil {
		t.Fatalf("durable TryAcquire = %v", err)
	}
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendonly", "no"); err != nil {
		t.Fatal(err)
	}
	err = l.Extend(ctx, time.Minute)
	if !errors.Is(err, dlock.ErrNotDurable) || errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Extend with appendonly off = %v, want ErrNotDurable, neither ErrNotHeld nor ErrNotAcquired", err)
	}
	if msg := err.Error(); strings.Contains(msg, "ERR") || prefixes(msg) != 1 {
		t.Errorf("Extend with appendonly off = %q, want dlock's words without Redis's reply", msg)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// The same with an Observer of the server's clock, whose time the
// extension's reply then carries: the refusal of WAITAOF is still the
// error, at once, and not taken for an acknowledgement that timed out
// (which Extend would try again until little of the lease was left).
func TestDurableExtensionWithTheAppendOnlyFileTurnedOffFailsAsNotDurableWhileTheClockIsWatched(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "everysec")
	c := newClient(t, rdb, dlock.WithDurableGrants(time.Second), dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute),
		dlock.WithObserver(dlock.Observer{Clock: func(context.Context, *dlock.Event) {}}))
	l, err := c.TryAcquire(ctx, "off")
	if err != nil {
		t.Fatalf("durable TryAcquire = %v", err)
	}
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendonly", "no"); err != nil {
		t.Fatal(err)
	}
	err = l.Extend(ctx, time.Minute)
	if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrInvalid) || errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Extend with appendonly off = %v, want ErrNotDurable and ErrInvalid, neither ErrNotHeld nor ErrNotAcquired", err)
	}
	if err != nil && !strings.Contains(err.Error(), "append-only file is off") {
		t.Errorf("Extend with appendonly off = %q, want the refusal's words", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}
