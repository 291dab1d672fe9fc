package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

	// ErrWrongType means a lock key exists but holds a Redis value of a type
	// dlock does not write there (another program uses the key).
	ErrWrongType = backend.ErrWrongType

	// ErrReplicaAck means fewer replicas than WithReplicaAck asks for
	// acknowledged an acquisition (which was then undone, and the error also
	// matches ErrNotAcquired) or an extension (the watchdog retries it).
	ErrReplicaAck = backend.ErrReplicaAck

	// ErrStaleFence is returned by Guard.Write when a write carries a fencing
	// token older than one the resource has already accepted.
	ErrStaleFence = errors.New("dlock: stale fencing token")
)

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
// permit of a semaphore free for it.
func (c *Client) notAcquired(name string) error {
	why := "held by another owner"
	if c.permits > 0 {
		why = fmt.Sprintf("no permit free: %d or more held, or others waiting ahead", c.permits)
	}
	return opError("acquire", name, backend.Because(ErrNotAcquired, why))
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
	if last := errors.Join(last...); last != nil {
		detail += "; last attempt: " + strings.ReplaceAll(last.Error(), "\n", "; ")
		errs = append(errs, last)
	}
	return opError("acquire", name, backend.Because(ErrNotAcquired, detail, errs...))
}

// lost is the error of a lease that is no longer ours.
func lost(name, why string) error {
	return fmt.Errorf("%w: %q: %s", ErrNotHeld, name, why)
}
