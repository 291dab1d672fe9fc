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
	errRefused   = errors.New(HeldByAnother)
	errNoAnswer  = errors.New("no answer within the node timeout")
	errNotWaited = errors.New("not waited for: the other nodes' answers settled the outcome")
	errCutShort  = errors.New("no answer before the call's context ended")
)

// Quorum is the backend of a Redlock Client: each lock on a majority of
// independent nodes.
type Quorum struct {
	nodes   []Node
	timeout time.Duration
	late    *Tracker // counts the node calls that fanOut stopped waiting for
}

// NewQuorum returns the backend over nodes that waits for each node's
// answer up to timeout, and counts on late the node calls it stops
// waiting for (a Client's tracker: its Close waits for them as for its
// own clean-up). Its nodes' fence counters live quorumFenceWindow (see
// fenceWindow).
func NewQuorum(nodes []Node, timeout time.Duration, late *Tracker) *Quorum {
	q := &Quorum{nodes: slices.Clone(nodes), timeout: timeout, late: late}
	for i := range q.nodes {
		q.nodes[i].setFenceWindow(quorumFenceWindow)
		q.nodes[i].extra = setOf(script.RaiseFence) // Fence writes back
		q.nodes[i].i = i
	}
	return q
}

func (q *Quorum) need() int { return len(q.nodes)/2 + 1 }

// waitUntil is how long a fanOut waits for the nodes' answers.
type waitUntil int

const (
	// untilSettled waits up to the node timeout, or until the caller's ctx
	// ends, and no longer than until the answers so far settle the outcome.
	untilSettled waitUntil = iota
	// untilAll waits for every node, up to the node timeout, or until the
	// caller's ctx ends.
	untilAll
	// untilCtx waits for every node, however long it takes, until the
	// caller's ctx ends: a walk of the keyspace, which the node timeout
	// does not bound. A node without an answer then says what its own
	// call, bounded by ctx, would: ctx's error.
	untilCtx
)

// answer is one node's answer in a fanOut: its value, and err nil if it
// said yes, errRefused if it said no, the node's error, or why there is no
// answer (errNoAnswer, errNotWaited, errCutShort; ok is false then).
type answer[T any] struct {
	i   int // the node's index
	v   T
	err error
	ok  bool // answered in time
}

// round is what a fanOut heard: each node's answer, and their tally.
type round[T any] struct {
	q          *Quorum
	answers    []answer[T] // per node
	yes, no    int         // the nodes that said yes, and no
	superseded bool        // a node said no because another Lock resumed the lease there
	errs       []error     // per node: nil if it said yes, why not otherwise
}

// said yields the values of the nodes that said yes, in the nodes' order.
func (r round[T]) said(yield func(T) bool) {
	for _, a := range r.answers {
		if a.err == nil && !yield(a.v) {
			return
		}
	}
}

// won reports that a majority said yes; lost, that so many said no that a
// majority cannot (more than N-need: with an even N that is N/2, one fewer
// than a majority).
func (r round[T]) won() bool  { return r.yes >= r.q.need() }
func (r round[T]) lost() bool { return r.no > len(r.q.nodes)-r.q.need() }

// fail is the QuorumError of op, granted by the nodes that said yes.
func (r round[T]) fail(op string) error {
	return &QuorumError{Op: op, Held: r.yes, Need: r.q.need(), Nodes: r.errs}
}

// outcome is the outcome of op, an operation of a held lease: true if a
// majority said yes. Else nil if so many said "not ours" that no majority
// holds the lease (lost for good), ErrSuperseded instead if another Lock
// resumed it on one of them (superseded); a QuorumError otherwise.
func (r round[T]) outcome(op string) (bool, error) {
	switch {
	case r.won():
		return true, nil
	case !r.lost():
		return false, r.fail(op)
	case r.superseded:
		return false, ErrSuperseded
	}
	return false, nil
}

// fanOut runs fn on every node at once and returns what answered while it
// waited (see waitUntil), and their tally; each node without an answer
// then says which of the three it was (its answer's err). With yes given,
// an answer that fails it is a no, and so is a node's ErrSuperseded
// (another Lock resumed the lease there); without, every answer is a yes.
// Waiting untilSettled, it stops as soon as the answers so far settle the
// outcome: once a majority said yes, or once so many said no that a
// majority cannot (round.lost). A node that failed is not an answer: the
// others are still waited for. Goroutines of nodes not waited for finish
// on their own (bounded by the client's read timeout): a late release or
// extension still takes effect; their results are dropped.
func fanOut[T any](ctx context.Context, q *Quorum, yes func(T) bool, until waitUntil, fn func(context.Context, Node) (T, error)) round[T] {
	ch := make(chan answer[T], len(q.nodes))
	// Each node's call is sent and runs to its end whatever the wait: a
	// call cancelled when the outcome is decided, or at the per-node
	// timeout, could be dropped unsent from the node's pipeline (a grant
	// missing from a node, a release never made). go-redis's timeouts bound
	// it. A walk's calls (untilCtx) have no node timeout, and are reads,
	// never late: the tracker, and so Close, does not wait for them (a List
	// under way). Once the tracker takes no more (after Close), the calls
	// run on ctx, each cut at the node timeout, and fanOut waits for all of
	// them up to the node timeout: a call that outlives its own ctx (a
	// client that awaits a reply up to its read timeout) sends nothing more.
	timeout, start := time.After(q.timeout), q.late.Go
	if until == untilCtx {
		timeout, start = nil, func(call func()) bool { go call(); return true }
	}
	nctx := context.WithoutCancel(ctx)
	var after *sync.WaitGroup // the calls made after Close, if any
	for i, n := range q.nodes {
		if !start(func() {
			v, err := fn(nctx, n)
			ch <- answer[T]{i: i, v: v, err: err, ok: true}
		}) {
			after = cmp.Or(after, new(sync.WaitGroup))
			after.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, q.timeout)
				defer cancel()
				v, err := fn(ctx, n)
				ch <- answer[T]{i: i, v: v, err: err, ok: true}
			})
		}
	}
	if after != nil {
		defer func() {
			done := make(chan struct{})
			go func() { after.Wait(); close(done) }()
			Await(ctx, []<-chan struct{}{done}, q.timeout)
		}()
	}
	r := round[T]{q: q, answers: make([]answer[T], len(q.nodes)), errs: make([]error, len(q.nodes))}
	var why error // why the nodes not answered yet have no answer
	for got := 0; got < len(q.nodes) && why == nil; got++ {
		select {
		case a := <-ch:
			r.count(a, yes)
			if until == untilSettled && (r.won() || r.lost()) {
				why = errNotWaited
			}
		case <-timeout:
			why = errNoAnswer
		case <-ctx.Done(): // the caller stops waiting when its ctx ends; the nodes' calls go on
			why = errCutShort
			if until == untilCtx {
				why = ctx.Err()
			}
		}
	}
	if why != errNotWaited {
		// The answers already in count, though the wait ended as they came
		// (a select picks any of its ready cases, not the answers first).
		for len(ch) > 0 {
			r.count(<-ch, yes)
		}
	}
	for i := range r.answers {
		a := &r.answers[i]
		if !a.ok {
			a.err = why
		}
		r.errs[i] = a.err
	}
	return r
}

// count tallies the answer a. With yes given, an answer that fails it is a
// no, and so is a node's ErrSuperseded; without, every answer is a yes.
func (r *round[T]) count(a answer[T], yes func(T) bool) {
	switch {
	case yes == nil:
	case errors.Is(a.err, ErrSuperseded):
		a.err, r.superseded = errRefused, true
	case a.err == nil && !yes(a.v):
		a.err = errRefused
	}
	switch a.err {
	case nil:
		r.yes++
	case errRefused:
		r.no++
	}
	r.answers[a.i] = a
}

// nodeAcquire is a node's call in a quorum's acquire attempt: done is
// closed when it ends, and left then reports whether it may have left
// something to undo on the node (a grant, or a request that was sent but
// not answered).
type nodeAcquire struct {
	done chan struct{}
	left bool
}

// isTrue is the yes of an extension and a release.
func isTrue(ok bool) bool { return ok }

// Carries serves plain locks only (see Backend).
func (q *Quorum) Carries(k Kind) error { return anyBackendOnly(k, ErrOverQuorum) }

// Acquire takes the lock on a majority. A quorum carries plain locks
// only: a claim of another Kind is refused, unsent. A waiter (queue)
// queues on no node, but asks each to announce the release (acquire.lua).
func (q *Quorum) Acquire(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	if err := q.Carries(c.Kind); err != nil {
		return Grant{}, NotSent(err)
	}
	tried := make([]nodeAcquire, len(q.nodes))
	for i := range tried {
		tried[i].done = make(chan struct{})
	}
	r := fanOut(ctx, q, func(g Grant) bool { return g.Held }, untilSettled, func(ctx context.Context, n Node) (Grant, error) {
		g, err := n.Acquire(ctx, c, ttl, queue)
		tried[n.i].left = g.Held || g.Undo || g.Astray
		close(tried[n.i].done)
		return g, err
	})
	if r.won() {
		// (A plain lock's fence is issued when asked for, by Fence, so its
		// acquire is one round. A held lease is undone on every node.)
		c.tried = nil
		return Grant{Held: true}, nil
	}
	c.tried = tried // (its undo, if any, skips the nodes where it left nothing)
	// The caller undoes what may have been granted, on every node: nothing
	// to undo if no node granted it and every other one refused, or surely
	// never got the request, and no copy whose reply was lost may land.
	undo := r.yes > 0
	pttl, holder, named := time.Duration(-1), "", map[string]int{} // of the refusing nodes' holders: the longest lease, the one most named
	for _, a := range r.answers {
		undo = undo || a.v.Astray
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
	if r.yes+r.no >= q.need() || r.lost() {
		// A majority answered: taken, or a split vote; or so many refused
		// that no majority can grant it (with an even N, N/2 refusals,
		// which settle the outcome before a majority has answered): the
		// lock is held; wait.
		return Grant{PTTL: pttl, Holder: holder, Undo: undo}, nil
	}
	return Grant{Undo: undo}, r.fail("acquire")
}

// raise writes fence back to every node's counter where the lease c still
// holds the lock: yes where it did.
func (q *Quorum) raise(ctx context.Context, c *Claim, fence int64) round[int64] {
	return fanOut(ctx, q, func(v int64) bool { return v == 1 }, untilSettled, func(ctx context.Context, n Node) (int64, error) {
		return result(as[int64](n.run(ctx, script.RaiseFence, []any{c.Lock, c.Fence, c.Rev}, fence, c.HolderID(), n.fenceMS, c.Kind.shape().typ, c.Resumer)))
	})
}

// Fence issues the lease's fence on every node and takes the highest that
// a majority gave, then writes it back to a majority (raise): any later
// majority shares a node with that one and issues a higher fence.
func (q *Quorum) Fence(ctx context.Context, c *Claim) (int64, error) {
	r := fanOut(ctx, q, func(f int64) bool { return f > 0 }, untilSettled, func(ctx context.Context, n Node) (int64, error) {
		return n.Fence(ctx, c)
	})
	if ok, err := r.outcome("fence"); !ok {
		return 0, err
	}
	fence := slices.Max(slices.Collect(r.said)) // (a majority said yes: at least one fence)
	if raised := q.raise(ctx, c, fence); !raised.won() {
		return 0, raised.fail("fence")
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
	r := fanOut(ctx, q, nil, untilSettled, func(ctx context.Context, n Node) (mark, error) {
		seq, drives, err := n.Seq(ctx, c)
		return mark{seq, drives}, err
	})
	if !r.won() {
		return 0, false, r.fail("resume")
	}
	var seq int64
	ended, drives := 0, true
	for m := range r.said {
		seq = max(seq, m.seq)
		drives = drives && m.drives
		if m.seq < 0 {
			ended++
		}
	}
	if ended >= q.need() {
		seq = -1
	}
	return seq, drives, nil
}

func (q *Quorum) Extend(ctx context.Context, c *Claim, ttl time.Duration, seq int64) (bool, error) {
	return fanOut(ctx, q, isTrue, untilSettled, func(ctx context.Context, n Node) (bool, error) {
		return n.Extend(ctx, c, ttl, seq)
	}).outcome("extend")
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
	r := q.end(ctx, &claim, isTrue, Node.Release)
	// The lease was exclusive only while no majority could be won by
	// another client. A node that answers that our token is gone (it came
	// back empty, or never granted it) can grant it to someone else; a node
	// that does not answer is down or cut off, and still holds the lease
	// until it expires (a node must stay down for a TTL after a crash, see
	// NewRedlock). So the lease counts as lost when so many nodes answered
	// "not ours" that the rest cannot make a majority, and as released when
	// the others could and at least one node confirmed it.
	// A node where another Lock's resume is recorded (or where this Lock's
	// own resume has not landed yet) supersedes the release only when no
	// majority released it.
	switch {
	case r.superseded && !r.won():
		return false, ErrSuperseded
	case r.lost():
		return false, nil
	case r.yes > 0:
		return true, nil
	}
	return false, r.fail("release")
}

// Undo undoes the lease on every node (see Node.Undo). A node whose undo
// failed in a way that may pass is tried again on its own, in the
// background (as Release does), and so is a node that did not answer in
// time once its call fails: the nodes that did their part are not asked
// again. After a failed acquire attempt, the undo on each node first waits
// for that node's acquire call to end, and skips the node if the call
// left nothing there: it was refused, or surely never sent (a connection
// refused). It returns the errors of the nodes that failed otherwise.
func (q *Quorum) Undo(ctx context.Context, c *Claim) error {
	r := q.end(ctx, c, nil, func(n Node, ctx context.Context, c *Claim) (bool, error) {
		if c.tried != nil {
			t := &c.tried[n.i]
			<-t.done // (it ends within the Redis client's timeouts)
			if !t.left {
				return false, nil
			}
		}
		return false, n.Undo(ctx, c)
	})
	return nodeErrors(r.errs, Transient) // (a Transient one is tried again on its own, as is a node without an answer once its call fails)
}

// end runs f, a clean-up of the lease c (Node.Release, Node.Undo), on
// every node, waiting for each up to the node timeout (with yes as
// fanOut's). A node where it failed in a way that may pass is tried again:
// in the background on Retry's schedule, for as long as what it ends could
// block others; the tracker counts it (after Close, the lease's expiry ends it).
func (q *Quorum) end(ctx context.Context, c *Claim, yes func(bool) bool, f func(Node, context.Context, *Claim) (bool, error)) round[bool] {
	return fanOut(ctx, q, yes, untilAll, func(ctx context.Context, n Node) (bool, error) {
		ok, err := f(n, ctx, c)
		if Transient(err) {
			deadline := time.Now().Add(RetryFor(cmp.Or(c.TTL, n.ttl)))
			q.late.Go(func() {
				Retry(deadline, func(ctx context.Context) error {
					_, err := f(n, ctx, c)
					return err
				}, nil)
			})
		}
		return ok, err
	})
}

// Prepare loads the scripts of the lease c on the nodes not known to have
// them (see Backend), all at once, and waits until a majority of nodes are
// ready or have failed to load, up to the node timeout: a node that does
// not answer costs no more here than in the call. Loads it stopped waiting
// for go on (bounded by ctx and the client's timeouts; the tracker counts
// them). With every node ready it returns at once, starting nothing. It
// reports nothing: the nodes that can be reached are asked anyway.
func (q *Quorum) Prepare(ctx context.Context, c *Claim) error {
	if !slices.ContainsFunc(q.nodes, func(n Node) bool { return !n.prepared(ctx, c) }) {
		return nil
	}
	fanOut(ctx, q, nil, untilSettled, func(_ context.Context, n Node) (struct{}, error) {
		n.Prepare(ctx, c) // (a ready node answers at once)
		return struct{}{}, nil
	})
	return nil
}

// Batches sums the nodes' batcher counts (see Backend).
func (q *Quorum) Batches() (calls, writes uint64) {
	for _, n := range q.nodes {
		c, w := n.Batches()
		calls, writes = calls+c, writes+w
	}
	return calls, writes
}

// Force force-releases the lock on every node (see Node.Force). A node
// that failed is an error, unless each lease the force ended was ended on
// a majority: its marker there refuses it, so it can never hold a
// majority again. (A lease ended on fewer may: its requests still on their
// way to the nodes the force found free would be granted there.)
func (q *Quorum) Force(ctx context.Context, k *Keys) (bool, error) {
	r := fanOut(ctx, q, nil, untilAll, func(ctx context.Context, n Node) (string, error) { return n.force(ctx, k) })
	ended := map[string]int{}
	for holding := range r.said {
		if holding != "" {
			ended[holding]++
		}
	}
	settled := len(ended) > 0
	for _, nodes := range ended {
		settled = settled && nodes >= q.need()
	}
	if settled {
		return true, nil
	}
	return len(ended) > 0, nodeErrors(r.errs, nil)
}

// Announce publishes msg on every node; it fails only if none took it.
func (q *Quorum) Announce(ctx context.Context, k *Keys, msg string) error {
	r := fanOut(ctx, q, nil, untilAll, func(ctx context.Context, n Node) (struct{}, error) {
		return struct{}{}, n.Announce(ctx, k, msg)
	})
	if r.yes > 0 {
		return nil
	}
	return nodeErrors(r.errs, nil)
}

// nodeErrors joins the errors of the nodes that failed or did not answer,
// each named by its index, but those that skip (if not nil) reports.
func nodeErrors(errs []error, skip func(error) bool) error {
	var named []error
	for i, err := range errs {
		if err != nil && (skip == nil || !skip(err)) {
			named = append(named, fmt.Errorf("node %d: %w", i, err))
		}
	}
	return errors.Join(named...)
}

// Scan gathers the matching keys of every node that answers; it fails if
// too few answered for a majority, whose locks could then be missed.
// A walk of the keyspace takes as long as it takes: it is bounded by ctx,
// not by the per-node timeout, and ends with ctx even where a node's call
// goes on (go-redis reads on to its read timeout).
func (q *Quorum) Scan(ctx context.Context, match string) ([]string, error) {
	r := fanOut(ctx, q, nil, untilCtx, func(_ context.Context, n Node) ([]string, error) { return n.Scan(ctx, match) })
	if !r.won() {
		return nil, r.fail("list")
	}
	return slices.Concat(slices.Collect(r.said)...), nil
}

// Op is refused: a quorum carries no kind with operations of its own (see
// Backend).
func (q *Quorum) Op(context.Context, KindOp) (any, error) { return nil, ErrOverQuorum }

// Inspect reports what a majority of nodes agree on: the holder, how long
// a majority still has its lease, and the highest fence.
func (q *Quorum) Inspect(ctx context.Context, k *Keys) (State, error) {
	r := fanOut(ctx, q, nil, untilAll, func(ctx context.Context, n Node) (State, error) { return n.Inspect(ctx, k) })
	if !r.won() {
		return State{}, r.fail("inspect")
	}
	// The lease is held while a majority has it: as long as the need-th
	// longest copy lives (a node that missed extensions keeps a shorter
	// one). A copy without expiry (-1) counts as the longest: as unsigned,
	// it is.
	type held struct{ typ, token string } // (a name held as another kind on the nodes is no "string")
	copies := map[held][]uint64{}         // each copy's lease left
	out := State{Type: "none"}
	for s := range r.said {
		out.Key, out.Fence, out.Queued = s.Key, max(out.Fence, s.Fence), max(out.Queued, s.Queued)
		if s.Held {
			h := held{s.Type, s.Token}
			copies[h] = append(copies[h], uint64(s.TTL))
		}
	}
	for h, left := range copies {
		if len(left) >= q.need() {
			slices.Sort(left)
			out.Held, out.Token, out.Type, out.TTL = true, h.token, h.typ, time.Duration(left[len(left)-q.need()])
			shapeOf(h.typ).read(&out, nil, 0, "") // (a plain lock's lease: the majority's)
		}
	}
	return out, nil
}
