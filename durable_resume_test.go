package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A resume of a lease (Resume) that the append-only file does not have in
// time is refused and undone as a TryAcquire's grant is (ErrNotDurable and
// ErrNotAcquired): its extension superseded the Lock that held the lease,
// which must not be left to run out driven by nobody.
func TestDurableResumeNotMadeDurableIsUndone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "everysec")
	c := newClient(t, rdb, dlock.WithDurableGrants(300*time.Millisecond), dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))
	l, err := durableTryAcquire(ctx, c, "resumed")
	if err != nil {
		t.Fatalf("durable TryAcquire = %v", err)
	}
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendfsync", "no"); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "resumed", dlock.Resume(l.Token()))
	if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("durable resume never fsynced = %v, want ErrNotDurable and ErrNotAcquired", err)
	}
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendfsync", "always"); err != nil {
		t.Fatal(err)
	}
	// The old Lock was superseded by the resume's extension: the lease is
	// undone, so that the lock is free at once, not after the lease's TTL.
	other := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))
	var again *dlock.Lock
	if !waitFor(5*time.Second, func() bool { again, err = other.TryAcquire(ctx, "resumed"); return err == nil }) {
		t.Fatalf("TryAcquire after a refused durable resume = %v, want the lock free", err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded holder's Extend = %v, want ErrNotHeld", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// The same when the server refuses WAITAOF (the append-only file turned
// off) as the resume's extension lands: refused and undone, in dlock's
// words, and the lock is free at once.
func TestDurableResumeRefusedByWAITAOFIsUndone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "always")
	c := newClient(t, rdb, dlock.WithDurableGrants(time.Second), dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))
	l, err := durableTryAcquire(ctx, c, "resumed")
	if err != nil {
		t.Fatalf("durable TryAcquire = %v", err)
	}
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendonly", "no"); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "resumed", dlock.Resume(l.Token()))
	if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("durable resume with appendonly off = %v, want ErrNotDurable, ErrNotAcquired and ErrInvalid", err)
	} else if msg := err.Error(); !strings.Contains(msg, "append-only file is off") || !strings.HasSuffix(msg, " (undone)") || strings.Contains(msg, "ERR") || prefixes(msg) != 1 {
		t.Errorf("durable resume with appendonly off = %q, want the refusal in dlock's words, undone", msg)
	}
	other := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))
	var again *dlock.Lock
	if !waitFor(5*time.Second, func() bool { again, err = other.TryAcquire(ctx, "resumed"); return err == nil }) {
		t.Fatalf("TryAcquire after a refused durable resume = %v, want the lock free", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}
