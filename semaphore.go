package dlock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// Semaphore is a counting semaphore (docs/semaphore.md): at most N permits held
// at once, each a *Lock, in arrival order; safe for concurrent use.
type Semaphore struct {
	c    *Client // the Client that made it
	k    kind    // its acquisitions: permits, asked with N = k.permits
	name string
	keys backend.Keys
}

// semaphoreMode is the slot of every semaphore's permits, whatever their N.
var semaphoreMode = newMode("semaphore")

// Semaphore returns the semaphore name of N = permits, or 0: the size kept in
// Redis, without which its calls fail. [ErrInvalid]: a bad name or N.
func (c *Client) Semaphore(name string, permits int) (*Semaphore, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if permits < 0 || permits > math.MaxInt32 {
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): permits must be 0 (the size kept in Redis) to %d", ErrInvalid, name, permits, math.MaxInt32)
	}
	// Its permits are a kind of their own, asked with N = permits: they
	// queue, whatever WithUnfair says.
	// Its refusal names no count: a size kept in Redis, not N, bounds the
	// holders (N is the error's Permits).
	k := kind{slot: semaphoreMode, lease: backend.Permits(permits, 1), waits: queues{}, acquireOp: "acquire", releaseOp: "release", holders: tokens{},
		why: "no permit free: all held, or others waiting ahead", permits: permits}
	if err := c.carries(&k, fmt.Sprintf("Semaphore(%q, %d)", name, permits), words{plural: "semaphores", one: "a semaphore", verb: "keep"}); err != nil {
		return nil, err
	}
	return &Semaphore{c: c, k: k, name: name, keys: backend.KeysFor(c.opts.prefix, name)}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the N it was made with.
func (s *Semaphore) Permits() int { return s.k.permits }

// TrySetPermits keeps N = n (1 ≤ n ≤ math.MaxInt32) in Redis for every caller,
// unless a size is kept already (false).
func (s *Semaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if n < 1 || n > math.MaxInt32 {
		return false, fmt.Errorf("%w: TrySetPermits(%d) of %q: need 1 to %d", ErrInvalid, n, s.name, math.MaxInt32)
	}
	ps, err := s.size(ctx, "set permits", "set", n)
	return ps.Changed, err
}

// UnsetPermits deletes the size kept in Redis (false if none): each caller's N
// counts again, and waiters with N = 0 fail with [ErrInvalid].
func (s *Semaphore) UnsetPermits(ctx context.Context) (bool, error) {
	ps, err := s.size(ctx, "unset permits", "unset", 0)
	return ps.Changed, err
}

// AddPermits adds delta (< 0: takes away) to the size kept in Redis, else to N,
// and returns it; holds above it stay. [ErrInvalid]: a result < 1.
func (s *Semaphore) AddPermits(ctx context.Context, delta int) (int, error) {
	if delta < -math.MaxInt32 || delta > math.MaxInt32 {
		return 0, fmt.Errorf("%w: AddPermits(%d) of %q: out of range", ErrInvalid, delta, s.name)
	}
	ps, err := s.size(ctx, "add permits", "add", delta)
	return ps.Size, err
}

// Available returns the size less the permits held (< 0 while holds above a
// shrunk size last); [ErrInvalid]: N = 0 and no size kept.
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	ps, err := s.size(ctx, "available", "get", 0)
	if err == nil && ps.Size == 0 {
		return 0, opError("available", s.name, backend.Because(ErrInvalid, "no size is kept in Redis for this semaphore of 0 permits"))
	}
	return ps.Size - ps.Held, err
}

// TryAcquire takes a permit only if fewer than N are held and none waits.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.c.acquireAs(ctx, &s.k, s.name, opts, true)
}

// Acquire takes a permit as [Client.Acquire] does.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.c.acquireAs(ctx, &s.k, s.name, opts, false)
}

// MaxAcquireN is the most permits AcquireN takes (see docs/semaphore.md).
const MaxAcquireN = 10_000

// AcquireN takes n permits as one *Lock (1 ≤ n ≤ [MaxAcquireN], and the size
// kept, else N), in arrival order: later callers never pass it.
func (s *Semaphore) AcquireN(ctx context.Context, n int, opts ...LockOption) (*Lock, error) {
	if n < 1 || n > MaxAcquireN { // (Redis refuses more than the size: the kept one, which may exceed N)
		return nil, fmt.Errorf("%w: AcquireN(%d) on semaphore %q: need 1 to MaxAcquireN (%d) permits at once", ErrInvalid, n, s.name, MaxAcquireN)
	}
	k := s.k
	k.lease = backend.Permits(s.k.permits, n)
	return s.c.acquireAs(ctx, &k, s.name, opts, false)
}

// Do takes a permit, runs fn and releases it, as [Client.Do] does.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return s.c.do(ctx, &s.k, s.name, fn, opts, false)
}

// TryDo runs fn under a permit only if one is free now, else [ErrNotAcquired].
func (s *Semaphore) TryDo(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return s.c.do(ctx, &s.k, s.name, fn, opts, true)
}

// size runs op on the size kept in Redis (see backend.Node.Permits) under
// a request id of its own; its error names the operation what.
func (s *Semaphore) size(ctx context.Context, what, op string, v int) (backend.PermitSize, error) {
	id := newToken()
	ps, err := backend.OpValue[backend.PermitSize](ctx, s.c.b, func(ctx context.Context, n backend.Node) (any, error) {
		return n.Permits(ctx, &s.keys, op, id, v, s.k.permits)
	})
	if err != nil {
		err = opError(what, s.name, err)
	}
	return ps, err
}

// Permit is one live permit of a semaphore.
type Permit struct {
	Token string        // the permit's token: its Lock's Token
	TTL   time.Duration // its remaining lease
	Meta  string        // its holder metadata (HolderMeta), read from Token; "" if none
	Count int           // the permits it holds: 1, or n for AcquireN(n)
}

// A semaphore's live permits show in Info as its Permits.
var _ = part(func(info *Info, st backend.State) {
	for _, h := range st.Leases {
		if h.Kind == backend.Permit {
			info.Permits = append(info.Permits, Permit{Token: h.Token, TTL: h.Left, Meta: metaOf(h.Token), Count: h.N})
		}
	}
})

// Holders returns the live permits, soonest first; [ErrWrongType]: another
// kind.
func (s *Semaphore) Holders(ctx context.Context) ([]Permit, error) {
	info, err := s.c.Inspect(ctx, s.name)
	return holdsAs(s.name, info, err, info.Permits, info.RWHolds, "a semaphore", "a read-write lock")
}

// holdsAs returns hs, the live holds of the lock name (its Info, read with
// err) as what, a semaphore or a read-write lock (both sorted sets: a
// read-write lock's holds share a semaphore's key, as in the backend), for
// their Holders; ErrWrongType if the name is held as a lock of another
// Redis type, or as other, whose holds (others) it lists.
func holdsAs[H, O any](name string, info Info, err error, hs []H, others []O, what, other string) ([]H, error) {
	why := "a lock (a " + info.Type + ")"
	switch {
	case err != nil:
		return nil, err
	case others != nil:
		why = other
	case !info.Held || info.Type == "zset":
		return hs, nil
	}
	return nil, opError("inspect", name, backend.Because(ErrWrongType, "the name is held as "+why+", not "+what))
}
