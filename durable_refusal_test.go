package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A refused durable grant (the server's append-only file is off) of any
// kind leaves the lock free: another holder takes it at once, not after
// the refused lease's TTL; and its error says why in dlock's words.
func TestRefusedDurableGrantOfEveryKindLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	for _, k := range []struct {
		kind string
		opts []dlock.Option
		take func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error)
	}{
		{"plain", nil, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			return c.TryAcquire(ctx, "refused")
		}},
		{"reentrant", []dlock.Option{dlock.WithReentrant(true)}, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			return asOwner(t, c, who).TryAcquire(ctx, "refused")
		}},
		{"semaphore", nil, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			return newSemaphore(t, c, "refused", 1).TryAcquire(ctx)
		}},
		{"read-write", nil, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			return newRW(t, c, "refused").Writer().TryAcquire(ctx)
		}},
		{"unfair", []dlock.Option{dlock.WithUnfair(nil)}, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			return c.TryAcquire(ctx, "refused")
		}},
		{"read", nil, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			return newRW(t, c, "refused").Reader().TryAcquire(ctx)
		}},
		{"election", nil, func(ctx context.Context, c *dlock.Client, who string) (*dlock.Lock, error) {
			e, err := c.Election("refused")
			if err != nil {
				return nil, err
			}
			ld, err := e.Campaign(ctx, who)
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		}},
	} {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			leakcheck.Check(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s := redistest.Start(t, redistest.Valkey(t)) // (appendonly no)
			rdb := s.Client(t)
			opts := append(k.opts, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
			c := newClient(t, rdb, append(opts, dlock.WithDurableGrants(time.Second))...)
			other := newClient(t, rdb, opts...)
			_, err := k.take(ctx, c, "first")
			if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("durable TryAcquire = %v, want ErrNotDurable and ErrNotAcquired", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "appendonly no") || strings.Contains(msg, "ERR") {
				t.Errorf("durable TryAcquire = %q, want a text saying appendonly no, without Redis's reply", msg)
			}
			var l *dlock.Lock
			if !waitFor(5*time.Second, func() bool {
				l, err = k.take(ctx, other, "second")
				return err == nil
			}) {
				t.Fatalf("TryAcquire after a refused durable grant = %v, want the lock free", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}

// A waiter whose turn comes once the append-only file is off (its retry
// after the holder's release, or the fair queue's handover) meets the
// refusal of WAITAOF: its Acquire ends at once, not durable and not
// acquired, in dlock's words, and leaves the lock free.
func TestRefusedDurableGrantOfAWaitersTurnFailsTheWaitAndLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	for _, k := range []struct {
		kind string
		opts []dlock.Option
		take func(ctx context.Context, c *dlock.Client, wait bool) (*dlock.Lock, error)
	}{
		{"fair", nil, nil},
		{"unfair", []dlock.Option{dlock.WithUnfair(nil)}, nil},
		{"without scripts", []dlock.Option{dlock.WithoutScripts()}, nil},
		{"semaphore", nil, func(ctx context.Context, c *dlock.Client, wait bool) (*dlock.Lock, error) {
			if s := newSemaphore(t, c, "turn", 1); wait {
				return s.Acquire(ctx)
			}
			return newSemaphore(t, c, "turn", 1).TryAcquire(ctx)
		}},
	} {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			take := k.take
			if take == nil {
				take = func(ctx context.Context, c *dlock.Client, wait bool) (*dlock.Lock, error) {
					if wait {
						return c.Acquire(ctx, "turn")
					}
					return c.TryAcquire(ctx, "turn")
				}
			}
			s, rdb := durableServer(t, "always")
			waiting := make(chan struct{}, 1)
			opts := append(k.opts, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
			holder := newClient(t, rdb, opts...)
			c := newClient(t, rdb, append(opts, dlock.WithDurableGrants(time.Second), dlock.WithObserver(dlock.Observer{
				Waiting: func(_ context.Context, _ string, delta int) {
					if delta > 0 {
						waiting <- struct{}{}
					}
				},
			}))...)
			held, err := take(ctx, holder, false)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *dlock.Lock
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := take(ctx, c, true)
				done <- result{l, err}
			}()
			select {
			case <-waiting:
			case <-ctx.Done():
				t.Fatal("the durable Acquire never waited")
			}
			if _, err := s.Do(ctx, "CONFIG", "SET", "appendonly", "no"); err != nil {
				t.Fatal(err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("Release = %v", err)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the durable Acquire still waiting 30s after the release")
			}
			if r.err == nil {
				r.l.Release(ctx)
				t.Fatal("the durable Acquire succeeded with appendonly off")
			}
			if !errors.Is(r.err, dlock.ErrNotDurable) || !errors.Is(r.err, dlock.ErrNotAcquired) || errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("the durable Acquire = %v, want ErrNotDurable and ErrNotAcquired", r.err)
			} else if msg := r.err.Error(); !strings.Contains(msg, "appendonly no") || strings.Contains(msg, "ERR") || prefixes(msg) != 1 {
				t.Errorf("the durable Acquire = %q, want the refusal in dlock's words", msg)
			}
			var l *dlock.Lock
			if !waitFor(5*time.Second, func() bool { l, err = take(ctx, holder, false); return err == nil }) {
				t.Fatalf("TryAcquire after the refused turn = %v, want the lock free", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}
