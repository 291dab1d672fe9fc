package dlock

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// quorumLocks is the kind of a quorum's own locks (NewRedlock): plain
// locks, whose waiters poll.
var quorumLocks = kind{slot: newMode("quorum"), lease: backend.PlainLock, waits: polls{}, acquireOp: "acquire", releaseOp: "release", holders: tokens{}}

// NewRedlock returns a Client whose locks are held on a majority of N masters
// (docs/deployments.md), waiting up to nodeTimeout on each (0: TTL/50, ≥ 5ms).
// Locks wait unfairly; other kinds, WithReplicaAck and WithoutScripts are
// [ErrInvalid]. A node without persistence must stay down a TTL after a
// restart.
func NewRedlock(nodes []redis.UniversalClient, nodeTimeout time.Duration, opts ...Option) (*Client, error) {
	return newRedlock("NewRedlock", nodes, newNode, nodeTimeout, opts)
}

// NewRedlockFrom is NewRedlock over drivers (see [NewFrom]).
func NewRedlockFrom(nodes []driver.Conn, nodeTimeout time.Duration, opts ...Option) (*Client, error) {
	return newRedlock("NewRedlockFrom", nodes, nodeFrom, nodeTimeout, opts)
}

// newRedlock is NewRedlock over nodes, each made by node; fn names the
// caller in errors.
func newRedlock[N any](fn string, nodes []N, node func(N, *options) (backend.Node, *pubsub.Hub), nodeTimeout time.Duration, opts []Option) (*Client, error) {
	nilNode := slices.IndexFunc(nodes, func(n N) bool { return isNil(n) })
	switch {
	case len(nodes) == 0:
		return nil, fmt.Errorf("%w: %s: no nodes", ErrInvalid, fn)
	case nilNode >= 0:
		return nil, fmt.Errorf("%w: %s: node %d is nil", ErrInvalid, fn, nilNode)
	case nodeTimeout < 0:
		return nil, fmt.Errorf("%w: %s: node timeout %v: must be positive, or 0 for TTL/50", ErrInvalid, fn, nodeTimeout)
	}
	o := apply(opts)
	o.nodeTimeout = cmp.Or(nodeTimeout, max(o.lease.ttl/50, 5*time.Millisecond))
	o.invalidIf(o.replicas > 0, "WithReplicaAck(%d, %v): does not apply to a quorum of independent masters", o.replicas, o.ackTimeout)
	o.invalidIf(o.durable > 0, "WithDurableGrants(%v): not available over a quorum", o.durable)
	// (as a call's LeaseTTL is checked: see leaseFor)
	o.invalidIf(o.lease.ttl <= o.nodeTimeout, "LeaseTTL(%v): over a quorum the TTL must be above the per-node timeout (%v)", o.lease.ttl, o.nodeTimeout)
	return build(nodes, node, o)
}
