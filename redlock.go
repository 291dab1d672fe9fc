package dlock

import (
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// NewRedlock returns a Client whose locks are held on a majority of N
// independent Redis masters (the Redlock algorithm): nodes must not be
// replicas of each other. N should be odd, 3 or 5 typically. The Client and
// its Locks work as for New: waiting, the watchdog, Do, fences.
//
// An acquisition runs on all nodes at once and counts the nodes that said
// yes within the per-node timeout (WithNodeTimeout); it is held when a
// majority (N/2+1) did and time is left: the validity is TTL − elapsed −
// drift. Otherwise it is undone on every node, including those that did not
// answer. Extend needs a majority too; Release goes to every node. Nodes that
// do not answer cost at most the per-node timeout, never the TTL: the Client
// waits for each node in its own goroutine and stops waiting at the
// deadline, whatever the go-redis client's own timeouts are. Release counts
// as done if any node still had the lease (the others lost it, died, or
// will expire it); it reports ErrNotHeld if no node that answered had it.
//
// A node without persistence that restarts must stay down for a TTL before
// it rejoins: back at once and empty, it could grant a lease a majority
// still holds elsewhere. Run nodes with appendfsync always, or restart them
// late.
//
// Fences stay strictly increasing across nodes: Lock.Fence takes the
// highest fence of a majority where the lease holds the lock and writes it
// back to a majority before returning it, so every later majority, which
// shares a node with this one, issues a higher one — while the counters
// live, a day after the last fence; after that, as long as the nodes'
// clocks agree to within a day. An acquire is one round on every node;
// Lock.Fence, when asked for, two (read a majority's fences, then write
// the highest back).
//
// Fair waiting, reentrant locks, semaphores, read-write locks and
// elections are not available over a quorum: the Client waits unfairly
// (with the backoff of WithBackoff), NewRedlock refuses WithReentrant(true),
// and Client.Semaphore, Client.RWMutex and Client.Election refuse it (see
// there why).
//
// NewRedlock checks its arguments, and a Client it returns is valid: no
// nodes, a nil node, an invalid option, and an option that does not apply
// to a quorum are reported here, with an error that wraps ErrInvalid and
// names the option. Options that do not apply: WithReentrant(true),
// WithFair(true) and WithReplicaAck with n > 0.
func NewRedlock(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	switch {
	case len(nodes) == 0:
		return nil, fmt.Errorf("%w: NewRedlock: no nodes", ErrInvalid)
	case slices.Contains(nodes, nil):
		return nil, fmt.Errorf("%w: NewRedlock: node %d is nil", ErrInvalid, slices.Index(nodes, nil))
	}
	o := apply(opts)
	switch {
	case o.err != nil:
	case o.reentrant:
		o.invalid("WithReentrant(true): reentrant locks are not available over a quorum")
	case o.fairSet && o.fair:
		o.invalid("WithFair(true): a quorum waits unfairly")
	case o.replicas > 0:
		o.invalid("WithReplicaAck(%d, %v): does not apply to a quorum of independent masters", o.replicas, o.ackTimeout)
	case o.noScripts:
		o.invalid("WithoutScripts(): a quorum (NewRedlock) needs scripts")
	}
	if o.err != nil {
		return nil, o.err
	}
	o.fair = false
	if o.nodeTimeout == 0 {
		o.nodeTimeout = max(o.ttl/50, 5*time.Millisecond)
	}
	var (
		ns   []backend.Node
		hubs []*pubsub.Hub
	)
	for _, rdb := range nodes {
		n, h := newNode(rdb, &o)
		ns = append(ns, n)
		hubs = append(hubs, h)
	}
	return newClient(backend.NewQuorum(ns, o.nodeTimeout), hubs, o, "quorum"), nil
}

// WithNodeTimeout sets how long a quorum Client (NewRedlock) waits for each
// node's answer. The default is TTL/50 (200ms for the default TTL), at least
// 5ms. It must be positive. It applies to NewRedlock only: New refuses it
// (ErrInvalid).
func WithNodeTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("WithNodeTimeout(%v): the timeout must be positive", d)
			return
		}
		o.nodeTimeout, o.nodeTimeoutSet = d, true
	}
}

// QuorumError reports an operation that did not reach a majority of nodes.
// It matches ErrNotAcquired with errors.Is, and unwraps to the nodes' errors.
// Its text is the tally and the nodes' errors; the error that carries it
// names the operation and the lock.
type QuorumError struct {
	Op    string  // "acquire", "extend", "release" or "fence"
	Held  int     // nodes that granted the operation
	Need  int     // the majority
	Nodes []error // per node: nil if it granted, the error or refusal otherwise
}

func (e *QuorumError) Error() string { return (*backend.QuorumError)(e).Error() }

// Unwrap returns the nodes' errors.
func (e *QuorumError) Unwrap() []error { return e.Nodes }

// Is makes a QuorumError match ErrNotAcquired.
func (e *QuorumError) Is(target error) bool { return target == ErrNotAcquired }

// public returns err from the backend as the Client returns it: a
// backend.QuorumError becomes a QuorumError (the same fields).
func public(err error) error {
	if qe, ok := err.(*backend.QuorumError); ok {
		return (*QuorumError)(qe)
	}
	return err
}
