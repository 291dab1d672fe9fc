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
// independent Redis masters (Redlock, N odd: docs/deployments.md), waiting at
// most nodeTimeout for each (0: TTL/50, ≥ 5ms); an acquisition short of a
// majority is undone everywhere. A node without persistence must stay down a
// TTL after a restart. It waits unfairly; other kinds, WithReplicaAck(n > 0),
// WithoutScripts and no nodes are [ErrInvalid].
func NewRedlock(nodes []redis.UniversalClient, nodeTimeout time.Duration, opts ...Option) (*Client, error) {
	switch {
	case len(nodes) == 0:
		return nil, fmt.Errorf("%w: NewRedlock: no nodes", ErrInvalid)
	case slices.Contains(nodes, nil):
		return nil, fmt.Errorf("%w: NewRedlock: node %d is nil", ErrInvalid, slices.Index(nodes, nil))
	case nodeTimeout < 0:
		return nil, fmt.Errorf("%w: NewRedlock: node timeout %v: must be positive, or 0 for TTL/50", ErrInvalid, nodeTimeout)
	}
	o := apply(opts)
	switch {
	case o.err != nil:
	case o.reentrant:
		o.invalid("WithReentrant(true): reentrant locks are not available over a quorum")
	case o.replicas > 0:
		o.invalid("WithReplicaAck(%d, %v): does not apply to a quorum of independent masters", o.replicas, o.ackTimeout)
	case o.noScripts:
		o.invalid("WithoutScripts(): a quorum (NewRedlock) needs scripts")
	}
	if o.err != nil {
		return nil, o.err
	}
	o.fair = false
	o.nodeTimeout = nodeTimeout
	if o.nodeTimeout == 0 {
		o.nodeTimeout = max(o.lease.ttl/50, 5*time.Millisecond)
	}
	if o.lease.ttl <= o.nodeTimeout { // as a call's LeaseTTL is checked (leaseFor)
		return nil, fmt.Errorf("%w: LeaseTTL(%v): over a quorum the TTL must be above the per-node timeout (%v)", ErrInvalid, o.lease.ttl, o.nodeTimeout)
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
	return newClient(backend.NewQuorum(ns, o.nodeTimeout), hubs, o, modeQuorum), nil
}

// QuorumError reports an operation that did not reach a majority of nodes. It
// matches [ErrNotAcquired] and unwraps to the nodes' errors.
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
