package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/pubsub"
	"github.com/dlockio/dlock/internal/script"
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
// clocks agree to within a day. An acquire is one
// round (a reentrant lock's, whose fence comes with its first hold, two).
//
// Fair waiting and reentrant locks are not available over a quorum: the
// Client waits unfairly (with the backoff of WithBackoff).
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
	}
	if o.err != nil {
		return nil, o.err
	}
	o.fair = false
	if o.nodeTimeout == 0 {
		o.nodeTimeout = max(o.ttl/50, 5*time.Millisecond)
	}
	q := &quorum{timeout: o.nodeTimeout}
	var hubs []*pubsub.Hub
	for _, rdb := range nodes {
		n, h := newNode(rdb, &o)
		n.fenceMS = quorumFenceWindow.Milliseconds() // see fenceWindow
		q.nodes = append(q.nodes, n)
		hubs = append(hubs, h)
	}
	return &Client{b: q, hubs: hubs, opts: o, id: newToken()[:11]}, nil
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

// Unwrap returns the nodes' errors.
func (e *QuorumError) Unwrap() []error { return e.Nodes }

// Is makes a QuorumError match ErrNotAcquired.
func (e *QuorumError) Is(target error) bool { return target == ErrNotAcquired }

var (
	errRefused  = errors.New("held by another owner")
	errNoAnswer = errors.New("no answer within the node timeout")
)

// quorum is the backend of a Redlock Client.
type quorum struct {
	nodes   []node
	timeout time.Duration
}

func (q *quorum) need() int { return len(q.nodes)/2 + 1 }

// nodeResult is one node's answer.
type nodeResult[T any] struct {
	v   T
	err error
	ok  bool // answered in time
}

// fanOut runs fn on every node at once and returns what answered within the
// per-node timeout, or as soon as decided reports that the answers so far
// settle the outcome, or when ctx ends. Goroutines of nodes not waited for finish on their own
// (bounded by the client's read timeout): a late release or extension still
// takes effect; their results are dropped.
func fanOut[T any](ctx context.Context, q *quorum, fn func(context.Context, node) (T, error), decided func([]nodeResult[T]) bool) []nodeResult[T] {
	type indexed struct {
		i int
		r nodeResult[T]
	}
	ch := make(chan indexed, len(q.nodes))
	done := ctx.Done() // the caller stops waiting when its ctx ends; the nodes' calls go on
	// Each node's call is sent and runs to its end whatever the wait: a
	// call cancelled when the outcome is decided, or at the per-node
	// timeout, could be dropped unsent from the node's pipeline (a grant
	// missing from a node, a release never made). go-redis's timeouts bound
	// it.
	nctx := context.WithoutCancel(ctx)
	for i, n := range q.nodes {
		go func() {
			v, err := fn(nctx, n)
			ch <- indexed{i, nodeResult[T]{v: v, err: err, ok: true}}
		}()
	}
	out := make([]nodeResult[T], len(q.nodes))
	timer := time.NewTimer(q.timeout)
	defer timer.Stop()
	for range q.nodes {
		select {
		case r := <-ch:
			out[r.i] = r.r
			if decided != nil && decided(out) {
				return out
			}
		case <-timer.C:
			return out
		case <-done:
			return out
		}
	}
	return out
}

// majority returns a decided func for fanOut: the outcome is settled once
// a majority said yes, or once so many answered no that a majority cannot.
// A node that failed is not an answer: the others are still waited for.
func majority[T any](q *quorum, yes func(T) bool) func([]nodeResult[T]) bool {
	return func(rs []nodeResult[T]) bool {
		y, n := 0, 0
		for _, r := range rs {
			switch {
			case !r.ok || r.err != nil:
			case yes(r.v):
				y++
			default:
				n++
			}
		}
		return y >= q.need() || n > len(q.nodes)-q.need()
	}
}

// tally counts the nodes that said yes and that answered at all, and
// records per node why it did not say yes (nil for those that did) in errs.
func tally[T any](res []nodeResult[T], yes func(T) bool, errs []error) (yeses, answered int) {
	for i, r := range res {
		switch {
		case !r.ok:
			errs[i] = errNoAnswer
		case r.err != nil:
			errs[i] = r.err
		case yes(r.v):
			errs[i] = nil
			yeses++
			answered++
		default:
			errs[i] = errRefused
			answered++
		}
	}
	return yeses, answered
}

func (q *quorum) acquire(ctx context.Context, c *claim, ttl time.Duration, _ bool) (grant, error) {
	res := fanOut(ctx, q, func(ctx context.Context, n node) (grant, error) {
		return n.acquire(ctx, c, ttl, false)
	}, majority(q, func(g grant) bool { return g.held }))
	v := q.count(res)
	if v.held >= q.need() && v.atFence < q.need() {
		// A reentrant lock's fence, issued with its first hold: write it
		// back to a majority, so that any later majority (which shares a
		// node with this one) issues a higher one. A plain lock's fence is
		// issued when asked for (fence), so its acquire is one round.
		ok, errs := q.raise(ctx, c, v.fence)
		for i, err := range errs {
			if err != nil {
				v.errs[i] = err
			}
		}
		v.held = min(v.held, ok)
	}
	if v.held >= q.need() {
		return grant{held: true, fence: v.fence}, nil
	}
	// The caller undoes what may have been granted, on every node: nothing
	// to undo if no node granted it and every other one refused, or surely
	// never got the request.
	refused, unknown := 0, 0
	for i, r := range res {
		switch {
		case v.errs[i] == errRefused:
			refused++
		case !r.ok || (r.err != nil && r.v.undo):
			unknown++
		}
	}
	undo := v.held > 0 || unknown > 0
	if v.held+refused >= q.need() {
		return grant{pttl: v.pttl, undo: undo}, nil // a majority answered: taken, or a split vote; wait
	}
	return grant{undo: undo}, &QuorumError{Op: "acquire", Held: v.held, Need: q.need(), Nodes: v.errs}
}

// votes is the count of a quorum acquire's answers.
type votes struct {
	held    int           // nodes that granted it
	fence   int64         // the highest fence they gave (reentrant locks)
	atFence int           // granting nodes whose counter is already at that fence
	pttl    time.Duration // the longest remaining lease of the refusing nodes' holders
	errs    []error       // per node: nil if it granted, why not otherwise
}

func (q *quorum) count(res []nodeResult[grant]) votes {
	v := votes{pttl: -1, errs: make([]error, len(res))}
	for i, r := range res {
		switch {
		case !r.ok:
			v.errs[i] = errNoAnswer
		case r.err != nil:
			v.errs[i] = r.err
		case r.v.held:
			v.held++
			v.fence = max(v.fence, r.v.fence)
		default:
			v.errs[i] = errRefused
			v.pttl = max(v.pttl, r.v.pttl)
		}
	}
	for _, r := range res {
		if r.ok && r.err == nil && r.v.held && r.v.fence == v.fence {
			v.atFence++
		}
	}
	return v
}

// raise writes fence back to every node's counter where the lease c still
// holds the lock, and returns on how many it did and why not on the others.
func (q *quorum) raise(ctx context.Context, c *claim, fence int64) (int, []error) {
	yes := func(v int64) bool { return v == 1 }
	res := fanOut(ctx, q, func(ctx context.Context, n node) (int64, error) {
		v, err := script.RaiseFence.Run(ctx, n.rdb, []string{c.lock, c.fence}, fence, c.holderID(), n.fenceMS).Int64()
		return v, redisErr(err)
	}, majority(q, yes))
	errs := make([]error, len(res))
	ok, _ := tally(res, yes, errs)
	return ok, errs
}

// fence issues the lease's fence on every node and takes the highest that
// a majority gave, then writes it back to a majority (raise): any later
// majority shares a node with that one and issues a higher fence.
func (q *quorum) fence(ctx context.Context, c *claim) (int64, error) {
	yes := func(f int64) bool { return f > 0 }
	res := fanOut(ctx, q, func(ctx context.Context, n node) (int64, error) {
		return n.fence(ctx, c)
	}, majority(q, yes))
	errs := make([]error, len(res))
	held, answered := tally(res, yes, errs)
	if held < q.need() {
		if answered-held > len(q.nodes)-q.need() {
			return 0, nil // so many said "not ours" that no majority holds it
		}
		return 0, &QuorumError{Op: "fence", Held: held, Need: q.need(), Nodes: errs}
	}
	var fence int64
	for _, r := range res {
		if r.ok && r.err == nil {
			fence = max(fence, r.v)
		}
	}
	ok, errs := q.raise(ctx, c, fence)
	if ok < q.need() {
		return 0, &QuorumError{Op: "fence", Held: ok, Need: q.need(), Nodes: errs}
	}
	return fence, nil
}

func (q *quorum) extend(ctx context.Context, c *claim, ttl time.Duration, seq int64) (bool, error) {
	res := fanOut(ctx, q, func(ctx context.Context, n node) (bool, error) { return n.extend(ctx, c, ttl, seq) },
		majority(q, func(ok bool) bool { return ok }))
	errs := make([]error, len(res))
	yes, answered := tally(res, func(ok bool) bool { return ok }, errs)
	switch {
	case yes >= q.need():
		return true, nil
	case answered-yes > len(q.nodes)-q.need():
		return false, nil // a majority no longer has our token: lost for good
	}
	return false, &QuorumError{Op: "extend", Held: yes, Need: q.need(), Nodes: errs}
}

func (q *quorum) release(ctx context.Context, c *claim) (bool, error) {
	// Every node is waited for (up to the per-node timeout): a release still
	// in flight on a node would make that node refuse the next acquisition.
	res := fanOut(ctx, q, func(ctx context.Context, n node) (bool, error) { return n.release(ctx, c) }, nil)
	errs := make([]error, len(res))
	yes, answered := tally(res, func(ok bool) bool { return ok }, errs)
	// The lease was exclusive only while no majority could be won by
	// another client. A node that answers that our token is gone (it came
	// back empty, or never granted it) can grant it to someone else; a node
	// that does not answer is down or cut off, and still holds the lease
	// until it expires (a node must stay down for a TTL after a crash, see
	// NewRedlock). So the lease counts as lost when so many nodes answered
	// "not ours" that the rest cannot make a majority, and as released when
	// the others could and at least one node confirmed it.
	switch {
	case answered-yes > len(q.nodes)-q.need():
		return false, nil
	case yes > 0:
		return true, nil
	}
	return false, &QuorumError{Op: "release", Held: yes, Need: q.need(), Nodes: errs}
}

// undo undoes the lease on every node (see node.undo); a node that does
// not answer, or fails, makes it an error, so that the undo is tried again.
func (q *quorum) undo(ctx context.Context, c *claim) error {
	res := fanOut(ctx, q, func(ctx context.Context, n node) (struct{}, error) { return struct{}{}, n.undo(ctx, c) }, nil)
	return nodeErrors(res)
}

// force force-releases the lock on every node (see node.force).
func (q *quorum) force(ctx context.Context, k *keys) (bool, error) {
	res := fanOut(ctx, q, func(ctx context.Context, n node) (bool, error) { return n.force(ctx, k) }, nil)
	deleted := false
	for _, r := range res {
		deleted = deleted || r.v
	}
	return deleted, nodeErrors(res)
}

// nodeErrors joins the errors of the nodes that failed or did not answer,
// each named by its index.
func nodeErrors[T any](res []nodeResult[T]) error {
	var errs []error
	for i, r := range res {
		switch {
		case !r.ok:
			errs = append(errs, fmt.Errorf("node %d: %w", i, errNoAnswer))
		case r.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
		}
	}
	return errors.Join(errs...)
}

// scan gathers the matching keys of every node that answers; it fails if
// too few answered for a majority, whose locks could then be missed.
// A walk of the keyspace takes as long as it takes: it is bounded by ctx,
// not by the per-node timeout.
func (q *quorum) scan(ctx context.Context, match string) ([]string, error) {
	found := make([][]string, len(q.nodes))
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Go(func() { found[i], errs[i] = n.scan(ctx, match) })
	}
	wg.Wait()
	var keys []string
	answered := 0
	for i, err := range errs {
		if err == nil {
			answered++
			keys = append(keys, found[i]...)
		}
	}
	if answered < q.need() {
		return nil, &QuorumError{Op: "list", Held: answered, Need: q.need(), Nodes: errs}
	}
	return keys, nil
}

// inspect reports what a majority of nodes agree on: the holder, the
// shortest remaining lease among them, and the highest fence.
func (q *quorum) inspect(ctx context.Context, k *keys) (Info, error) {
	res := fanOut(ctx, q, func(ctx context.Context, n node) (Info, error) { return n.inspect(ctx, k) }, nil)
	votes := map[string]int{}
	var out Info
	answered := 0
	for _, r := range res {
		if !r.ok || r.err != nil {
			continue
		}
		answered++
		out.Key, out.Fence = r.v.Key, max(out.Fence, r.v.Fence)
		if r.v.Held {
			votes[r.v.Token]++
		}
	}
	if answered < q.need() {
		return Info{}, fmt.Errorf("%d of %d nodes answered, %d needed", answered, len(q.nodes), q.need())
	}
	out.Type = "none"
	for token, n := range votes {
		if n >= q.need() {
			out.Held, out.Token, out.Type = true, token, "string"
		}
	}
	if out.Held {
		out.TTL = -1
		for _, r := range res {
			if r.ok && r.err == nil && r.v.Token == out.Token && r.v.TTL >= 0 && (out.TTL < 0 || r.v.TTL < out.TTL) {
				out.TTL = r.v.TTL
			}
		}
	}
	return out, nil
}
