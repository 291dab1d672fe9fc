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
	// ErrNotAcquired means the lock was not taken: held, or the wait ended.
	ErrNotAcquired = errors.New("dlock: not acquired")
	// ErrNotHeld means the lease was lost: work under it may have overlapped another holder's.
	ErrNotHeld = errors.New("dlock: not held")
	// ErrReleased is what Err returns after a Release.
	ErrReleased = errors.New("dlock: released")
	// ErrInvalid reports a bad argument or option; nothing was taken or changed.
	ErrInvalid = errors.New("dlock: invalid argument")
	// ErrWrongType means the name is held as another kind, or its key is foreign.
	ErrWrongType = errors.New("dlock: lock key holds a value of another type")
	// ErrReplicaAck means too few replicas acknowledged a write ([WithReplicaAck]).
	ErrReplicaAck = errors.New("dlock: not acknowledged by enough replicas")
	// ErrStaleFence is [Guard.Write]'s refusal of a write with an old fence.
	ErrStaleFence = errors.New("dlock: stale fencing token")
	// ErrMaxHold means a lease reached its max hold ([MaxHold]).
	ErrMaxHold = errors.New("dlock: max hold reached")
	// ErrClosed is an acquisition's error after [Client.Close].
	ErrClosed = errors.New("dlock: client closed")
)

// NotAcquiredError is the cause of an acquisition refused because the name is
// held; get it with errors.As. For a semaphore or read-write lock, Holder and
// Meta are "" and TTL is the soonest hold's.
type NotAcquiredError struct {
	Name    string        // the name, or AcquireAll's part, not taken
	Holder  string        // the holder's token, or reentrant owner ID; "" if unknown
	Meta    string        // the holder's metadata; "" if none or unknown
	TTL     time.Duration // the holder's remaining lease; -1 if unknown
	Permits int           // a semaphore's N as asked; 0 otherwise

	say func(*NotAcquiredError) string // its text, as its kind says it (nil: held by another holder)
}

// Error says who holds the lock.
func (e *NotAcquiredError) Error() string {
	if e.say != nil {
		return e.say(e)
	}
	return heldBy("held by another holder", e.Meta)
}

// heldBy is a refusal that says by whom the lock is held (by), and the
// holder's metadata, if any.
func heldBy(by, meta string) string {
	if meta == "" {
		return by
	}
	return by + ", " + strconv.Quote(meta)
}

// Unwrap returns ErrNotAcquired.
func (e *NotAcquiredError) Unwrap() error { return ErrNotAcquired }

// refusal is the NotAcquiredError of an attempt of name that Redis refused
// with g.
func (k *kind) refusal(name string, g backend.Grant) *NotAcquiredError {
	e := &NotAcquiredError{Name: name, Holder: g.Holder, Meta: metaOf(g.Holder), TTL: g.PTTL}
	if k.refused != nil {
		k.refused(e, g)
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
func (k *kind) notAcquired(name string, e *NotAcquiredError) error {
	return opError(k.acquireOp, name, backend.Because(ErrNotAcquired, e.Error(), e))
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
	return opError(op, name, backend.Because(ErrNotAcquired, withLast(detail, &errs, last), errs...))
}

// waitedOut is the error of an acquisition (op, see acquireOp) whose wait
// limit (MaxWait, d) ran out before it took the lock while its context
// lives: it matches ErrNotAcquired and the errors of the last attempt, not
// the context's. all says that d was the limit of a whole AcquireAll,
// which was waiting for name.
func waitedOut(op, name string, d time.Duration, all bool, last ...error) error {
	var errs []error
	limit := "MaxWait"
	if all {
		limit = "MaxWait, for all the names together"
	}
	detail := withLast(fmt.Sprintf("waited %v (%s)", d, limit), &errs, last)
	return opError(op, name, backend.Because(ErrNotAcquired, detail, errs...))
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
	return &endedError{fn: ferr, end: rerr}
}

// endedError is joinEnded's error: one line, fn's text and end's.
type endedError struct{ fn, end error }

func (e *endedError) Error() string {
	sep := "; "
	if errors.Is(e.fn, context.Canceled) && errors.Is(e.end, ErrNotHeld) {
		sep = ": " // fn gave up because its context was cancelled, by the loss
	}
	line := func(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
	return line(e.fn) + sep + line(e.end)
}

func (e *endedError) Unwrap() []error { return []error{e.fn, e.end} }

// publicErr returns an error from the backend as the package returns it.
// The backend has sentinel errors of its own; an error matching one of
// them is given back as one that matches the package's sentinel of the same
// meaning too (ErrNotAcquired, ErrWrongType, ErrReplicaAck), with the same
// text, and a backend's QuorumError found in it is seen as a QuorumError.
// It is applied to every result of the backend (publicBackend), so the
// rest of the package and its callers see the package's errors only.
func publicErr(err error) error {
	if err == nil {
		return nil
	}
	if qe, ok := err.(*backend.QuorumError); ok {
		return publicQuorum(qe)
	}
	if _, ok := err.(*publicError); ok {
		return err
	}
	for _, s := range sentinels {
		if errors.Is(err, s.backend) {
			return &publicError{err}
		}
	}
	if _, ok := errors.AsType[*backend.QuorumError](err); ok {
		return &publicError{err}
	}
	return err
}

// sentinels pairs the package's sentinel errors with the backend's.
var sentinels = [...]struct{ public, backend error }{
	{ErrNotAcquired, backend.ErrNotAcquired},
	{ErrWrongType, backend.ErrWrongType},
	{ErrReplicaAck, backend.ErrReplicaAck},
	{ErrInvalid, backend.ErrInvalid},
}

// publicQuorum is the QuorumError of the backend's qe, its nodes' errors
// made public.
func publicQuorum(qe *backend.QuorumError) *QuorumError {
	nodes := make([]error, len(qe.Nodes))
	for i, err := range qe.Nodes {
		nodes[i] = publicErr(err)
	}
	return &QuorumError{Op: qe.Op, Held: qe.Held, Need: qe.Need, Nodes: nodes}
}

// publicError is a backend error that matches the package's sentinels for
// the backend's it matches, and that errors.As finds a QuorumError in
// where it holds a backend's one. Its text is the backend error's.
type publicError struct{ err error }

func (e *publicError) Error() string { return e.err.Error() }
func (e *publicError) Unwrap() error { return e.err }

func (e *publicError) Is(target error) bool {
	for _, s := range sentinels {
		if target == s.public {
			return errors.Is(e.err, s.backend)
		}
	}
	return false
}

func (e *publicError) As(target any) bool {
	p, ok := target.(**QuorumError)
	if !ok {
		return false
	}
	qe, ok := errors.AsType[*backend.QuorumError](e.err)
	if ok {
		*p = publicQuorum(qe)
	}
	return ok
}

// publicBackend is the backend as the Client sees it: every error it
// returns made public with publicErr.
type publicBackend struct{ b backend.Backend }

func (p publicBackend) Acquire(ctx context.Context, c *backend.Claim, ttl time.Duration, queue bool) (backend.Grant, error) {
	g, err := p.b.Acquire(ctx, c, ttl, queue)
	return g, publicErr(err)
}

func (p publicBackend) Extend(ctx context.Context, c *backend.Claim, ttl time.Duration, seq int64) (bool, error) {
	ok, err := p.b.Extend(ctx, c, ttl, seq)
	return ok, publicErr(err)
}

func (p publicBackend) Release(ctx context.Context, c *backend.Claim) (bool, error) {
	ok, err := p.b.Release(ctx, c)
	return ok, publicErr(err)
}

func (p publicBackend) Fence(ctx context.Context, c *backend.Claim) (int64, error) {
	f, err := p.b.Fence(ctx, c)
	return f, publicErr(err)
}

func (p publicBackend) Seq(ctx context.Context, c *backend.Claim) (int64, bool, error) {
	n, drives, err := p.b.Seq(ctx, c)
	return n, drives, publicErr(err)
}

func (p publicBackend) Inspect(ctx context.Context, k *backend.Keys) (backend.State, error) {
	st, err := p.b.Inspect(ctx, k)
	return st, publicErr(err)
}

func (p publicBackend) Prepare(ctx context.Context, c *backend.Claim) error {
	return publicErr(p.b.Prepare(ctx, c))
}

func (p publicBackend) Undo(ctx context.Context, c *backend.Claim) error {
	return publicErr(p.b.Undo(ctx, c))
}

func (p publicBackend) Force(ctx context.Context, k *backend.Keys) (bool, error) {
	ok, err := p.b.Force(ctx, k)
	return ok, publicErr(err)
}

func (p publicBackend) Scan(ctx context.Context, match string) ([]string, error) {
	keys, err := p.b.Scan(ctx, match)
	return keys, publicErr(err)
}

func (p publicBackend) Batches() (calls, writes uint64) { return p.b.Batches() }

func (p publicBackend) Drain(ctx context.Context) error { return p.b.Drain(ctx) }

func (p publicBackend) Carries(k backend.Kind) error { return p.b.Carries(k) }

func (p publicBackend) Op(ctx context.Context, op func(context.Context, backend.Node) error) error {
	return publicErr(p.b.Op(ctx, op))
}
