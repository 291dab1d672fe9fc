package backend

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrSuperseded reports an extension that found a newer one applied, which
// its Lock did not send (its own are one at a time): another Lock resumed
// the lease and drives it now. The extension changed nothing.
var ErrSuperseded = errors.New("another Lock resumed the lease and extends it")

// The sentinel errors that the backend's errors match: the root package
// exports them as they are, with their documentation.
var (
	ErrNotAcquired = errors.New("dlock: not acquired")
	ErrWrongType   = errors.New("dlock: lock key holds a value of another type")
	ErrReplicaAck  = errors.New("dlock: not acknowledged by enough replicas")
	ErrNotDurable  = errors.New("dlock: not made durable")
	ErrInvalid     = errors.New("dlock: invalid argument")
)

// HeldByAnother is how a refusal that names no holder reads: a quorum
// node's no (errRefused), and the root's NotAcquiredError whose kind adds
// no words of its own.
const HeldByAnother = "held by another holder"

// detailed is an error with a text of its own that errors.Is and errors.As
// see through to errs.
type detailed struct {
	text string
	errs []error
}

func (e *detailed) Error() string   { return e.text }
func (e *detailed) Unwrap() []error { return e.errs }

// Detailed returns an error that reads text and matches errs.
func Detailed(text string, errs ...error) error { return &detailed{text, errs} }

// Because returns a cause that matches the sentinel kind (and errs) and
// reads "<kind without its dlock: prefix>: <detail>".
func Because(kind error, detail string, errs ...error) error {
	return Detailed(strings.TrimPrefix(kind.Error(), "dlock: ")+": "+detail, append([]error{kind}, errs...)...)
}

// QuorumError reports an operation that did not reach a majority of nodes.
// An acquisition's (Op "acquire" or "resume") matches ErrNotAcquired with
// errors.Is; each unwraps to the nodes' errors.
// Its text is the tally and the nodes' errors; the error that carries it
// names the operation and the lock. The root package exports it as it is.
type QuorumError struct {
	Op    string  // "acquire", "extend", "release", "fence", "resume", "list" or "inspect"
	Held  int     // nodes that granted the operation
	Need  int     // the majority
	Nodes []error // per node: nil if it granted, the error or refusal otherwise
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d nodes granted, %d needed", e.Held, len(e.Nodes), e.Need)
	for i, err := range e.Nodes {
		if err != nil {
			fmt.Fprintf(&b, "; node %d: %v", i, err)
		}
	}
	return b.String()
}

// Unwrap returns the nodes' errors, but those of nodes whose client was
// closed only once so many were that a majority can no longer answer
// (ClosedOut): a minority's closed client does not make the error match
// ErrClosed, as a caller that stops on it would stop while the Client
// still works. Nodes keeps every node's error.
func (e *QuorumError) Unwrap() []error {
	if e.closedOut() || !slices.ContainsFunc(e.Nodes, closed) {
		return e.Nodes
	}
	return slices.DeleteFunc(slices.Clone(e.Nodes), closed)
}

// ClosedOut reports whether err is a QuorumError with so many nodes whose
// client was closed that a majority can no longer answer.
func ClosedOut(err error) bool {
	q, ok := errors.AsType[*QuorumError](err)
	return ok && q.closedOut()
}

func (e *QuorumError) closedOut() bool {
	n := 0
	for _, err := range e.Nodes {
		if closed(err) {
			n++
		}
	}
	return n > len(e.Nodes)-e.Need
}

// Is makes an acquisition's QuorumError match ErrNotAcquired: the lock was
// not taken. Another operation's says only that no majority answered.
func (e *QuorumError) Is(target error) bool {
	return target == ErrNotAcquired && (e.Op == "acquire" || e.Op == "resume")
}
