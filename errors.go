package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

var (
	// ErrNotAcquired means the lock is held by someone else: TryAcquire found
	// it taken, or Acquire gave up waiting.
	ErrNotAcquired = backend.ErrNotAcquired

	// ErrNotHeld means our token is gone from Redis: the lease expired, or
	// the key was deleted or taken over. Work done under the lock may have
	// overlapped with another holder's.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrReleased is what Lock.Err returns after a normal Release.
	ErrReleased = errors.New("dlock: released")

	// ErrInvalid reports bad input: an empty or oversized name, a TTL too
	// short for Extend, or, from New and NewRedlock, a nil client or node
	// and an option that is invalid or does not apply to the Client.
	ErrInvalid = errors.New("dlock: invalid argument")

	// ErrWrongType means a name is held as another kind than the one asked
	// for (a lock's name asked for as a semaphore, a read-write lock's as a
	// lock, ...), or its key holds a value dlock does not write there
	// (another program uses the key). The error says what the key holds.
	ErrWrongType = backend.ErrWrongType

	// ErrReplicaAck means fewer replicas than WithReplicaAck asks for
	// acknowledged an acquisition (which was then undone, and the error also
	// matches ErrNotAcquired) or an extension (the watchdog retries it).
	ErrReplicaAck = backend.ErrReplicaAck

	// ErrStaleFence is returned by Guard.Write when a write carries a fencing
	// token older than one the resource has already accepted.
	ErrStaleFence = errors.New("dlock: stale fencing token")

	// ErrMaxHold says that a lease reached its max hold (WithMaxHold,
	// MaxHold). Lock.Err returns an error matching it and ErrNotHeld once
	// the lease has ended at its cap; Lock.Extend returns an error matching
	// it alone when it extended the lease only up to the cap.
	ErrMaxHold = errors.New("dlock: max hold reached")
)

// NotAcquiredError is the cause of an acquisition that found the lock held
// by another lease: TryAcquire's error (and that of Acquire with
// MaxWait(0)) carries it, and so does the error of an Acquire that gave up
// waiting, for the last attempt that found the lock taken. It matches
// ErrNotAcquired; get it with errors.AsType[*dlock.NotAcquiredError](err).
// It tells a waiter who holds the lock, as Redis said when it refused.
//
// A semaphore's refusals (Semaphore.TryAcquire, and a Semaphore.Acquire
// that gave up) carry one too, with Permits set: a semaphore has no one
// holder, so Holder and Meta are "" (Semaphore.Holders lists the permits
// and their metadata), and TTL is the remaining lease of the permit that
// ends first — the latest a permit comes free, unless others wait ahead —
// or -1 if no permit is held (the attempt was refused because others wait
// ahead of it). So do a read-write lock's (RWLocker.TryAcquire, and an
// Acquire that gave up), with Holder and Meta "" for the same reason
// (RWMutex.Holders lists the holds) and TTL the remaining lease of the
// hold that ends first.
type NotAcquiredError struct {
	// Name is the name that was asked for: of the lock, the semaphore or
	// the read-write lock; for AcquireAll, the part that could not be taken.
	Name string
	// Holder is the holding lease's token, or a reentrant lock's owner ID
	// (see Owner); "" when no node said (a quorum whose nodes disagreed),
	// and for a semaphore or a read-write lock.
	Holder string
	// Meta is the holder's metadata (WithHolderMeta, HolderMeta): for a
	// reentrant lock, that of one of its owner's holds; "" if it has none,
	// and for a semaphore or a read-write lock.
	Meta string
	// TTL is the holder's remaining lease (a semaphore's: that of the
	// permit that ends first; a read-write lock's: of the hold that ends
	// first); -1 if unknown or without expiry.
	TTL time.Duration
	// Permits is, for a semaphore, the N the refused attempt asked with
	// (Semaphore.Permits); 0 for a lock.
	Permits int

	reentrant bool   // Holder is a reentrant lock's owner: the text says "owner"
	rw        string // a read-write lock's refusal of a read ("r") or write ("w")
}

// Error says who holds the lock: "held by another holder" (a reentrant
// lock: "held by another owner"), followed by the holder's metadata, quoted,
// if it has some. For a semaphore it says that no permit was free:
// "no permit free: N or more held, or others waiting ahead"; for a
// read-write lock, what kept the read or write out.
func (e *NotAcquiredError) Error() string {
	if e.rw != "" {
		return rwRefusal(e.rw)
	}
	if e.Permits > 0 {
		return fmt.Sprintf("no permit free: %d or more held, or others waiting ahead", e.Permits)
	}
	by := "held by another holder"
	if e.reentrant {
		by = "held by another owner"
	}
	if e.Meta == "" {
		return by
	}
	return by + ", " + strconv.Quote(e.Meta)
}

// Unwrap returns ErrNotAcquired.
func (e *NotAcquiredError) Unwrap() error { return ErrNotAcquired }

// refusal is the NotAcquiredError of an attempt of name that Redis refused
// with g.
func (c *Client) refusal(name string, g backend.Grant) *NotAcquiredError {
	e := &NotAcquiredError{Name: name, Holder: g.Holder, Meta: metaOf(g.Holder), TTL: g.PTTL, Permits: c.permits, rw: c.rw}
	if g.Owner != "" {
		e.Holder, e.reentrant = g.Owner, true
	}
	return e
}

// Errors read once: "dlock: <op> "<name>": <cause>". The backend returns
// bare causes (the go-redis error, or a text of its own); the Client or Lock
// method that returns the error puts the prefix, the operation and the
// name before it, once. A cause that must match a sentinel error is made
// with backend.Because, so that the sentinel's own "dlock: " is not repeated.

// opError is the error of operation op on the lock name, caused by err.
func opError(op, name string, err error) error {
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}

// notAcquired is the error of an attempt that found the lock taken, or no
// permit of a semaphore free for it: its cause is e, which says which.
func (c *Client) notAcquired(name string, e *NotAcquiredError) error {
	return opError("acquire", name, backend.Because(ErrNotAcquired, e.Error(), e))
}

// gaveUp is the error of an acquisition whose context ended before it took
// the lock: it matches ErrNotAcquired and the context's error (and its
// cause, if any), and the errors of the last attempt, if any, which it
// names last.
func gaveUp(ctx context.Context, name string, last ...error) error {
	detail := ctx.Err().Error()
	errs := []error{ctx.Err()}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		detail += ": " + cause.Error()
		errs = append(errs, cause)
	}
	return opError("acquire", name, backend.Because(ErrNotAcquired, withLast(detail, &errs, last), errs...))
}

// waitedOut is the error of an acquisition whose wait limit (MaxWait, d)
// ran out before it took the lock while its context lives: it matches
// ErrNotAcquired and the errors of the last attempt, not the context's.
// all says that d was the limit of a whole AcquireAll, which was waiting
// for name.
func waitedOut(name string, d time.Duration, all bool, last ...error) error {
	var errs []error
	limit := "MaxWait"
	if all {
		limit = "MaxWait, for all the names together"
	}
	detail := withLast(fmt.Sprintf("waited %v (%s)", d, limit), &errs, last)
	return opError("acquire", name, backend.Because(ErrNotAcquired, detail, errs...))
}

// withLast returns detail followed by the text of the last attempt's
// errors, if any, which it adds to errs.
func withLast(detail string, errs *[]error, last []error) string {
	if last := errors.Join(last...); last != nil {
		detail += "; last attempt: " + strings.ReplaceAll(last.Error(), "\n", "; ")
		*errs = append(*errs, last)
	}
	return detail
}

// maxHeld is the error of a lease that ended at its max hold d.
func maxHeld(name string, d time.Duration) error {
	return fmt.Errorf("dlock: %w", backend.Because(ErrNotHeld, fmt.Sprintf("%q: held for its max hold of %v", name, d), ErrMaxHold))
}

// lost is the error of a lease that is no longer ours.
func lost(name, why string) error {
	return fmt.Errorf("%w: %q: %s", ErrNotHeld, name, why)
}
