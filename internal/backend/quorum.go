package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/script"
)

// Why a node has no answer in a fanOut's results (nodeResult.err of a
// result that is not ok): the node timeout passed, the answers of the
// others settled the outcome first, or the caller's context ended.
var (
	errRefused   = errors.New("held by another holder")
	errNoAnswer  = errors.New("no answer within the node timeout")
	errNotWaited = errors.New("not waited for: the other nodes' answers settled the outcome")
	errCutShort  = errors.New("no answer before the call's context ended")
)

// Quorum is the backend of a Redlock Client: each lock on a majority of
// independent nodes.
type Quorum struct {
	nodes   []Node
	timeout time.Duration
	late    Tracker // the node calls that fanOut stopped waiting for
}

// NewQuorum returns the backend over nodes that waits for each node's
// answer up to timeout. Its nodes' fence counters live quorumFenceWindow
// (see fenceWindow).
func NewQuorum(nodes []Node, timeout time.Duration) *Quorum {
	q := &Quorum{nodes: slices.Clone(nodes), timeout: timeout}
	for i := range q.nodes {
		q.nodes[i].setFenceWindow(quorumFenceWindow)
		q.nodes[i].extra = setOf(script.RaiseFence) // Fence writes back
	}
	return q
}

func (q *Quorum) need() int { return len(q.nodes)/2 + 1 }

// nodeResult is one node's answer.
type nodeResult[T any] struct {
	v   T
	err error // the node's error; when not ok, why there is no answer (errNoAnswer, errNotWaited, errCutShort)
	ok  bool  // answered in time
}

// fanOut runs fn on every node at once and returns what answered within the
// per-node timeout, or as soon as decided reports that the answers so far
// settle the outcome, or when ctx ends; each node without an answer then
// says which of the three it was (its result's err). Goroutines of nodes
// not waited for finish on their own (bounded by the client's read
// timeout): a late release or extension still takes effect; their results
// are dropped.
func fanOut[T any](ctx context.Context, q *Quorum, fn func(context.Context, Node) (T, error), decided func([]nodeResult[T]) bool) []nodeResult[T] {
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
		q.late.Go(func() {
			v, err := fn(nctx, n)
			ch <- indexed{i, nodeResult[T]{v: v, err: err, ok: true}}
		})
	}
	out := make([]nodeResult[T], len(q.nodes))
	unanswered := func(why error) []nodeResult[T] {
		for i := range out {
			if !out[i].ok {
				out[i].err = why
			}
		}
		return out
	}
	timer := time.NewTimer(q.timeout)
	defer timer.Stop()
	for range q.nodes {
		select {
		case r := <-ch:
			out[r.i] = r.r
			if decided != nil && decided(out) {
				return unanswered(errNotWaited)
			}
		case <-timer.C:
			return unanswered(errNoAnswer)
		case <-done:
			return unanswered(errCutShort)
		}
	}
	return out
}

// majority returns a decided func for fanOut: the outcome is settled once
// a majority said yes, or once so many answered no that a majority cannot
// (more than N-need: with an even N that is N/2, one fewer than a
// majority). A node that failed is not an answer: the others are still
// waited for.
func majority[T any](q *Quorum, yes func(T) bool) func([]nodeResult[T]) bool {
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
// returns per node why it did not say yes (nil for those that did).
func tally[T any](res []nodeResult[T], yes func(T) bool) (yeses, answered int, errs []error) {
	errs = make([]error, len(res))
	for i, r := range res {
		switch {
		case r.err != nil: // (a node without an answer says why)
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
	return yeses, answered, errs
}

// Carries serves plain locks only (see Backend).
func (q *Quorum) Carries(k Kind) error { return plainOnly(k, ErrOverQuorum) }

// Acquire takes the lock on a majority. A quorum carries plain locks
// only: a claim of another Kind is refused, unsent. A waiter (queue)
// queues on no node, but asks each to announce the release (acquire.lua).
func (q *Quorum) Acquire(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	if err := q.Carries(c.Kind); err != nil {
		return Grant{}, NotSent(err)
	}
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (Grant, error) {
		return n.Acquire(ctx, c, ttl, queue)
	}, majority(q, func(g Grant) bool { return g.Held }))
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
		return Grant{Held: true, Fence: v.fence}, nil
	}
	// The caller undoes what may have been granted, on every node: nothing
	// to undo if no node granted it and every other one refused, or surely
	// never got the request.
	refused, unknown := 0, 0
	for i, r := range res {
		switch {
		case v.errs[i] == errRefused:
			refused++
		case !r.ok || (r.err != nil && r.v.Undo):
			unknown++
		}
	}
	undo := v.held > 0 || unknown > 0
	if v.held+refused >= q.need() || refused > len(q.nodes)-q.need() {
		// A majority answered: taken, or a split vote; or so many refused
		// that no majority can grant it (with an even N, N/2 refusals,
		// which settle the outcome before a majority has answered): the
		// lock is held; wait.
		return Grant{PTTL: v.pttl, Holder: v.holder, Undo: undo}, nil
	}
	return Grant{Undo: undo}, &QuorumError{Op: "acquire", Held: v.held, Need: q.need(), Nodes: v.errs}
}

// votes is the count of a quorum acquire's answers.
type votes struct {
	held    int           // nodes that granted it
	fence   int64         // the highest fence they gave (reentrant locks)
	atFence int           // granting nodes whose counter is already at that fence
	pttl    time.Duration // the longest remaining lease of the refusing nodes' holders
	holder  string        // the holder most refusing nodes named
	errs    []error       // per node: nil if it granted, why not otherwise
}

func (q *Quorum) count(res []nodeResult[Grant]) votes {
	v := votes{pttl: -1}
	v.held, _, v.errs = tally(res, func(g Grant) bool { return g.Held })
	named := map[string]int{} // refusing nodes per holder
	for i, r := range res {
		switch v.errs[i] {
		case nil:
			v.fence = max(v.fence, r.v.Fence)
		case errRefused:
			v.pttl = max(v.pttl, r.v.PTTL)
			if named[r.v.Holder]++; named[r.v.Holder] > named[v.holder] {
				v.holder = r.v.Holder
			}
		}
	}
	for i, r := range res {
		if v.errs[i] == nil && r.v.Fence == v.fence {
			v.atFence++
		}
	}
	return v
}

// raise writes fence back to every node's counter where the lease c still
// holds the lock, and returns on how many it did and why not on the others.
func (q *Quorum) raise(ctx context.Context, c *Claim, fence int64) (int, []error) {
	yes := func(v int64) bool { return v == 1 }
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (int64, error) {
		v, err := n.run(ctx, script.RaiseFence, []string{c.Lock, c.Fence, c.Rev}, fence, c.HolderID(), n.fenceMS, c.Kind.shape().typ, c.Resumer).Int64()
		return v, RedisErr(err)
	}, majority(q, yes))
	ok, _, errs := tally(res, yes)
	return ok, errs
}

// Fence issues the lease's fence on every node and takes the highest that
// a majority gave, then writes it back to a majority (raise): any later
// majority shares a node with that one and issues a higher fence.
func (q *Quorum) Fence(ctx context.Context, c *Claim) (int64, error) {
	yes := func(a leaseAnswer[int64]) bool { return a.v > 0 }
	res := fanOut(ctx, q, unlessSuperseded(func(ctx context.Context, n Node) (int64, error) {
		return n.Fence(ctx, c)
	}), majority(q, yes))
	held, answered, errs := tally(res, yes)
	if held < q.need() {
		return 0, q.notHeld("fence", held, answered, supersededIn(res), errs)
	}
	var fence int64
	for _, r := range res {
		if r.ok && r.err == nil {
			fence = max(fence, r.v.v)
		}
	}
	ok, errs := q.raise(ctx, c, fence)
	if ok < q.need() {
		return 0, &QuorumError{Op: "fence", Held: ok, Need: q.need(), Nodes: errs}
	}
	return fence, nil
}

// Seq is the highest of a majority's answers: -1 only if a majority says
// the lease was ended. c no longer drives the lease if one of them says so
// (the majority the resume was applied on shares a node with it).
func (q *Quorum) Seq(ctx context.Context, c *Claim) (int64, bool, error) {
	type mark struct {
		seq    int64
		drives bool
	}
	all := func(mark) bool { return true }
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (mark, error) {
		seq, drives, err := n.Seq(ctx, c)
		return mark{seq, drives}, err
	}, majority(q, all))
	answered, _, errs := tally(res, all)
	if answered < q.need() {
		return 0, false, &QuorumError{Op: "resume", Held: answered, Need: q.need(), Nodes: errs}
	}
	var seq, ended int64
	drives := true
	for _, r := range res {
		if r.ok && r.err == nil {
			seq = max(seq, r.v.seq)
			drives = drives && r.v.drives
			if r.v.seq < 0 {
				ended++
			}
		}
	}
	if ended >= int64(q.need()) {
		return -1, drives, nil
	}
	return max(seq, 0), drives, nil
}

func (q *Quorum) Extend(ctx context.Context, c *Claim, ttl time.Duration, seq int64) (bool, error) {
	res := fanOut(ctx, q, unlessSuperseded(func(ctx context.Context, n Node) (bool, error) {
		return n.Extend(ctx, c, ttl, seq)
	}), majority(q, saidYes))
	yes, answered, errs := tally(res, saidYes)
	if yes >= q.need() {
		return true, nil
	}
	return false, q.notHeld("extend", yes, answered, supersededIn(res), errs)
}

// notHeld is the outcome of an operation that fewer than a majority said
// yes to: nil if so many said "not ours" that no majority holds the lease
// (lost for good), ErrSuperseded instead if another Lock resumed it on one
// of them (superseded); a QuorumError otherwise.
func (q *Quorum) notHeld(op string, yes, answered int, superseded bool, errs []error) error {
	switch {
	case answered-yes <= len(q.nodes)-q.need():
		return &QuorumError{Op: op, Held: yes, Need: q.need(), Nodes: errs}
	case superseded:
		return ErrSuperseded
	}
	return nil
}

// leaseAnswer is a node's answer to a call on a lease: its value, or that
// another Lock resumed the lease there (superseded, an answer and a no).
type leaseAnswer[T any] struct {
	v          T
	superseded bool
}

// saidYes reports whether a node said yes to an extension or a release.
func saidYes(a leaseAnswer[bool]) bool { return a.v }

// unlessSuperseded wraps a node's call for fanOut: a node where another
// Lock resumed the lease (ErrSuperseded) answers so.
func unlessSuperseded[T any](fn func(context.Context, Node) (T, error)) func(context.Context, Node) (leaseAnswer[T], error) {
	return func(ctx context.Context, n Node) (leaseAnswer[T], error) {
		v, err := fn(ctx, n)
		if errors.Is(err, ErrSuperseded) {
			return leaseAnswer[T]{superseded: true}, nil
		}
		return leaseAnswer[T]{v: v}, err
	}
}

// supersededIn reports whether a node that answered in time said that
// another Lock resumed the lease: an answer fanOut stopped waiting for
// counts no more here than in tally.
func supersededIn[T any](res []nodeResult[leaseAnswer[T]]) bool {
	for _, r := range res {
		if r.ok && r.err == nil && r.v.superseded {
			return true
		}
	}
	return false
}

func (q *Quorum) Release(ctx context.Context, c *Claim) (bool, error) {
	// Every node is waited for (up to the per-node timeout): a release still
	// in flight on a node would make that node refuse the next acquisition.
	// A node whose release failed in a way that may pass (the connection
	// was cut with the request in it, a write was refused for the moment)
	// may still hold the lease: the release is retried there in the
	// background, as an undo is, so that the node does not keep the lock
	// until the lease expires (its copies are harmless: the first to land
	// ends the lease, the others report it).
	c = ptr(*c) // (the nodes' calls may outlive this one, and the caller marks its claim after it)
	res := fanOut(ctx, q, unlessSuperseded(func(ctx context.Context, n Node) (bool, error) {
		ok, err := n.Release(ctx, c)
		if Transient(err) {
			q.retryOn(n, c, func(ctx context.Context) error { _, err := n.Release(ctx, c); return err })
		}
		return ok, err
	}), nil)
	yes, answered, errs := tally(res, saidYes)
	if supersededIn(res) {
		return false, ErrSuperseded
	}
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

// Undo undoes the lease on every node (see Node.Undo). A node whose undo
// failed in a way that may pass is tried again on its own, in the
// background (as Release does), and so is a node that did not answer in
// time once its call fails: the nodes that did their part are not asked
// again. It returns the errors of the nodes that failed otherwise.
func (q *Quorum) Undo(ctx context.Context, c *Claim) error {
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (struct{}, error) {
		err := n.Undo(ctx, c)
		if Transient(err) {
			q.retryOn(n, c, func(ctx context.Context) error { return n.Undo(ctx, c) })
		}
		return struct{}{}, err
	}, nil)
	for i, r := range res {
		if !r.ok || Transient(r.err) {
			res[i] = nodeResult[struct{}]{ok: true} // retried on its own
		}
	}
	return nodeErrors(res)
}

// retryOn tries f, a clean-up of the lease c on the node n that failed in
// a way that may pass, again in the background on Retry's schedule, for as
// long as what it ends could block others; Drain waits for it.
func (q *Quorum) retryOn(n Node, c *Claim, f func(context.Context) error) {
	deadline := time.Now().Add(RetryFor(cmp.Or(c.TTL, n.ttl)))
	q.late.Go(func() { Retry(deadline, f, nil) })
}

// Prepare loads the scripts of the lease c on the nodes not known to have
// them (see Backend), all at once, and waits until a majority of nodes are
// ready or have failed to load, up to the node timeout: a node that does
// not answer costs no more here than in the call. Loads it stopped waiting
// for go on (bounded by ctx and the client's timeouts; Drain waits for
// them). With every node ready it returns at once, starting nothing. It
// reports nothing: the nodes that can be reached are asked anyway.
func (q *Quorum) Prepare(ctx context.Context, c *Claim) error {
	ready, pending := 0, 0
	var done chan struct{}
	for _, n := range q.nodes {
		if n.prepared(ctx, c) {
			ready++
			continue
		}
		if done == nil {
			done = make(chan struct{}, len(q.nodes))
		}
		pending++
		q.late.Go(func() { n.prepare(ctx, c, func() { done <- struct{}{} }) })
	}
	if pending == 0 {
		return nil
	}
	timer := time.NewTimer(q.timeout)
	defer timer.Stop()
	for ; ready < q.need() && pending > 0; ready, pending = ready+1, pending-1 {
		select {
		case <-done:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// Drain waits for the node calls that fanOut stopped waiting for (see
// Backend).
func (q *Quorum) Drain(ctx context.Context) error { return q.late.Wait(ctx) }

// Batches sums the nodes' batcher counts (see Backend).
func (q *Quorum) Batches() (calls, writes uint64) {
	for _, n := range q.nodes {
		c, w := n.Batches()
		calls, writes = calls+c, writes+w
	}
	return calls, writes
}

// Force force-releases the lock on every node (see Node.Force).
func (q *Quorum) Force(ctx context.Context, k *Keys) (bool, error) {
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (bool, error) { return n.Force(ctx, k) }, nil)
	deleted := false
	for _, r := range res {
		deleted = deleted || r.v
	}
	return deleted, nodeErrors(res)
}

// Announce publishes msg on every node; it fails only if none took it.
func (q *Quorum) Announce(ctx context.Context, k *Keys, msg string) error {
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (bool, error) {
		err := n.Announce(ctx, k, msg)
		return err == nil, err
	}, nil)
	for _, r := range res {
		if r.v {
			return nil
		}
	}
	return nodeErrors(res)
}

// nodeErrors joins the errors of the nodes that failed or did not answer,
// each named by its index.
func nodeErrors[T any](res []nodeResult[T]) error {
	var errs []error
	for i, r := range res {
		if r.err != nil { // (a node without an answer says why)
			errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
		}
	}
	return errors.Join(errs...)
}

// Scan gathers the matching keys of every node that answers; it fails if
// too few answered for a majority, whose locks could then be missed.
// A walk of the keyspace takes as long as it takes: it is bounded by ctx,
// not by the per-node timeout.
func (q *Quorum) Scan(ctx context.Context, match string) ([]string, error) {
	found := make([][]string, len(q.nodes))
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Go(func() { found[i], errs[i] = n.Scan(ctx, match) })
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

// Op is refused: a quorum carries no kind with operations of its own (see
// Backend).
func (q *Quorum) Op(context.Context, func(context.Context, Node) error) error { return ErrOverQuorum }

// Inspect reports what a majority of nodes agree on: the holder, how long
// a majority still has its lease, and the highest fence.
func (q *Quorum) Inspect(ctx context.Context, k *Keys) (State, error) {
	res := fanOut(ctx, q, func(ctx context.Context, n Node) (State, error) { return n.Inspect(ctx, k) }, nil)
	type held struct{ typ, token string } // (a name held as another kind on the nodes is no "string")
	votes := map[held]int{}
	var out State
	answered := 0
	for _, r := range res {
		if !r.ok || r.err != nil {
			continue
		}
		answered++
		out.Key, out.Fence, out.Queued = r.v.Key, max(out.Fence, r.v.Fence), max(out.Queued, r.v.Queued)
		if r.v.Held {
			votes[held{r.v.Type, r.v.Token}]++
		}
	}
	if answered < q.need() {
		return State{}, fmt.Errorf("%d of %d nodes answered, %d needed", answered, len(q.nodes), q.need())
	}
	out.Type = "none"
	for h, n := range votes {
		if n >= q.need() {
			out.Held, out.Token, out.Type = true, h.token, h.typ
		}
	}
	if out.Held {
		// The lease is held while a majority has it: as long as the
		// need-th longest copy lives (a node that missed extensions keeps
		// a shorter one). A copy without expiry counts as the longest.
		var left []time.Duration
		for _, r := range res {
			if r.ok && r.err == nil && r.v.Token == out.Token {
				left = append(left, r.v.TTL)
			}
		}
		slices.SortFunc(left, func(a, b time.Duration) int {
			return cmp.Compare(forever(b), forever(a))
		})
		out.TTL = left[q.need()-1]
	}
	return out, nil
}

// forever orders a remaining lease of -1 (no expiry) above every other.
func forever(d time.Duration) time.Duration {
	if d < 0 {
		return math.MaxInt64
	}
	return d
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
