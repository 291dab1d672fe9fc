package dlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// This file is the multi-lock: several names taken all or nothing, in one
// global order, and held behind one handle.

// MultiLock is a set of locks held together, returned by Client.AcquireAll
// and Client.TryAcquireAll. Each part is an ordinary Lock, with its own
// lease, watchdog and fence (see Locks); the MultiLock is held while every
// part is, and its Done closes as soon as one part is lost. Its methods are
// safe for concurrent use.
//
// When a part is lost, the other parts stay held and extended until
// Release: the code that holds the set may still be touching the resources
// they protect, and must stop first. Release the parts through the
// MultiLock, not one by one: a part released on its own counts as lost for
// the set.
//
// As with a Lock, it is NOT safe to assume that the set is still held just
// because Done is open; give each resource its part's fence.
type MultiLock struct {
	parts []*Lock // in the order the names were given
	order []*Lock // in acquisition order: by name, byte by byte

	mu      sync.Mutex
	err     error         // nil while every part is held; ErrReleased, or the first loss
	done    chan struct{} // closed when err is set
	settled func(error)   // DoAll's cancel, called with err when it is set
	// apart holds the loss of each part released on its own, apart from
	// the set: the part's own Release reports nothing more, so the set's
	// first Release reports it for the part.
	apart    map[*Lock]error
	reported bool // a Release of the set has begun
}

// AcquireAll takes every lock in names, waiting as long as ctx allows, all
// or nothing: it returns a MultiLock holding all of them, or an error and
// holds none of them (the parts it had taken are released before it
// returns).
//
// It takes the names one by one, each as Acquire does, in one global order
// (the names' bytes, whatever the order they are given in), holding the
// parts it has while it waits for the next. Two callers whose sets overlap
// therefore never wait for each other in a cycle: whoever holds a name
// waits only for names above it. That holds for fair waiting too (a waiter
// queued for a later part keeps its earlier parts meanwhile, so those who
// queue for them wait for it as well; fairness is per name, not over the
// set), as long as a caller holds no lock above the ones it asks for while
// it calls AcquireAll: take everything a piece of work needs in one call.
//
// The acquisition is a sequence, not one atomic step: while it runs, others
// can find some of the names taken and others free, and an AcquireAll that
// fails may have kept someone else from a name for a moment. On a Redis
// Cluster each name lives in its own hash slot (a name's slot is decided by
// its text up to the first '}', so "{order:42}:items" and
// "{order:42}:payment" share one), and no step spans slots; over a quorum
// (NewRedlock) each part is a Redlock acquisition of its own, one round
// each. With a reentrant Client each part is a hold of the Client's owner
// (see Client.Owner): a name the owner already holds is re-entered at once.
//
// If an earlier part is lost while AcquireAll waits for a later one (its
// lease ran out, which needs auto-extend off and a wait longer than the TTL,
// or Redis lost the key), everything is given back and AcquireAll starts
// over, for three rounds at most; after the third, it returns an error
// that names the lost part and matches ErrNotAcquired.
//
// opts apply to every part as Client.Acquire applies them to a lock:
// LeaseTTL and HolderMeta to each part's lease, MaxHold to each part (its
// cap counts from that part's own acquisition, so the set is lost, with an
// error matching ErrMaxHold, when its first part reaches it), and MaxWait
// to the whole acquisition: once d has passed, over every part and round,
// without every name taken, AcquireAll gives back what it took and returns
// an error wrapping ErrNotAcquired (not the context's errors) that names
// the part it was waiting for (a part's attempt in flight when d passes
// is finished first, so the call may end one attempt after d); MaxWait(0)
// makes one attempt per name, as TryAcquireAll does.
//
// It returns an error wrapping ErrInvalid, having sent nothing, when names
// is empty, holds a name twice or an invalid name, or for an invalid
// option; otherwise the error of the part that could not be taken, which
// names it: when ctx ends, one matching both ErrNotAcquired and ctx.Err().
//
// Before per-call options, AcquireAll took the names as its variadic
// parameter: AcquireAll(ctx, "a", "b") is now AcquireAll(ctx,
// []string{"a", "b"}).
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...LockOption) (*MultiLock, error) {
	return c.acquireAll(ctx, names, opts, false)
}

// TryAcquireAll makes one attempt at every lock in names, in the order of
// AcquireAll, all or nothing: if one of them is held by another, it
// releases the parts it has taken and returns that part's error, which
// wraps ErrNotAcquired and names it (its *NotAcquiredError's Name is the
// part's). In fair mode it takes no name that others are queued for. opts
// apply to every part as for AcquireAll (LeaseTTL, HolderMeta, MaxHold;
// MaxWait only as MaxWait(0)). Its other errors are as for AcquireAll.
func (c *Client) TryAcquireAll(ctx context.Context, names []string, opts ...LockOption) (*MultiLock, error) {
	return c.acquireAll(ctx, names, opts, true)
}

// DoAll takes every lock in names (waiting as AcquireAll does), runs fn, and
// releases them all when fn returns — or panics: the locks are released and
// the panic goes on. fn's context is cancelled, with a cause wrapping
// ErrNotHeld that names the part, as soon as any part is lost; as in Do, its
// Err and Done check the parts' validity deadlines when called.
//
// opts apply to every part as for AcquireAll (LeaseTTL, MaxWait,
// HolderMeta, MaxHold). When a part reaches its max hold, fn's context is
// cancelled with a cause that wraps ErrNotHeld and ErrMaxHold.
//
// DoAll returns fn's error, joined with the errors of parts lost before fn
// returned (the critical section may have overlapped with another holder's
// on those names), or with the release error.
func (c *Client) DoAll(ctx context.Context, names []string, fn func(ctx context.Context, m *MultiLock) error, opts ...LockOption) error {
	m, err := c.AcquireAll(ctx, names, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	m.onSettled(cancel)
	release := func() error {
		cancel(context.Canceled)
		return m.release(func(l *Lock) error { return l.c.release(ctx, l) })
	}
	finished := false
	defer func() {
		if !finished { // fn panicked
			release()
		}
	}()
	ferr := fn(&heldContext{Context: fctx, held: m, cancel: cancel}, m)
	finished = true
	rerr := release()
	switch {
	case rerr == nil:
		return ferr
	case ferr == nil:
		return rerr
	}
	return errors.Join(ferr, rerr)
}

// maxRounds bounds how often AcquireAll starts over after an earlier part
// was lost while it waited for a later one.
const maxRounds = 3

// acquireAll takes the names in order, each with Acquire (or, with try,
// TryAcquire) and opts, all or nothing. A MaxWait bounds the whole: each
// part waits for what is left of it.
func (c *Client) acquireAll(ctx context.Context, names []string, opts []LockOption, try bool) (*MultiLock, error) {
	order, err := sortedNames(names)
	if err != nil {
		return nil, err
	}
	p, err := c.leaseFor(order[0], opts, try) // the options are checked before anything is sent
	if err != nil {
		return nil, err
	}
	var deadline time.Time // of a MaxWait(d > 0)
	if p.wait > 0 {
		deadline = time.Now().Add(p.wait)
	}
	take := c.Acquire
	if try {
		take = c.TryAcquire
	}
	for round := 1; ; round++ {
		locks := make([]*Lock, 0, len(order))
		for _, name := range order {
			partOpts := opts
			if !deadline.IsZero() {
				left := time.Until(deadline)
				if left <= 0 {
					c.giveBack(ctx, locks)
					return nil, waitedOut(name, p.wait, true)
				}
				partOpts = append(opts[:len(opts):len(opts)], partWait(left, p.wait))
			}
			l, err := take(ctx, name, partOpts...)
			if err != nil {
				c.giveBack(ctx, locks)
				return nil, err
			}
			locks = append(locks, l)
		}
		lost := lostPart(locks)
		if lost == nil {
			return newMulti(names, locks), nil
		}
		c.giveBack(ctx, locks)
		if try || round == maxRounds {
			why := strings.TrimPrefix(lost.Err().Error(), "dlock: ")
			return nil, opError("acquire", lost.name, backend.Because(ErrNotAcquired,
				"lost while the later names were taken: "+why, lost.Err()))
		}
	}
}

// sortedNames checks names and returns them in acquisition order. Nothing
// has been sent when it returns an error (wrapping ErrInvalid).
func sortedNames(names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no lock names", ErrInvalid)
	}
	for i, name := range names {
		if err := validName(name); err != nil {
			return nil, fmt.Errorf("%w (name %d of %d)", err, i+1, len(names))
		}
	}
	order := slices.Clone(names)
	slices.Sort(order)
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			return nil, fmt.Errorf("%w: lock name %q given twice", ErrInvalid, order[i])
		}
	}
	return order, nil
}

// lostPart returns the first of locks that is no longer held, or nil.
func lostPart(locks []*Lock) *Lock {
	for _, l := range locks {
		if l.Err() != nil {
			return l
		}
	}
	return nil
}

// giveBack releases the parts an acquisition had taken before it failed,
// all at once. Against a Redis that does not answer, it waits no longer
// than an undo does and leaves the rest to the background (see undo).
func (c *Client) giveBack(ctx context.Context, locks []*Lock) {
	var wg sync.WaitGroup
	for _, l := range locks {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			err := l.Release(rctx)
			cancel()
			if err != nil && !errors.Is(err, ErrNotHeld) {
				c.undo(ctx, l.cl)
			}
		})
	}
	wg.Wait()
}

// newMulti returns the MultiLock of the parts locks, taken in acquisition
// order for names.
func newMulti(names []string, locks []*Lock) *MultiLock {
	m := &MultiLock{order: locks, done: make(chan struct{})}
	byName := make(map[string]*Lock, len(locks))
	for _, l := range locks {
		byName[l.name] = l
	}
	for _, name := range names {
		m.parts = append(m.parts, byName[name])
	}
	for _, l := range locks {
		l.onSettled(func(err error) { m.partSettled(l, err) })
	}
	return m
}

// partSettled records that the part l was released or lost (err). It runs
// with l.mu held: it must not call into l.
func (m *MultiLock) partSettled(l *Lock, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == ErrReleased {
		if m.reported {
			return // released with the set
		}
		err = lost(l.name, "the part was released on its own, apart from the set")
		if m.apart == nil {
			m.apart = map[*Lock]error{}
		}
		m.apart[l] = err
	}
	if m.err == nil { // else another part was lost first
		m.settleLocked(err)
	}
}

// settleLocked settles the set with err; m.mu must be held.
func (m *MultiLock) settleLocked(err error) {
	m.err = err
	close(m.done)
	if m.settled != nil {
		m.settled(err)
	}
}

// onSettled makes f be called with the set's error once it is settled, or
// at once if it already is. f must not block or call back into m.
func (m *MultiLock) onSettled(f func(error)) {
	m.check()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		f(m.err)
		return
	}
	m.settled = f
}

// check declares the loss of every part whose validity deadline has passed.
func (m *MultiLock) check() {
	for _, l := range m.order {
		l.expire()
	}
}

// Locks returns the parts, one Lock per name, in the order the names were
// given to AcquireAll: each has its own fence (Lock.Fence), token and
// validity. Release them through the MultiLock.
func (m *MultiLock) Locks() []*Lock { return slices.Clone(m.parts) }

// Names returns the lock names, in the order they were given.
func (m *MultiLock) Names() []string {
	names := make([]string, len(m.parts))
	for i, l := range m.parts {
		names[i] = l.name
	}
	return names
}

// Done returns a channel that is closed when any part is lost, or when the
// set is released.
func (m *MultiLock) Done() <-chan struct{} {
	m.check() // past a deadline, the channel comes back closed
	return m.done
}

// Err returns nil while every part is held, ErrReleased after Release, or
// the error of the first part that was lost, which wraps ErrNotHeld and
// names the part (a part released on its own counts as lost).
func (m *MultiLock) Err() error {
	m.check()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// ValidUntil returns the earliest validity deadline of the parts: until
// then no other client can hold any of them (see Lock.ValidUntil).
func (m *MultiLock) ValidUntil() time.Time {
	until := m.order[0].ValidUntil()
	for _, l := range m.order[1:] {
		if u := l.ValidUntil(); u.Before(until) {
			until = u
		}
	}
	return until
}

// Extend resets every part's lease to ttl from now, as Lock.Extend does,
// all parts at once. It returns an error wrapping ErrInvalid if ttl is too
// short (nothing is sent then), ErrReleased after Release, the error of a
// part lost before (see Err), or the parts' errors joined, each naming its
// part.
func (m *MultiLock) Extend(ctx context.Context, ttl time.Duration) error {
	l := m.order[0]
	if ttl < MinTTL {
		return fmt.Errorf("%w: Extend(%v) of %d locks: the TTL must be at least %v", ErrInvalid, ttl, len(m.order), MinTTL)
	}
	if d := l.c.opts.driftFor(ttl); ttl <= d {
		return fmt.Errorf("%w: Extend(%v) of %d locks: the TTL must be above the drift (%v)", ErrInvalid, ttl, len(m.order), d)
	}
	if err := m.Err(); err != nil {
		return err
	}
	return m.each(func(l *Lock) error { return l.Extend(ctx, ttl) })
}

// Release gives every part up, all at once, stopping their watchdogs. It is
// idempotent: once it has succeeded, further calls return nil. It returns
// the errors of the parts lost before Release, each wrapping ErrNotHeld and
// naming its part (the critical section may have overlapped with another
// holder's on those names), joined with the errors from Redis of parts
// whose release failed; those expire within their TTL, and Release may be
// called again.
//
// Pass a context that is not already cancelled, e.g.
// context.WithoutCancel(ctx) in a defer.
func (m *MultiLock) Release(ctx context.Context) error {
	return m.release(func(l *Lock) error { return l.Release(ctx) })
}

// release settles the set as released, unless a part was lost first, and
// then releases each part with rel.
func (m *MultiLock) release(rel func(*Lock) error) error {
	m.check() // a loss that is due is reported as one
	m.mu.Lock()
	if m.err == nil {
		m.settleLocked(ErrReleased)
	}
	var apart map[*Lock]error
	if !m.reported { // the first Release reports them
		apart = maps.Clone(m.apart)
	}
	m.reported = true
	m.mu.Unlock()
	return m.each(func(l *Lock) error {
		if err := rel(l); err != nil || apart[l] == nil {
			return err
		}
		return apart[l]
	})
}

// each runs f on every part at once (pipelined into shared round trips by
// the Client) and joins the errors in acquisition order.
func (m *MultiLock) each(f func(*Lock) error) error {
	errs := make([]error, len(m.order))
	var wg sync.WaitGroup
	for i, l := range m.order {
		wg.Go(func() { errs[i] = f(l) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
