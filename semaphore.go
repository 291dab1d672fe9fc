package dlock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// Semaphore is a distributed counting semaphore: at most N holders of a
// name at once, across every process that uses it. Each holder holds a
// permit, and each permit is a lease of its own, returned as a *Lock with
// everything a lock's lease has: a random token, a TTL extended by the
// watchdog, Done and Err, Extend, Release and a fence. A holder that dies
// without releasing frees its permit when its TTL runs out, whether or not
// anyone else is running: Redis drops a permit at its deadline.
//
// Waiting is first come, first served, whatever WithFair says: waiters
// queue in Redis in arrival order, a release hands its permit straight to
// the first waiter and wakes only that one (over pub/sub; a waiter sleeps
// otherwise, waking only to renew its place in the queue), and TryAcquire
// does not take a free permit while others wait. A waiter that dies leaves
// the queue after max(TTL, 1s).
//
// # How many permits
//
// N travels with each request rather than being stored: a permit is
// granted only while fewer than the requester's own N permits are held, by
// anyone. Holders that all ask with the same N are never more than N.
// Callers that disagree (during a rollout that changes N) are never more
// than the largest N among them, and each grant respects its own
// requester's N. Raising N lets waiters in at once, as permits are next
// counted; lowering it takes no permit away: the holders above the new N
// keep theirs until they release them or they expire, and nobody is let in
// until fewer than the new N are held. A waiter at the head of the queue
// that may not have a permit yet (its N is lower than the number held)
// holds up the waiters behind it.
//
// # What it guarantees, and what it does not
//
// What the package documentation says of a lock holds for each permit: a
// permit counts towards N from its grant until Lock.ValidUntil, validity is
// counted from before the request, a request of a permit that lands late
// or twice (delayed in the network, re-sent by go-redis) takes nothing
// once the permit was given back or its attempt undone, and a holder
// paused past its TTL can act after its permit was given to someone else,
// so that more than N act at once. Fencing cannot rule that out as it does
// for a lock: several holders are meant to act at once, so a resource
// cannot refuse a fence for being lower than one it has seen. Lock.Fence
// still gives each permit a number strictly greater than every fence
// issued before for the name (to locks and permits alike), issued while the
// permit is held.
//
// A Semaphore is a small value bound to the Client that made it; it is
// safe for concurrent use. A name is either a semaphore or a lock: while
// permits are held, a lock of the same name fails with ErrWrongType, and
// while a lock is held, so does the semaphore.
type Semaphore struct {
	c       *Client // a variant of the Client that made it, whose acquisitions are permits
	name    string
	permits int
}

// Semaphore returns the semaphore name with permits permits (the N above),
// kept on c's Redis deployment under the same prefix, TTL, watchdog and
// hooks as c's locks. A semaphore is a sorted set at "dlock:{name}" (see
// the package documentation, Keys): one member per permit, its token,
// scored by its deadline.
//
// It returns an error wrapping ErrInvalid for a bad name, for permits
// below 1 or above math.MaxInt32, and for a Client that cannot keep a semaphore: a reentrant
// Client (WithReentrant: permits are not owned), a Client made
// WithoutScripts(), and a quorum (NewRedlock).
// Over a quorum a permit held on a majority of nodes would not bound the
// count: with 3 nodes and 2 permits, three holders can each hold a permit
// on a different pair of nodes while no node has more than 2.
func (c *Client) Semaphore(name string, permits int) (*Semaphore, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	switch {
	case permits < 1:
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): need at least 1 permit", ErrInvalid, name, permits)
	case permits > math.MaxInt32:
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): at most %d permits", ErrInvalid, name, permits, math.MaxInt32)
	case c.mode == "quorum":
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): semaphores are not available over a quorum (NewRedlock)", ErrInvalid, name, permits)
	case c.opts.reentrant:
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): a reentrant Client (WithReentrant) cannot keep a semaphore", ErrInvalid, name, permits)
	case c.opts.noScripts:
		return nil, fmt.Errorf("%w: Semaphore(%q, %d): semaphores need scripts; a Client made WithoutScripts() cannot keep one", ErrInvalid, name, permits)
	}
	v := *c
	v.opts.fair = true // a permit's waiters queue, whatever WithFair says
	v.permits = permits
	v.mode = "semaphore"
	return &Semaphore{c: &v, name: name, permits: permits}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the semaphore's N: how many permits may be held at once.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt to take a permit: it succeeds if fewer than
// N permits are held and nobody waits in the queue. Its errors are those
// of Client.TryAcquire: one wrapping ErrNotAcquired if no permit is free
// for it, whose cause is a *NotAcquiredError (with Permits set; see there
// what it holds for a semaphore), ErrWrongType if the name is held as a
// lock, and ErrInvalid for an invalid option. opts apply to the permit's
// lease as for Client.TryAcquire (LeaseTTL, HolderMeta, MaxHold; MaxWait
// only as MaxWait(0)).
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.c.TryAcquire(ctx, s.name, opts...)
}

// Acquire takes a permit, waiting in arrival order as long as ctx allows.
// It returns, and leaves behind, what Client.Acquire does: an error that
// matches both ErrNotAcquired and ctx.Err() if ctx ends first, with no
// permit, queue entry or subscription left. The returned Lock is the
// permit: release it with Lock.Release, which hands it to the first
// waiter.
//
// opts apply to the permit and its lease as for Client.Acquire: LeaseTTL
// (its lease time, also while it waits in the queue: a permit handed to it
// lasts that long), MaxWait (a wait that runs out returns an error wrapping
// ErrNotAcquired, and not the context's errors), HolderMeta (shown by
// Holders, Permit.Meta and `dlock inspect`) and MaxHold. An invalid one
// fails the call with an error wrapping ErrInvalid before anything is sent.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.c.Acquire(ctx, s.name, opts...)
}

// Do takes a permit (waiting as Acquire does, with opts as for Acquire),
// runs fn, and gives the permit back when fn returns or panics, as
// Client.Do does for a lock: fn's context is cancelled, with a cause
// wrapping ErrNotHeld, if the permit is lost while fn runs (with
// ErrMaxHold too when it reached its max hold).
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return s.c.Do(ctx, s.name, fn, opts...)
}

// Permit is one live permit of a semaphore, as Semaphore.Holders and
// Client.Inspect report it.
type Permit struct {
	Token string        // the permit's token: its Lock's Token
	TTL   time.Duration // its remaining lease
	Meta  string        // its holder metadata (WithHolderMeta, HolderMeta), read from Token; "" if none
}

// Holders returns the permits held now, the soonest to end first; for
// operators and metrics: the answer may be stale by the time it arrives.
// It returns ErrWrongType if the name is held as a lock.
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
