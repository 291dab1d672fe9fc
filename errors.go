package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/backend"
)

var (
	ErrNotAcquired = backend.ErrNotAcquired                   // the lock was not taken: held, or the wait ended
	ErrNotHeld     = errors.New("dlock: not held")            // the lease was lost: work under it may have overlapped another holder's
	ErrReleased    = errors.New("dlock: released")            // what Err returns after a Release
	ErrInvalid     = backend.ErrInvalid                       // a bad argument or option; nothing was taken or changed
	ErrWrongType   = backend.ErrWrongType                     // the name is held as another kind, or its key is foreign
	ErrReplicaAck  = backend.ErrReplicaAck                    // too few replicas acknowledged a write (WithReplicaAck)
	ErrNotDurable  = backend.ErrNotDurable                    // the append-only file did not have a write in time (WithDurableGrants)
	ErrStaleFence  = errors.New("dlock: stale fencing token") // Guard's refusal of a write with an old fence
	ErrMaxHold     = errors.New("dlock: max hold reached")    // a lease reached its max hold (MaxHold)
	ErrClosed      = driver.ErrClosed                         // a call's error after Client.Close, or its Redis client's Close
)

// QuorumError reports an Op (acquire, resume, extend, release, fence, list,
// inspect) only Held < Need nodes granted; it unwraps to Nodes, each node's
// error (nil: granted). An acquire's or resume's matches [ErrNotAcquired].
type QuorumError = backend.QuorumError

// NotAcquiredError is the cause of an acquisition refused: the name is held.
type NotAcquiredError struct {
	Name    string        // the name, or AcquireAll's part, not taken
	Holder  string        // the holder's token, or reentrant owner ID; "" if unknown
	Meta    string        // the holder's metadata; "" if none or unknown
	TTL     time.Duration // the holder's (or soonest hold's) remaining lease; -1 if unknown
	Permits int           // a semaphore's N as asked; 0 otherwise

	// says is by whom the lock is held, as its kind says it, or, for a
	// refusal that names no holder (and so no metadata), its whole text
	// ("": held by another holder).
	says string
}

// Error says who holds the lock.
func (e *NotAcquiredError) Error() string {
	s := cmp.Or(e.says, backend.HeldByAnother)
	if e.Meta != "" {
		s += ", " + strconv.Quote(e.Meta)
	}
	return s
}

// Unwrap returns ErrNotAcquired.
func (e *NotAcquiredError) Unwrap() error { return ErrNotAcquired }

// Errors read once: "dlock: <op> "<name>": <cause>". The backend returns
// bare causes (the go-redis error, or a text of its own); the Client or Lock
// method that returns the error puts the prefix, the operation and the
// name before it, once. A cause that must match a sentinel error is made
// with backend.Because, so that the sentinel's own "dlock: " is not repeated.

// opError is the error of operation op on the lock name, caused by err.
func opError(op, name string, err error) error {
	return fmt.Errorf("dlock: %s %q: %w", op, name, unprefixed(err))
}

// unprefixed is err without the "dlock: " at its head if it matches
// ErrClosed (a driver's wrapping, or Close's): the caller's prefix is said
// once.
func unprefixed(err error) error {
	if errors.Is(err, ErrClosed) {
		if s, ok := strings.CutPrefix(err.Error(), "dlock: "); ok {
			return backend.Detailed(s, err)
		}
	}
	return err
}

// gaveUp is the error of an acquisition (op, see acquireOp) whose context
// ended before it took the lock: it matches ErrNotAcquired and the
// context's error (and its cause, if any), and the errors of the last
// attempt, if any, which it names last.
func gaveUp(ctx context.Context, op, name string, last ...error) error {
	detail := ctx.Err().Error()
	errs := []error{ctx.Err()}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		detail += ": " + cause.Error()
		errs = append(errs, cause)
	}
	return unheld(op, name, detail, errs, last)
}

// unheld is the error of an acquisition (op) of name that ended without
// the lock, for detail: it matches ErrNotAcquired, errs, and the errors of
// the last attempt, if any, whose text follows detail.
func unheld(op, name, detail string, errs, last []error) error {
	if last := errors.Join(last...); last != nil {
		detail += "; last attempt: " + oneLine(last)
		errs = append(errs, last)
	}
	return opError(op, name, backend.Because(ErrNotAcquired, detail, errs...))
}

// errClosedWait is the cause of a wait that Close ended: it matches
// ErrClosed, whose "dlock: " the caller's prefix already says.
var errClosedWait = backend.Detailed(strings.TrimPrefix(ErrClosed.Error(), "dlock: "), ErrClosed)

// errNil is the error of a nil handle's Release and Err: one whose
// acquisition failed holds nothing (a Release deferred before the error
// was checked).
var errNil = fmt.Errorf("dlock: %w", backend.Because(ErrNotHeld, "a nil handle: nothing was acquired", ErrInvalid))

// lost is the error of a lease that is no longer ours, for why: it
// matches ErrNotHeld, and errs (ErrMaxHold for a lease that ended at its
// max hold).
func lost(name, why string, errs ...error) error {
	return fmt.Errorf("dlock: %w", backend.Because(ErrNotHeld, fmt.Sprintf("%q: %s", name, why), errs...))
}

// answered is the error of operation op on the lease l, to which Redis
// answered ok, or err: nil if ok; if another Lock resumed the lease, the
// hand-off; if the lease is gone, its loss, for why (as lost says).
func (l *Lock) answered(op, why string, ok bool, err error) error {
	switch {
	case errors.Is(err, backend.ErrSuperseded):
		return l.handOff()
	case err != nil:
		return opError(op, l.name, err)
	case !ok:
		return l.lose(lost(l.name, why), false)
	}
	return nil
}

// joinEnded is the error of a Do (Client.Do, DoAll, Election.Do) whose fn
// returned ferr and whose lease ended with rerr (a loss, or the release's
// error): either alone if the other is nil, else one line, fn's error first
// and the end last, matching both.
func joinEnded(ferr, rerr error) error {
	switch {
	case rerr == nil:
		return ferr
	case ferr == nil:
		return rerr
	case errors.Is(ferr, rerr):
		return ferr // fn returned the loss itself (its context's cause)
	}
	sep := "; "
	if errors.Is(ferr, context.Canceled) && errors.Is(rerr, ErrNotHeld) {
		sep = ": " // fn gave up because its context was cancelled, by the loss
	}
	return backend.Detailed(oneLine(ferr)+sep+oneLine(rerr), ferr, rerr)
}

// oneLine is err's text on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
