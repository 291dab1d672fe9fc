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
	t.Parallel()
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
	t.Parallel()
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

			// A superseded Lock's first call its Release: it leaves the lease to the resumer.
			a, err = mode.old.Acquire(ctx, name+"-rel", dlock.LeaseTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			b, err = mode.next.Acquire(ctx, name+"-rel", dlock.Resume(a.Token()), dlock.LeaseTTL(10*time.Second))
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			defer b.Release(ctx)
			if err := a.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("the superseded Lock's Release = %v, want ErrNotHeld", err)
			}
			if err := b.Extend(ctx, 10*time.Second); err != nil {
				t.Errorf("the resumer's Extend after the superseded Lock's Release: %v", err)
			}
		})
	}
}

// Every call of a Lock whose lease another Lock resumed, made before it
// learned of it, fails with ErrNotHeld and ends the Lock as lost; its
// Release then sends nothing, and the resumer's Lock goes on.
func TestSupersededHolderCallsRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	supersededCallsRefused(t, rdb, func(k resumable) resumable { return k })
}

// supersededCallsRefused checks with supersededCall every call of every
// kind wrap(k) returns.
func supersededCallsRefused(t *testing.T, rdb redis.UniversalClient, wrap func(resumable) resumable) {
	calls := map[string]supersededDo{
		"fence":  func(ctx context.Context, _ *dlock.Client, l *dlock.Lock) error { _, err := l.Fence(ctx); return err },
		"ttl":    func(ctx context.Context, _ *dlock.Client, l *dlock.Lock) error { _, err := l.TTL(ctx); return err },
		"extend": func(ctx context.Context, _ *dlock.Client, l *dlock.Lock) error { return l.Extend(ctx, 10*time.Second) },
		// (its Lock then reports ErrReleased, as after any Release)
		"release": func(ctx context.Context, _ *dlock.Client, l *dlock.Lock) error { return l.Release(ctx) },
	}
	for _, k := range resumables() {
		for call, do := range calls {
			if k.name == "leadership" && call == "fence" {
				continue // (a term's fence comes with the grant: TestSupersededHolderGetsNoFence)
			}
			t.Run(k.name+"/"+call, func(t *testing.T) {
				supersededCall(t, rdb, wrap(k), do)
			})
		}
	}
	rw := wrap(resumables()[5])
	t.Run("write/downgrade", func(t *testing.T) {
		supersededCall(t, rdb, rw, func(ctx context.Context, c *dlock.Client, l *dlock.Lock) error {
			m, err := c.RWMutex(l.Name())
			if err != nil {
				return err
			}
			return m.Downgrade(ctx, l)
		})
	})
}

// supersededDo is a call of the Lock l that the Client c took.
type supersededDo func(ctx context.Context, c *dlock.Client, l *dlock.Lock) error

// supersededCall takes a hold of kind k, resumes it on another Client,
// and checks that the first Lock's call do is refused and ends it, and
// that the resumed Lock goes on.
func supersededCall(t *testing.T, rdb redis.UniversalClient, k resumable, do supersededDo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	name := "sup-call-" + t.Name()
	opts := append([]dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}, k.opts...)
	old := newClient(t, rdb, opts...)
	a, err := k.take(ctx, old, name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.take(ctx, newClient(t, rdb, opts...), name, dlock.Resume(a.Token()))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := do(ctx, old, a); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded Lock's call = %v, want ErrNotHeld", err)
	}
	released := errors.Is(a.Err(), dlock.ErrReleased) // (the call was its Release)
	if !released && !errors.Is(a.Err(), dlock.ErrNotHeld) || !closedWithin(a.Done(), 5*time.Second) {
		t.Errorf("the superseded Lock after its call: Err %v; want the loss, and Done closed", a.Err())
	}
	if err := a.Release(ctx); !released && !errors.Is(err, dlock.ErrNotHeld) || released && err != nil {
		t.Errorf("the superseded Lock's (next) Release = %v, want ErrNotHeld, or nil after a Release", err)
	}
	if _, err := b.TTL(ctx); err != nil {
		t.Errorf("the resumer's TTL after the superseded Lock's calls: %v", err)
	}
	if _, err := b.Fence(ctx); err != nil {
		t.Errorf("the resumer's Fence: %v", err)
	}
	if err := b.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("the resumer's Extend: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("the resumer's Release: %v", err)
	}
}

// A leader whose lease another process resumed cannot proclaim a value:
// ErrNotHeld, the Leadership ends, and the resumed one's value stands.
func TestSupersededLeaderProclaimRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	e, _ := newClient(t, rdb, opts...).Election("sup-proclaim")
	e2, _ := newClient(t, rdb, opts...).Election("sup-proclaim")
	a, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e2.Campaign(ctx, "v", dlock.Resume(a.Lock().Token()))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer b.Resign(ctx)
	if err := b.Proclaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.Proclaim(ctx, "a"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded leader's Proclaim = %v, want ErrNotHeld", err)
	}
	if !errors.Is(a.Err(), dlock.ErrNotHeld) || !closedWithin(a.Done(), 5*time.Second) {
		t.Errorf("the superseded leader after Proclaim: Err %v; want the loss, and Done closed", a.Err())
	}
	if l, err := e2.Leader(ctx); err != nil || l.Value != "b" || l.Fence != b.Fence() {
		t.Errorf("Leader = %+v, %v; want the resumed leader's value b and fence %d", l, err, b.Fence())
	}
}

// A Fence whose reply is lost, asked for again: a copy that ran before
// another Lock resumed the lease gave the first Lock a fence below the
// resumer's, and the call asked again after the resume is refused; the
// resumer's Fence asked again after a lost reply is a fence above every
// earlier one, and its writes carry it.
func TestSupersededHolderFenceAskedAgainAfterResume(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p, rdb, direct := proxied(t, 0, 2*time.Second)
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	old, next := newClient(t, rdb, opts...), newClient(t, direct, opts...)
	g := dlock.NewGuard(direct)
	a, err := old.Acquire(ctx, "fence-again")
	if err != nil {
		t.Fatal(err)
	}
	var b *dlock.Lock
	err = stallThenCut(t, p, func() error { _, err := a.Fence(ctx); return err }, func() bool {
		if direct.Exists(ctx, a.Key()+":fence").Val() == 0 {
			return false
		}
		if b == nil { // the first copy ran: the lease is resumed before its reply is lost
			if b, err = next.Acquire(ctx, "fence-again", dlock.Resume(a.Token())); err != nil {
				t.Fatalf("resume: %v", err)
			}
		}
		return true
	})
	if err == nil {
		t.Fatal("the Fence whose reply was cut off succeeded")
	}
	defer b.Release(ctx)
	if f, err := a.Fence(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded Lock's Fence asked again after the resume = %d, %v; want ErrNotHeld", f, err)
	}
	if err := g.Write(ctx, "fence-again-res", "b", fenceOf(t, b), b.Token()); err != nil {
		t.Errorf("the resumer's fenced write: %v", err)
	}

	x, err := next.Acquire(ctx, "fence-again-2")
	if err != nil {
		t.Fatal(err)
	}
	r, err := old.Acquire(ctx, "fence-again-2", dlock.Resume(x.Token()))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer r.Release(ctx)
	err = stallThenCut(t, p, func() error { _, err := r.Fence(ctx); return err },
		func() bool { return direct.Exists(ctx, x.Key()+":fence").Val() == 1 })
	if err == nil {
		t.Fatal("the resumer's Fence whose reply was cut off succeeded")
	}
	f, err := r.Fence(ctx)
	if err != nil {
		t.Fatalf("the resumer's Fence asked again: %v", err)
	}
	if got, err := x.Fence(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded Lock's Fence = %d, %v; want ErrNotHeld", got, err)
	}
	if err := g.Write(ctx, "fence-again-res-2", "r", f, r.Token()); err != nil {
		t.Errorf("the resumer's fenced write: %v", err)
	}
}
