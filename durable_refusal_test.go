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
