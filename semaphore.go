package dlock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// Semaphore is a distributed counting semaphore: at most N permits of a name
// held at once, each a [*Lock], granted in arrival order. NOT guaranteed: a
// holder paused past its TTL can act beside N others, and fences cannot prevent
// that. Safe for concurrent use. See docs/semaphore.md.
type Semaphore struct {
	c       *Client // the Client that made it
	k       kind    // its acquisitions: permits
	name    string
	permits int
}

// Semaphore returns the semaphore name with N = permits; [ErrInvalid] for a bad
// name, permits outside [1, math.MaxInt32], or a quorum, reentrant or
// script-free Client.
func (c *Client) Semaphore(name string, permits int) (*Semaphore, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	switch {
	case permits < 1:
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): need at least 1 permit", ErrInvalid, name, permits)
	case permits > math.MaxInt32:
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): at most %d permits", ErrInvalid, name, permits, math.MaxInt32)
	}
	// A permit's waiters queue, whatever WithUnfair says.
	k := kind{mode: modeSemaphore, fair: true, lease: backend.Permits(permits), role: semaphorePermits(permits)}
	if err := c.carries(&k, fmt.Sprintf("Semaphore(%q, %d)", name, permits)); err != nil {
		return nil, err
	}
	return &Semaphore{c: c, k: k, name: name, permits: permits}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns N.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt to take a permit, as [Client.TryAcquire] does:
// it succeeds if fewer than N are held and nobody waits.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.c.tryAcquireAs(ctx, &s.k, s.name, opts)
}

// Acquire takes a permit as [Client.Acquire] does.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.c.acquireAs(ctx, &s.k, s.name, opts)
}

// AcquireN takes n permits at once (1 ≤ n ≤ N) as one [*Lock], in arrival
// order: later callers never pass a waiter for n.
func (s *Semaphore) AcquireN(ctx context.Context, n int, opts ...LockOption) (*Lock, error) {
	if n < 1 || n > s.permits {
		return nil, fmt.Errorf("%w: AcquireN(%d) on semaphore %q of %d permits: need 1 to %d", ErrInvalid, n, s.name, s.permits, s.permits)
	}
	k := s.k
	if n > 1 {
		k.lease = backend.PermitsAtOnce(s.permits, n)
	}
	return s.c.acquireAs(ctx, &k, s.name, opts)
}

// Do takes a permit, runs fn and releases it, as [Client.Do] does.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	ferr, rerr := s.c.do(ctx, &s.k, s.name, fn, opts)
	return joinEnded(ferr, rerr)
}

// Permit is one live permit of a semaphore.
type Permit struct {
	Token string        // the permit's token: its Lock's Token
	TTL   time.Duration // its remaining lease
	Meta  string        // its holder metadata (HolderMeta), read from Token; "" if none
	Count int           // the permits it holds: 1, or n for AcquireN(n)
}

// Holders returns the live permits, the soonest to end first; [ErrWrongType] if
// the name is another kind.
func (s *Semaphore) Holders(ctx context.Context) ([]Permit, error) {
	info, err := s.c.Inspect(ctx, s.name)
	switch {
	case err != nil:
		return nil, err
	case info.RWHolds != nil:
		return nil, opError("inspect", s.name, backend.Because(ErrWrongType, "the name is held as a read-write lock, not a semaphore"))
	case info.Held && info.Type != "zset":
		return nil, opError("inspect", s.name, backend.Because(ErrWrongType, fmt.Sprintf("the name is held as a lock (a %s), not a semaphore", info.Type)))
	}
	return info.Permits, nil
}
