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

// The same for a lease of every other kind, and without scripts: each
// extension's refusal of WAITAOF reads as not durable, is no refusal to
// acquire, and leaves its lease held.
func TestDurableExtensionOfEveryKindWithTheAppendOnlyFileTurnedOffFailsAsNotDurable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "always")
	client := func(opts ...dlock.Option) *dlock.Client {
		return newClient(t, rdb, append(opts, dlock.WithDurableGrants(time.Second), dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))...)
	}
	c := client()
	sem, err := c.Semaphore("permits", 2)
	if err != nil {
		t.Fatal(err)
	}
	reads, err := c.RWMutex("reads")
	if err != nil {
		t.Fatal(err)
	}
	writes, err := c.RWMutex("writes")
	if err != nil {
		t.Fatal(err)
	}
	election, err := c.Election("leader")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name string
		take func() (*dlock.Lock, error)
	}{
		{"an unfair lock", func() (*dlock.Lock, error) { return client(dlock.WithUnfair(nil)).TryAcquire(ctx, "unfair") }},
		{"a reentrant lock", func() (*dlock.Lock, error) {
			return asOwner(t, client(dlock.WithReentrant(true)), "owner").TryAcquire(ctx, "reentrant")
		}},
		{"a lock without scripts", func() (*dlock.Lock, error) { return client(dlock.WithoutScripts()).TryAcquire(ctx, "noscripts") }},
		{"a permit", func() (*dlock.Lock, error) { return sem.TryAcquire(ctx) }},
		{"a read", func() (*dlock.Lock, error) { return reads.Reader().TryAcquire(ctx) }},
		{"a write", func() (*dlock.Lock, error) { return writes.Writer().TryAcquire(ctx) }},
		{"a leadership", func() (*dlock.Lock, error) {
			ld, err := election.Campaign(ctx, "v")
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		}},
	}
	locks := make([]*dlock.Lock, len(kinds))
	for i, k := range kinds {
		if locks[i], err = k.take(); err != nil {
			t.Fatalf("durable TryAcquire of %s = %v", k.name, err)
		}
	}
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendonly", "no"); err != nil {
		t.Fatal(err)
	}
	for i, k := range kinds {
		err := locks[i].Extend(ctx, time.Minute)
		if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrInvalid) || errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("Extend of %s with appendonly off = %v, want ErrNotDurable and ErrInvalid, neither ErrNotHeld nor ErrNotAcquired", k.name, err)
		} else if msg := err.Error(); !strings.Contains(msg, "append-only file is off") || strings.Contains(msg, "ERR") || prefixes(msg) != 1 {
			t.Errorf("Extend of %s with appendonly off = %q, want the refusal in dlock's words", k.name, msg)
		}
		if err := locks[i].Err(); err != nil {
			t.Errorf("Err() of %s = %v, want nil", k.name, err)
		}
		if err := locks[i].Release(ctx); err != nil {
			t.Errorf("Release of %s = %v", k.name, err)
		}
	}
}

// The watchdog's extension meets the same refusal: the extension it
// reports (an End event, Auto) and the jeopardy it tells are not durable,
// in dlock's words, and no refusal to acquire; the lease stays held until
// its validity runs out.
func TestDurableWatchdogExtensionWithTheAppendOnlyFileTurnedOffIsToldAsNotDurable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "always")
	ends, risks := make(chan error, 64), make(chan error, 64)
	c := newClient(t, rdb, dlock.WithDurableGrants(time.Second), dlock.LeaseTTL(3*time.Second),
		dlock.WithObserver(dlock.Observer{
			End: func(_ context.Context, e *dlock.Event) {
				if e.Op == dlock.OpExtend && e.Auto && e.Err != nil {
					select {
					case ends <- e.Err:
					default:
					}
				}
			},
			Jeopardy: func(_ context.Context, e *dlock.Event) {
				select {
				case risks <- e.Err:
				default:
				}
			},
		}))
	l, err := c.TryAcquire(ctx, "watched")
	if err != nil {
		t.Fatalf("durable TryAcquire = %v", err)
	}
	defer l.Release(ctx)
	if _, err := s.Do(ctx, "CONFIG", "SET", "appendonly", "no"); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]chan error{"the watchdog's extension": ends, "the jeopardy": risks} {
		select {
		case err := <-ch:
			if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrInvalid) || errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s with appendonly off = %v, want ErrNotDurable and ErrInvalid, neither ErrNotAcquired nor ErrNotHeld", what, err)
			} else if msg := err.Error(); !strings.Contains(msg, "append-only file is off") || strings.Contains(msg, "ERR") || prefixes(msg) != 1 {
				t.Errorf("%s with appendonly off = %q, want the refusal in dlock's words", what, msg)
			}
		case <-ctx.Done():
			t.Fatalf("%s: none told", what)
		}
	}
	if err := l.Err(); err != nil && time.Now().Before(l.ValidUntil()) {
		t.Errorf("Err() = %v while valid, want nil", err)
	}
}
