package dlock

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrNotAcquired means the lock is held by someone else: TryAcquire found
	// it taken, or Acquire gave up waiting.
	ErrNotAcquired = errors.New("dlock: not acquired")

	// ErrNotHeld means our token is gone from Redis: the lease expired, or
	// the key was deleted or taken over. Work done under the lock may have
	// overlapped with another holder's.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrReleased is what Lock.Err returns after a normal Release.
	ErrReleased = errors.New("dlock: released")

	// ErrInvalid reports bad input: an empty or oversized name, a TTL that
	// is not positive, or an invalid option given to New.
	ErrInvalid = errors.New("dlock: invalid argument")

	// ErrWrongType means a lock key exists but holds a Redis value of a type
	// dlock does not write there (another program uses the key).
	ErrWrongType = errors.New("dlock: lock key holds a value of another type")

	// ErrReplicaAck means fewer replicas than WithReplicaAck asks for
	// acknowledged an acquisition (which was then undone, and the error also
	// matches ErrNotAcquired) or an extension (the watchdog retries it).
	ErrReplicaAck = errors.New("dlock: not acknowledged by enough replicas")

	// ErrStaleFence is returned by Guard.Write when a write carries a fencing
	// token older than one the resource has already accepted.
	ErrStaleFence = errors.New("dlock: stale fencing token")
)

// notAcquired is the error of an attempt that found the lock taken.
func notAcquired(name string) error {
	return fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, name)
}

// gaveUp is the error of an Acquire whose context ended while it waited: it
// matches ErrNotAcquired and the context's error (and its cause, if any).
func gaveUp(ctx context.Context, name string) error {
	errs := []error{notAcquired(name), ctx.Err()}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		errs = append(errs, cause)
	}
	return errors.Join(errs...)
}

// lost is the error of a lease that is no longer ours.
func lost(name, why string) error {
	return fmt.Errorf("%w: %q: %s", ErrNotHeld, name, why)
}
