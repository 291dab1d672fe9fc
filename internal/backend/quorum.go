package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/script"
)

// Why a node did not say yes in a fanOut (answer.err): it said no; or it
// has no answer because the node timeout passed, the answers of the others
// settled the outcome first, or the caller's context ended.
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

// answer is one node's answer in a fanOut: its value, and err nil if it
// said yes, errRefused if it said no, the node's error, or why there is no
// answer (errNoAnswer, errNotWaited, errCutShort; ok is false then).
type answer[T any] struct {
	i   int // the node's index
	v   T
	err error
	ok  bool // answered in time
}

// votes sums a fanOut's answers.
type votes struct {
	yes, no    int     // the nodes that said yes, and no
	superseded bool    // a node said no because another Lock resumed the lease there
	errs       []error // per node: nil if it said yes, why not otherwise
}

// fanOut runs fn on every node at once and returns what answered within the
// per-node timeout, or when ctx ends, and their tally; each node without an
// answer then says which of the three it was (its answer's err). With yes
// given, an answer that fails it is a no, and so is a node's ErrSuperseded
// (another Lock resumed the lease there); without, every answer is a yes.
// With settle, it stops waiting as soon as the answers so far settle the
// outcome: once a majority said yes, or once so many said no that a
// majority cannot (more than N-need: with an even N that is N/2, one fewer
// than a majority). A node that failed is not an answer: the others are
// still waited for. Goroutines of nodes not waited for finish on their own
// (bounded by the client's read timeout): a late release or extension still
// takes effect; their results are dropped.
func fanOut[T any](ctx context.Context, q *Quorum, yes func(T) bool, settle bool, fn func(context.Context, Node) (T, error)) ([]answer[T], votes) {
	ch := make(chan answer[T], len(q.nodes))
	// Each node's call is sent and runs to its end whatever the wait: a
	// call cancelled when the outcome is decided, or at the per-node
	// timeout, could be dropped unsent from the node's pipeline (a grant
	// missing from a node, a release never made). go-redis's timeouts bound
	// it.
	nctx := context.WithoutCancel(ctx)
	for i, n := range q.nodes {
		q.late.Go(func() {
			v, err := fn(nctx, n)
			ch <- answer[T]{i: i, v: v, err: err, ok: true}
		})
	}
	out := make([]answer[T], len(q.nodes))
	var v votes
	timeout := time.After(q.timeout)
	var why error // why the nodes not answered yet have no answer
	for got := 0; got < len(q.nodes) && why == nil; got++ {
		select {
		case a := <-ch:
			switch {
			case yes == nil:
			case errors.Is(a.err, ErrSuperseded):
				a.err, v.superseded = errRefused, true
			case a.err == nil && !yes(a.v):
				a.err = errRefused
			}
			switch a.err {
			case nil:
				v.yes++
			case errRefused:
				v.no++
			}
			out[a.i] = a
			if settle && (v.yes >= q.need() || v.no > len(q.nodes)-q.need()) {
				why = errNotWaited
			}
		case <-timeout:
			why = errNoAnswer
		case <-ctx.Done(): // the caller stops waiting when its ctx ends; the nodes' calls go on
			why = errCutShort
		}
	}
	v.errs = make([]error, len(out))
	for i := range out {
		if !out[i].ok {
			out[i].err = why
		}
		v.errs[i] = out[i].err
	}
	return out, v
}

// fail is the QuorumError of op, which held nodes granted.
func (q *Quorum) fail(op string, held int, errs []error) error {
	return &QuorumError{Op: op, Held: held, Need: q.need(), Nodes: errs}
}

// isTrue is the yes of an extension and a release.
func isTrue(ok bool) bool { return ok }

// Carries serves plain locks only (see Backend).
func (q *Quorum) Carries(k Kind) error { return plainOnly(k, ErrOverQuorum) }

// Acquire takes the lock on a majority. A quorum carries plain locks
// only: a claim of another Kind is refused, unsent. A waiter (queue)
// queues on no node, but asks each to announce the release (acquire.lua).
func (q *Quorum) Acquire(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	if err := q.Carries(c.Kind); err != nil {
		return Grant{}, NotSent(err)
	}
	res, v := fanOut(ctx, q, func(g Grant) bool { return g.Held }, true, func(ctx context.Context, n Node) (Grant, error) {
		return n.Acquire(ctx, c, ttl, queue)
	})
	if v.yes >= q.need() {
		// (A plain lock's fence is issued when asked for, by Fence, so its
		// acquire is one round.)
		return Grant{Held: true}, nil
	}
	// The caller undoes what may have been granted, on every node: nothing
	// to undo if no node granted it and every other one refused, or surely
	// never got the request.
	undo := v.yes > 0
	pttl, holder, named := time.Duration(-1), "", map[string]int{} // of the refusing nodes' holders: the longest lease, the one most named
	for _, a := range res {
		switch {
		case a.err == errRefused:
			pttl = max(pttl, a.v.PTTL)
			if named[a.v.Holder]++; named[a.v.Holder] > named[holder] {
				holder = a.v.Holder
			}
		case !a.ok || (a.err != nil && a.v.Undo):
			undo = true
		}
	}
	if v.yes+v.no >= q.need() || v.no > len(q.nodes)-q.need() {
		// A majority answered: taken, or a split vote; or so many refused
		// that no majority can grant it (with an even N, N/2 refusals,
		// which settle the outcome before a majority has answered): the
		// lock is held; wait.
		return Grant{PTTL: pttl, Holder: holder, Undo: undo}, nil
	}
	return Grant{Undo: undo}, q.fail("acquire", v.yes, v.errs)
}

// raise writes fence back to every node's counter where the lease c still
// holds the lock, and returns on how many it did and why not on the others.
func (q *Quorum) raise(ctx context.Context, c *Claim, fence int64) (int, []error) {
	_, v := fanOut(ctx, q, func(v int64) bool { return v == 1 }, true, func(ctx context.Context, n Node) (int64, error) {
		v, err := n.run(ctx, script.RaiseFence, []any{c.Lock, c.Fence, c.Rev}, fence, c.HolderID(), n.fenceMS, c.Kind.shape().typ, c.Resumer).Int64()
		return v, RedisErr(err)
	})
	return v.yes, v.errs
}

// Fence issues the lease's fence on every node and takes the highest that
// a majority gave, then writes it back to a majority (raise): any later
// majority shares a node with that one and issues a higher fence.
func (q *Quorum) Fence(ctx context.Context, c *Claim) (int64, error) {
	res, v := fanOut(ctx, q, func(f int64) bool { return f > 0 }, true, func(ctx context.Context, n Node) (int64, error) {
		return n.Fence(ctx, c)
	})
	if ok, err := q.majority("fence", v); !ok {
		return 0, err
	}
	var fence int64
	for _, a := range res {
		if a.err == nil {
			fence = max(fence, a.v)
		}
	}
	if ok, errs := q.raise(ctx, c, fence); ok < q.need() {
		return 0, q.fail("fence", ok, errs)
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
	res, v := fanOut(ctx, q, nil, true, func(ctx context.Context, n Node) (mark, error) {
		seq, drives, err := n.Seq(ctx, c)
		return mark{seq, drives}, err
	})
	if v.yes < q.need() {
		return 0, false, q.fail("resume", v.yes, v.errs)
	}
	var seq int64
	ended, drives := 0, true
	for _, a := range res {
		if a.err == nil {
			seq = max(seq, a.v.seq)
			drives = drives && a.v.drives
			if a.v.seq < 0 {
				ended++
			}
		}
	}
	if ended >= q.need() {
		seq = -1
	}
	return seq, drives, nil
}

func (q *Quorum) Extend(ctx context.Context, c *Claim, ttl time.Duration, seq int64) (bool, error) {
	_, v := fanOut(ctx, q, isTrue, true, func(ctx context.Context, n Node) (bool, error) {
		return n.Extend(ctx, c, ttl, seq)
	})
	return q.majority("extend", v)
}

// majority is the outcome of op, an operation of a held lease: true if a
// majority said yes. Else nil if so many said "not ours" that no majority
// holds the lease (lost for good), ErrSuperseded instead if another Lock
// resumed it on one of them (superseded); a QuorumError otherwise.
func (q *Quorum) majority(op string, v votes) (bool, error) {
	switch {
	case v.yes >= q.need():
		return true, nil
	case v.no <= len(q.nodes)-q.need():
		return false, q.fail(op, v.yes, v.errs)
	case v.superseded:
		return false, ErrSuperseded
	}
	return false, nil
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
	claim := *c // (the nodes' calls may outlive this one, and the caller marks its claim after it)
	c = &claim
	_, v := fanOut(ctx, q, isTrue, false, func(ctx context.Context, n Node) (bool, error) {
		ok, err := n.Release(ctx, c)
		q.retryOn(n, c, err, func(ctx context.Context) error { _, err := n.Release(ctx, c); return err })
		return ok, err
	})
	// The lease was exclusive only while no majority could be won by
	// another client. A node that answers that our token is gone (it came
	// back empty, or never granted it) can grant it to someone else; a node
	// that does not answer is down or cut off, and still holds the lease
	// until it expires (a node must stay down for a TTL after a crash, see
	// NewRedlock). So the lease counts as lost when so many nodes answered
	// "not ours" that the rest cannot make a majority, and as released when
	// the others could and at least one node confirmed it.
	switch {
	case v.superseded:
		return false, ErrSuperseded
	case v.no > len(q.nodes)-q.need():
		return false, nil
	case v.yes > 0:
		return true, nil
	}
	return false, q.fail("release", v.yes, v.errs)
}

// Undo undoes the lease on every node (see Node.Undo). A node whose undo
// failed in a way that may pass is tried again on its own, in the
// background (as Release does), and so is a node that did not answer in
// time once its call fails: the nodes that did their part are not asked
// again. It returns the errors of the nodes that failed otherwise.
func (q *Quorum) Undo(ctx context.Context, c *Claim) error {
	_, v := fanOut(ctx, q, nil, false, func(ctx context.Context, n Node) (struct{}, error) {
		err := n.Undo(ctx, c)
		q.retryOn(n, c, err, func(ctx context.Context) error { return n.Undo(ctx, c) })
		return struct{}{}, err
	})
	for i, err := range v.errs {
		if Transient(err) { // (tried again on its own, as is a node without an answer once its call fails)
			v.errs[i] = nil
		}
	}
	return nodeErrors(v.errs)
}

// retryOn tries f, a clean-up of the lease c on the node n whose first try
// failed with err, again if err may pass: in the background on Retry's
// schedule, for as long as what it ends could block others; Drain waits
// for it.
func (q *Quorum) retryOn(n Node, c *Claim, err error, f func(context.Context) error) {
	if Transient(err) {
		deadline := time.Now().Add(RetryFor(cmp.Or(c.TTL, n.ttl)))
		q.late.Go(func() { Retry(deadline, f, nil) })
	}
}

// Prepare loads the scripts of the lease c on the nodes not known to have
// them (see Backend), all at once, and waits until a majority of nodes are
// ready or have failed to load, up to the node timeout: a node that does
// not answer costs no more here than in the call. Loads it stopped waiting
// for go on (bounded by ctx and the client's timeouts; Drain waits for
// them). With every node ready it returns at once, starting nothing. It
// reports nothing: the nodes that can be reached are asked anyway.
func (q *Quorum) Prepare(ctx context.Context, c *Claim) error {
	if !slices.ContainsFunc(q.nodes, func(n Node) bool { return !n.prepared(ctx, c) }) {
		return nil
	}
	fanOut(ctx, q, nil, true, func(_ context.Context, n Node) (struct{}, error) {
		n.Prepare(ctx, c) // (a ready node answers at once)
		return struct{}{}, nil
	})
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
	res, v := fanOut(ctx, q, nil, false, func(ctx context.Context, n Node) (bool, error) { return n.Force(ctx, k) })
	deleted := slices.ContainsFunc(res, func(a answer[bool]) bool { return a.v })
	return deleted, nodeErrors(v.errs)
}

// Announce publishes msg on every node; it fails only if none took it.
func (q *Quorum) Announce(ctx context.Context, k *Keys, msg string) error {
	_, v := fanOut(ctx, q, nil, false, func(ctx context.Context, n Node) (struct{}, error) {
		return struct{}{}, n.Announce(ctx, k, msg)
	})
	if v.yes > 0 {
		return nil
	}
	return nodeErrors(v.errs)
}

// nodeErrors joins the errors of the nodes that failed or did not answer,
// each named by its index.
func nodeErrors(errs []error) error {
	var named []error
	for i, err := range errs {
		if err != nil {
			named = append(named, fmt.Errorf("node %d: %w", i, err))
		}
	}
	return errors.Join(named...)
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
		return nil, q.fail("list", answered, errs)
	}
	return keys, nil
}

// Op is refused: a quorum carries no kind with operations of its own (see
// Backend).
func (q *Quorum) Op(context.Context, func(context.Context, Node) error) error { return ErrOverQuorum }

// Inspect reports what a majority of nodes agree on: the holder, how long
// a majority still has its lease, and the highest fence.
func (q *Quorum) Inspect(ctx context.Context, k *Keys) (State, error) {
	res, v := fanOut(ctx, q, nil, false, func(ctx context.Context, n Node) (State, error) { return n.Inspect(ctx, k) })
	if v.yes < q.need() {
		return State{}, fmt.Errorf("%d of %d nodes answered, %d needed", v.yes, len(q.nodes), q.need())
	}
	// The lease is held while a majority has it: as long as the need-th
	// longest copy lives (a node that missed extensions keeps a shorter
	// one). A copy without expiry (-1) counts as the longest: as unsigned,
	// it is.
	type held struct{ typ, token string } // (a name held as another kind on the nodes is no "string")
	copies := map[held][]uint64{}         // each copy's lease left
	out := State{Type: "none"}
	for _, a := range res {
		if a.err == nil {
			out.Key, out.Fence, out.Queued = a.v.Key, max(out.Fence, a.v.Fence), max(out.Queued, a.v.Queued)
			if a.v.Held {
				h := held{a.v.Type, a.v.Token}
				copies[h] = append(copies[h], uint64(a.v.TTL))
			}
		}
	}
	for h, left := range copies {
		if len(left) >= q.need() {
			slices.Sort(left)
			out.Held, out.Token, out.Type, out.TTL = true, h.token, h.typ, time.Duration(left[len(left)-q.need()])
		}
	}
	return out, nil
}
