package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A lease of each kind names its holder the same way everywhere: its Token
// is what Inspect shows and what Resume takes back, its extensions, fence
// and release are its own, and another's refused attempt says who holds it,
// in words and in a NotAcquiredError.

// heldKind takes, through c, a lease of one kind on name with the holder
// metadata "m1", and tries, through other, to take another.
type heldKind struct {
	kind      string
	resumable bool
	take      func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock
	// try makes an attempt that waits at most wait (MaxWait).
	try     func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error
	refusal string // how the refused attempt's error ends: its cause's text
	holder  bool   // its NotAcquiredError names the holder (Holder, Meta: a leader's is its proclaimed value)
}

func heldKinds() []heldKind {
	meta := dlock.HolderMeta("m1")
	lockTry := func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error {
		_, err := c.Acquire(ctx, name, dlock.HolderMeta("m2"), wait)
		return err
	}
	lockTake := func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
		return taken(t)(c.TryAcquire(ctx, name, meta))
	}
	rwTake := func(write, downgrade bool) func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
		return func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
			rw := newRW(t, c, name)
			side := rw.Reader()
			if write {
				side = rw.Writer()
			}
			l, err := side.TryAcquire(ctx, meta)
			if err != nil {
				t.Fatal(err)
			}
			if downgrade {
				if err := rw.Downgrade(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			return l
		}
	}
	rwTry := func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error {
		_, err := newRW(t, c, name).Writer().Acquire(ctx, wait)
		return err
	}
	return []heldKind{
		{kind: "plain", resumable: true, take: lockTake, try: lockTry,
			refusal: `held by another holder, "m1"`, holder: true},
		{kind: "fair", resumable: true, take: lockTake, try: lockTry,
			refusal: `held by another holder, "m1"`, holder: true},
		{kind: "reentrant", take: func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
			return lockTake(t, ctx, asOwner(t, c, "alice"), name)
		}, try: func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error {
			return lockTry(t, ctx, asOwner(t, c, "bob"), name, wait)
		}, refusal: `held by another owner, "m1"`, holder: true},
		{kind: "permit", resumable: true, take: func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
			return taken(t)(newSemaphore(t, c, name, 1).TryAcquire(ctx, meta))
		}, try: func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error {
			_, err := newSemaphore(t, c, name, 1).Acquire(ctx, wait)
			return err
		}, refusal: "no permit free: all held, or others waiting ahead"},
		{kind: "permits2", resumable: true, take: func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
			s := newSemaphore(t, c, name, 3)
			return taken(t)(s.AcquireN(ctx, 2, meta, dlock.MaxWait(0)))
		}, try: func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error {
			_, err := newSemaphore(t, c, name, 3).AcquireN(ctx, 2, wait)
			return err
		}, refusal: "no permit free: all held, or others waiting ahead"},
		{kind: "read", resumable: true, take: rwTake(false, false), try: rwTry,
			refusal: "the lock is held (by readers or a writer), or others wait ahead"},
		{kind: "write", resumable: true, take: rwTake(true, false), try: rwTry,
			refusal: "the lock is held (by readers or a writer), or others wait ahead"},
		{kind: "downgraded", resumable: true, take: rwTake(true, true), try: rwTry,
			refusal: "the lock is held (by readers or a writer), or others wait ahead"},
		{kind: "election", resumable: true, take: func(t *testing.T, ctx context.Context, c *dlock.Client, name string) *dlock.Lock {
			ld, err := newElection(t, c, name).Campaign(ctx, "v0", dlock.MaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			if err := ld.Proclaim(ctx, "m1"); err != nil {
				t.Fatal(err)
			}
			return ld.Lock()
		}, try: func(t *testing.T, ctx context.Context, c *dlock.Client, name string, wait dlock.LeaseOption) error {
			_, err := newElection(t, c, name).Campaign(ctx, "other", wait)
			return err
		}, refusal: `led by another candidate, "m1"`, holder: true},
	}
}

// clientFor starts a server and returns what makes Clients of kind's mode
// on it.
func clientFor(t *testing.T, kind string, opts ...dlock.Option) func() *dlock.Client {
	_, rdb := setup(t)
	switch kind {
	case "plain":
		opts = append(opts, dlock.WithUnfair(nil))
	case "reentrant":
		opts = append(opts, dlock.WithReentrant(true))
	}
	return func() *dlock.Client { return newClient(t, rdb, opts...) }
}

func TestEveryKindNamesItsHolderAlikeInTokenRefusalAndLease(t *testing.T) {
	t.Parallel()
	for _, k := range heldKinds() {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			namesItsHolder(t, k, clientFor(t, k.kind))
		})
	}
}

// A plain lock names its holder alike without scripts and over a quorum.
func TestPlainLockNamesItsHolderAlikeWithoutScriptsAndOverQuorum(t *testing.T) {
	t.Parallel()
	plain := heldKinds()[0]
	t.Run("noscripts", func(t *testing.T) {
		t.Parallel()
		_, rdb := setup(t)
		namesItsHolder(t, plain, func() *dlock.Client { return newClient(t, rdb, dlock.WithoutScripts()) })
	})
	t.Run("quorum", func(t *testing.T) {
		t.Parallel()
		_, nodes := startQuorum(t, 3)
		namesItsHolder(t, plain, func() *dlock.Client { return newRedlock(t, nodes, time.Second) })
	})
}

// namesItsHolder takes a lease of k's kind through a Client that mk makes,
// and checks how it names its holder (see above).
func namesItsHolder(t *testing.T, k heldKind, mk func() *dlock.Client) {
	ctx := t.Context()
	c, other := mk(), mk()
	name := "held-" + k.kind
	l := k.take(t, ctx, c, name)

	// One attempt, then a wait that ends: each says who holds the lock.
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		err := k.try(t, ctx, other, name, dlock.MaxWait(wait))
		if !errors.Is(err, dlock.ErrNotAcquired) || !strings.HasSuffix(err.Error(), ": "+k.refusal) {
			t.Fatalf("attempt waiting %v = %v, want one ending %q", wait, err, k.refusal)
		}
		var na *dlock.NotAcquiredError
		if !errors.As(err, &na) {
			t.Fatalf("attempt waiting %v = %v, want a NotAcquiredError", wait, err)
		}
		if k.holder && (na.Holder != l.Token() || na.Meta != "m1" || na.TTL <= 0) {
			t.Fatalf("attempt waiting %v: NotAcquiredError = %+v, want Holder %q, Meta m1, a TTL", wait, na, l.Token())
		}
	}

	info, err := other.Inspect(ctx, name)
	if err != nil || !strings.Contains(info.Meta, "m1") || info.InDelay {
		t.Fatalf("Inspect = %+v, %v; want m1 shown, not in lock-delay", info, err)
	}
	if k.kind == "reentrant" {
		if len(info.Owners) != 1 || info.Owners[0].ID != l.Token() {
			t.Fatalf("Inspect owners = %+v, want the one named %q", info.Owners, l.Token())
		}
	}

	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if f, err := l.Fence(ctx); err != nil || f <= 0 {
		t.Fatalf("Fence = %d, %v", f, err)
	}
	if k.resumable {
		r, err := resumeAs(t, ctx, mk(), k.kind, name, l.Token())
		if err != nil || r.Token() != l.Token() {
			t.Fatalf("Resume(%q) = %v, want the same token", l.Token(), err)
		}
		if err := r.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("resumed Extend = %v", err)
		}
		if f, err := r.Fence(ctx); err != nil || f <= 0 {
			t.Fatalf("resumed Fence = %d, %v", f, err)
		}
		l = r
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if info, err := other.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("Inspect after Release = %+v, %v; want free", info, err)
	}
}

// resumeAs resumes the lease token of kind on name through c.
func resumeAs(t *testing.T, ctx context.Context, c *dlock.Client, kind, name, token string) (*dlock.Lock, error) {
	opt := dlock.Resume(token)
	switch kind {
	case "permit":
		return newSemaphore(t, c, name, 1).Acquire(ctx, opt)
	case "permits2":
		return newSemaphore(t, c, name, 3).AcquireN(ctx, 2, opt)
	case "read", "downgraded":
		return newRW(t, c, name).Reader().Acquire(ctx, opt)
	case "write":
		return newRW(t, c, name).Writer().Acquire(ctx, opt)
	case "election":
		ld, err := newElection(t, c, name).Campaign(ctx, "v0", opt)
		if err != nil {
			return nil, err
		}
		return ld.Lock(), nil
	}
	return c.Acquire(ctx, name, opt)
}

// Inspect's lock-delay reads the longest lease left among all the holds,
// whichever kind keeps them: a short hold beside a long one is not in it.
func TestInspectInDelayReadsTheLongestHoldOfEveryKind(t *testing.T) {
	t.Parallel()
	short, long := dlock.LeaseTTL(2*time.Second), dlock.LeaseTTL(time.Minute)
	cases := []struct {
		kind string
		take func(t *testing.T, ctx context.Context, c *dlock.Client, ttl dlock.LeaseOption) *dlock.Lock
	}{
		{"reentrant", func(t *testing.T, ctx context.Context, c *dlock.Client, ttl dlock.LeaseOption) *dlock.Lock {
			return taken(t)(asOwner(t, c, "alice").TryAcquire(ctx, "delay", ttl))
		}},
		{"permit", func(t *testing.T, ctx context.Context, c *dlock.Client, ttl dlock.LeaseOption) *dlock.Lock {
			return taken(t)(newSemaphore(t, c, "delay", 3).TryAcquire(ctx, ttl))
		}},
		{"read", func(t *testing.T, ctx context.Context, c *dlock.Client, ttl dlock.LeaseOption) *dlock.Lock {
			return taken(t)(newRW(t, c, "delay").Reader().TryAcquire(ctx, ttl))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			_, rdb := setup(t)
			var opts []dlock.Option
			if tc.kind == "reentrant" {
				opts = append(opts, dlock.WithReentrant(true))
			}
			c := newClient(t, rdb, append(opts, dlock.WithAutoExtend(false))...)
			tc.take(t, ctx, c, short)
			tc.take(t, ctx, c, long)
			for _, delay := range []time.Duration{30 * time.Second, 2 * time.Minute} {
				info, err := newClient(t, rdb, append(opts, dlock.LockDelay(delay))...).Inspect(ctx, "delay")
				if want := delay > time.Minute; err != nil || !info.Held || info.InDelay != want {
					t.Fatalf("Inspect with LockDelay(%v) = %+v, %v; want InDelay %v", delay, info, err, want)
				}
			}
		})
	}
}

// taken returns a function that returns the Lock an acquisition returned,
// failing t if it returned an error.
func taken(t *testing.T) func(*dlock.Lock, error) *dlock.Lock {
	return func(l *dlock.Lock, err error) *dlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// A lease's Token is read, not made: naming the holder of a lease of any
// kind allocates nothing (a reentrant lock's is its owner's id as it is).
// (Serial: AllocsPerRun counts the whole program's allocations.)
func TestTokenOfEveryKindAllocatesNothing(t *testing.T) {
	for _, k := range heldKinds() {
		t.Run(k.kind, func(t *testing.T) {
			l := k.take(t, t.Context(), clientFor(t, k.kind)(), "token-allocs")
			if n := testing.AllocsPerRun(100, func() { _ = l.Token() }); n != 0 {
				t.Errorf("Token() of a %s lease: %v allocations, want none", k.kind, n)
			}
		})
	}
}
