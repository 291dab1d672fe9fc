package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// This file is the multi-lock: several names taken all or nothing, in one
// global order, and held behind one handle.

// MultiLock is locks held together; Done closes if a part is lost or released.
type MultiLock struct {
	parts []*Lock // in the order the names were given
	order []*Lock // in acquisition order: by name, byte by byte

	// settled is cancelled, with ErrReleased or the first loss as its
	// cause, once a part is lost or the set is released (settleLocked).
	settled context.Context
	settle  context.CancelCauseFunc

	mu   sync.Mutex  // orders a part settling the set and the set's Release; guards apart and then
	then func(error) // onSettled's f (DoAll's cancel), called as the set is settled (a no-op before onSettled)
	// apart holds the loss of each part released on its own, apart from
	// the set: the part's own Release reports nothing more, so the set's
	// first Release reports it for the part. It is nil once a Release of
	// the set has begun.
	apart map[*Lock]error
}

// AcquireAll takes all names or none, waiting as [Client.Acquire], in one
// global order (NOT atomic: docs/multi.md). [ErrInvalid]: no names, or one
// twice.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...LockOption) (*MultiLock, error) {
	return acquireAll(ctx, c.parts(names), opts, false)
}

// Part is one lock of a multi-lock that spans Clients: Name on Client.
type Part struct {
	Client *Client
	Name   string
}

// AcquireParts is [Client.AcquireAll] across Clients; [ErrInvalid]: a key twice.
func AcquireParts(ctx context.Context, parts []Part, opts ...LockOption) (*MultiLock, error) {
	return acquireAll(ctx, parts, opts, false)
}

// parts returns names as Parts on c.
func (c *Client) parts(names []string) []Part {
	ps := make([]Part, len(names))
	for i, name := range names {
		ps[i] = Part{Client: c, Name: name}
	}
	return ps
}

// key returns the part's lock key, by which parts are taken in order.
func (p Part) key() string { return backend.KeysFor(p.Client.opts.prefix, p.Name).Lock }

// TryAcquireAll makes one attempt per name, all or nothing.
func (c *Client) TryAcquireAll(ctx context.Context, names []string, opts ...LockOption) (*MultiLock, error) {
	return acquireAll(ctx, c.parts(names), opts, true)
}

// DoAll is [Client.Do] for [Client.AcquireAll]: a part's loss cancels fn's
// context, its cause wrapping [ErrNotHeld] and naming the part.
func (c *Client) DoAll(ctx context.Context, names []string, fn func(ctx context.Context, m *MultiLock) error, opts ...LockOption) error {
	return c.doAll(ctx, names, fn, opts, false)
}

// TryDoAll is [Client.DoAll] with one attempt per name, else [ErrNotAcquired].
func (c *Client) TryDoAll(ctx context.Context, names []string, fn func(ctx context.Context, m *MultiLock) error, opts ...LockOption) error {
	return c.doAll(ctx, names, fn, opts, true)
}

// doAll is DoAll (try: TryDoAll).
func (c *Client) doAll(ctx context.Context, names []string, fn func(ctx context.Context, m *MultiLock) error, opts []LockOption, try bool) error {
	return runHeld(ctx, strings.Join(names, ", "), fn, func() (*MultiLock, error) {
		return acquireAll(ctx, c.parts(names), opts, try)
	}, func(m *MultiLock) error {
		return m.release(func(l *Lock) error { return release(ctx, l) })
	})
}

// maxRounds bounds how often AcquireAll starts over after an earlier part
// was lost while it waited for a later one.
const maxRounds = 3

// acquireAll takes the parts in order, each with its Client's Acquire (or,
// with try, TryAcquire) and opts, all or nothing. A MaxWait bounds the
// whole: each part waits for what is left of it, and makes one attempt
// when nothing is.
func acquireAll(ctx context.Context, parts []Part, opts []LockOption, try bool) (*MultiLock, error) {
	order, err := sortedParts(parts)
	if err != nil {
		return nil, err
	}
	// The options are checked against every Client before anything is
	// sent; the first part's terms give the MaxWait if the call has none.
	var p lease
	for i, part := range order {
		switch q, err := part.Client.leaseFor("acquire", part.Name, opts, try); {
		case err != nil:
			return nil, err
		case q.resume != "":
			return nil, fmt.Errorf("%w: acquire %q: Resume names one lease, not a multi-lock's", ErrInvalid, part.Name)
		case i == 0:
			p = q
		}
	}
	start := time.Now()
	for round := 1; ; round++ {
		locks := make([]*Lock, 0, len(order))
		for _, part := range order {
			partOpts := opts
			if p.wait > 0 && !try { // (TryAcquireAll never waits, whatever the Client's default)
				// The part waits for what is left of the MaxWait, but never
				// nothing: a part reached after it ran out still makes the
				// one attempt that Acquire makes with a MaxWait however
				// short. (waitAll is the bound of the whole, which its
				// error names.)
				left := max(p.wait-time.Since(start), time.Nanosecond)
				partOpts = append(opts[:len(opts):len(opts)], LeaseOption{func(q *lease) { q.wait, q.waitAll = left, p.wait }})
			}
			l, err := part.Client.acquireAs(ctx, &part.Client.own, part.Name, partOpts, try)
			if err != nil {
				each(locks, func(l *Lock) error { return release(ctx, l) }) // (as a Do releases: the holder has no Lock to release)
				return nil, partRefused(part.Name, err)
			}
			locks = append(locks, l)
		}
		i := slices.IndexFunc(locks, func(l *Lock) bool { return l.Err() != nil }) // the first part no longer held
		if i < 0 {
			return newMulti(parts, locks), nil
		}
		lost := locks[i]
		each(locks, func(l *Lock) error { return release(ctx, l) }) // (as a Do releases: the holder has no Lock to release)
		if try || round == maxRounds {
			why := strings.TrimPrefix(lost.Err().Error(), "dlock: ")
			return nil, partRefused(lost.name, opError("acquire", lost.name, backend.Because(ErrNotAcquired,
				"lost while the later names were taken: "+why, lost.Err())))
		}
	}
}

// partRefused returns err, the error of the part name of a multi
// acquisition, so that if it matches ErrNotAcquired it carries a
// *NotAcquiredError naming the part: its own, when an attempt found the
// part held, or else one that says only that the part was not taken. Its
// text is err's.
func partRefused(name string, err error) error {
	if e, ok := errors.AsType[*NotAcquiredError](err); !errors.Is(err, ErrNotAcquired) || ok && e.Name == name {
		return err // not a refusal, or one that names the part already
	}
	// (It reads as err; errors.Is and errors.As see both.)
	return backend.Detailed(err.Error(), err, &NotAcquiredError{Name: name, TTL: -1, says: "not taken"})
}

// sortedParts checks parts and returns them in acquisition order: by
// lock key, so that sets over several Clients that overlap take their
// common locks in the same order. Nothing has been sent when it returns an
// error (wrapping ErrInvalid).
func sortedParts(parts []Part) ([]Part, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no lock names", ErrInvalid)
	}
	for i, p := range parts {
		switch err := validName(p.Name); {
		case p.Client == nil:
			return nil, fmt.Errorf("%w: part %d of %d (%q) has no Client", ErrInvalid, i+1, len(parts), p.Name)
		case err != nil:
			return nil, fmt.Errorf("%w (name %d of %d)", err, i+1, len(parts))
		}
	}
	order := slices.Clone(parts)
	slices.SortStableFunc(order, func(a, b Part) int { return strings.Compare(a.key(), b.key()) })
	for i := 1; i < len(order); i++ {
		if order[i].key() == order[i-1].key() {
			return nil, fmt.Errorf("%w: lock name %q given twice", ErrInvalid, order[i].Name)
		}
	}
	return order, nil
}

// newMulti returns the MultiLock of locks, taken in acquisition order for
// parts.
func newMulti(parts []Part, locks []*Lock) *MultiLock {
	m := &MultiLock{order: locks, apart: map[*Lock]error{}, then: func(error) {}}
	m.settled, m.settle = context.WithCancelCause(context.Background())
	for _, p := range parts { // (locks are sorted by key: see sortedParts)
		i, _ := slices.BinarySearchFunc(locks, p.key(), func(l *Lock, key string) int { return strings.Compare(l.cl.Keys.Lock, key) })
		m.parts = append(m.parts, locks[i])
	}
	for _, l := range locks {
		// A part released or lost settles the set. This runs with l.mu
		// held: it must not call into l.
		l.onSettled(func(err error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if err == ErrReleased {
				if m.apart == nil {
					return // released with the set
				}
				err = lost(l.name, "the part was released on its own, apart from the set")
				m.apart[l] = err
			}
			m.settleLocked(err) // (unless another part was lost first)
		})
	}
	return m
}

// settleLocked settles the set with err unless it already is, and calls
// then at once: fn's context is done by the time a loss is reported, as
// a Do's is; m.mu must be held.
func (m *MultiLock) settleLocked(err error) {
	if m.settled.Err() == nil {
		m.settle(err)
		m.then(err)
	}
}

// onSettled makes f be called with the set's error once it is settled, or
// at once if it already is. f must not block or call back into m.
func (m *MultiLock) onSettled(f func(error)) {
	m.check()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled.Err() != nil {
		f(context.Cause(m.settled))
		return
	}
	m.then = f
}

// check declares the loss of every part whose validity deadline has passed.
func (m *MultiLock) check() {
	for _, l := range m.order {
		l.expire()
	}
}

// Locks returns the parts, one [Lock] per name, in the order given.
func (m *MultiLock) Locks() []*Lock { return slices.Clone(m.parts) }

// Names returns the lock names, in the order given.
func (m *MultiLock) Names() []string {
	names := make([]string, len(m.parts))
	for i, l := range m.parts {
		names[i] = l.name
	}
	return names
}

// Done returns a channel closed when any part is lost or the set is released.
func (m *MultiLock) Done() <-chan struct{} {
	m.check() // past a deadline, the channel comes back closed
	return m.settled.Done()
}

// Err returns nil while every part is held, [ErrReleased], or the first loss.
func (m *MultiLock) Err() error {
	if m == nil || m.settled == nil { // (nil, or a zero MultiLock: never acquired)
		return errNil
	}
	m.check()
	return context.Cause(m.settled)
}

// ValidUntil returns the earliest of the parts' [Lock.ValidUntil].
func (m *MultiLock) ValidUntil() time.Time {
	until := m.order[0].ValidUntil()
	for _, l := range m.order[1:] {
		if u := l.ValidUntil(); u.Before(until) {
			until = u
		}
	}
	return until
}

// Extend extends every part as [Lock.Extend] does; errors name their part.
func (m *MultiLock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := m.order[0].extendable(ttl, m, func() string { return fmt.Sprintf("%d locks", len(m.order)) }); err != nil {
		return err
	}
	return each(m.order, func(l *Lock) error { return l.Extend(ctx, ttl) })
}

// Release releases every part as [Lock.Release] does; errors name their part.
func (m *MultiLock) Release(ctx context.Context) error {
	if m == nil || m.settled == nil {
		return errNil
	}
	return m.release(func(l *Lock) error { return l.Release(ctx) })
}

// release settles the set as released, unless a part was lost first, and
// then releases each part with rel.
func (m *MultiLock) release(rel func(*Lock) error) error {
	m.check() // a loss that is due is reported as one
	m.mu.Lock()
	m.settleLocked(ErrReleased) // (unless a part was lost first)
	// The first Release reports the parts released apart.
	apart := m.apart
	m.apart = nil
	m.mu.Unlock()
	return each(m.order, func(l *Lock) error { return cmp.Or(rel(l), apart[l]) })
}

// each runs f on every lock at once (pipelined into shared round trips by
// the Client) and joins the errors in the locks' order.
func each(locks []*Lock, f func(*Lock) error) error {
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() { errs[i] = f(l) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
