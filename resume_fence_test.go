package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// resumable is a kind of hold that Resume takes over: how to take one on a
// Client, with the Client's options it needs.
type resumable struct {
	name string
	opts []dlock.Option
	take func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error)
}

func resumables() []resumable {
	plain := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
		return c.Acquire(ctx, name, opts...)
	}
	return []resumable{
		{"lock", nil, plain},
		{"fair lock", []dlock.Option{waiting(true)}, plain},
		{"permit", nil, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
			s, err := c.Semaphore(name, 3)
			if err != nil {
				return nil, err
			}
			return s.Acquire(ctx, opts...)
		}},
		{"permits at once", nil, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
			s, err := c.Semaphore(name, 3)
			if err != nil {
				return nil, err
			}
			return s.AcquireN(ctx, 2, opts...)
		}},
		{"read", nil, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
			rw, err := c.RWMutex(name)
			if err != nil {
				return nil, err
			}
			return rw.Reader().Acquire(ctx, opts...)
		}},
		{"write", nil, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
			rw, err := c.RWMutex(name)
			if err != nil {
				return nil, err
			}
			return rw.Writer().Acquire(ctx, opts...)
		}},
		{"leadership", nil, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
			e, err := c.Election(name)
			if err != nil {
				return nil, err
			}
			ld, err := e.Campaign(ctx, "v", opts...)
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		}},
	}
}

// A Lock whose lease another Lock resumed before it asked for a fence gets
// none (ErrNotHeld, and it reports the loss): otherwise its fence would be
// above the resumer's, a resource would take its late writes and refuse
// the resumer's. The resumer's fence and lease go on.
func TestSupersededHolderGetsNoFence(t *testing.T) {
	_, rdb := setup(t)
	g := dlock.NewGuard(rdb)
	for _, k := range resumables() {
		t.Run(k.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			name, res := "sup-fence-"+k.name, "res-"+k.name
			opts := append([]dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}, k.opts...)
			old, next := newClient(t, rdb, opts...), newClient(t, rdb, opts...)
			a, err := k.take(ctx, old, name)
			if err != nil {
				t.Fatal(err)
			}
			b, err := k.take(ctx, next, name, dlock.Resume(a.Token()))
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			defer b.Release(ctx)
			fb := fenceOf(t, b)
			if err := g.Write(ctx, res, "b1", fb, b.Token()); err != nil {
				t.Fatalf("the resumer's fenced write: %v", err)
			}
			if f, err := a.Fence(ctx); k.name != "leadership" && !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("the superseded Lock's Fence = %d, %v; want ErrNotHeld", f, err)
			}
			if f, err := a.Fence(ctx); err == nil {
				if err := g.Write(ctx, res, "a", f, a.Token()); !errors.Is(err, dlock.ErrStaleFence) {
					t.Errorf("the superseded Lock's late write with fence %d = %v, want ErrStaleFence", f, err)
				}
			} else if !errors.Is(a.Err(), dlock.ErrNotHeld) || !closedWithin(a.Done(), 5*time.Second) {
				t.Errorf("the superseded Lock after its refused Fence: Err %v, Done open; want the loss", a.Err())
			}
			if f := fenceOf(t, b); f != fb {
				t.Errorf("the resumer's fence changed from %d to %d", fb, f)
			}
			if err := g.Write(ctx, res, "b2", fb, b.Token()); err != nil {
				t.Errorf("the resumer's next fenced write: %v", err)
			}
			if err := b.Extend(ctx, 10*time.Second); err != nil || b.Err() != nil {
				t.Errorf("the resumer's Extend = %v (Err %v), want it held", err, b.Err())
			}
		})
	}
}

// The scenario over a quorum and without scripts: the superseded Lock's
// Fence is refused, the resumer's fenced writes stay accepted.
func TestSupersededHolderGetsNoFenceQuorumAndScriptFree(t *testing.T) {
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client(t))
	}
	g := dlock.NewGuard(nodes[0])
	for _, mode := range []struct {
		name      string
		old, next *dlock.Client
	}{
		{"quorum", newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false)), newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false))},
		{"script-free", newClient(t, nodes[1], dlock.WithoutScripts(), dlock.WithAutoExtend(false)), newClient(t, nodes[1], dlock.WithoutScripts(), dlock.WithAutoExtend(false))},
		{"script-free resumer of a scripted lease", newClient(t, nodes[2], dlock.WithAutoExtend(false)), newClient(t, nodes[2], dlock.WithoutScripts(), dlock.WithAutoExtend(false))},
		{"scripted resumer of a script-free lease", newClient(t, nodes[2], dlock.WithoutScripts(), dlock.WithAutoExtend(false)), newClient(t, nodes[2], dlock.WithAutoExtend(false))},
	} {
		t.Run(mode.name, func(t *testing.T) {
			name := "sup-fence-" + mode.name
			a, err := mode.old.Acquire(ctx, name, dlock.LeaseTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			b, err := mode.next.Acquire(ctx, name, dlock.Resume(a.Token()), dlock.LeaseTTL(10*time.Second))
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			defer b.Release(ctx)
			fb := fenceOf(t, b)
			if err := g.Write(ctx, name, "b1", fb, b.Token()); err != nil {
				t.Fatalf("the resumer's fenced write: %v", err)
			}
			if f, err := a.Fence(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("the superseded Lock's Fence = %d, %v; want ErrNotHeld", f, err)
			}
			if err := g.Write(ctx, name, "b2", fenceOf(t, b), b.Token()); err != nil {
				t.Errorf("the resumer's next fenced write: %v", err)
			}
		})
	}
}
