package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// startNodes starts n servers and returns a quorum over them that waits
// up to timeout for each node.
func startNodes(t *testing.T, n int, timeout time.Duration) *Quorum {
	t.Helper()
	var nodes []Node
	for range n {
		rdb := redistest.Start(t).Client(t)
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := NewQuorum(nodes, timeout, new(Tracker))
	t.Cleanup(func() { q.late.Wait(context.Background()) })
	return q
}

// A node that a fan-out did not wait for, because the other nodes' answers
// settled the outcome (with an even N, N/2 refusals) or the caller's
// context ended, is not reported as having missed the node timeout: the
// call ended long before it.
func TestQuorumUnansweredNodesSayWhy(t *testing.T) {
	const timeout = 5 * time.Second
	q := startNodes(t, 4, timeout)
	ctx := t.Context()
	k := KeysFor("dlock:", "why")
	mine, theirs := &Claim{Keys: k, Kind: PlainLock}, &Claim{Keys: k, Kind: PlainLock}
	mine.SetToken("mine")
	theirs.SetToken("theirs")

	// Not held by mine anywhere: every node refuses to raise its fence,
	// and two refusals of four settle it.
	start := time.Now()
	r := q.raise(ctx, mine, 7)
	took := time.Since(start)
	ok, errs := r.yes, r.errs
	refused := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, errNoAnswer):
			t.Errorf("raise: node %d: %v, after %v of a %v node timeout", i, err, took, timeout)
		case err == nil:
			t.Errorf("raise: node %d raised a fence for a lease that holds nothing", i)
		case errors.Is(err, errRefused):
			refused++
		}
	}
	if ok != 0 || refused < 2 {
		t.Errorf("raise = %d, %v; want 0 raised and at least 2 refusals", ok, errs)
	}

	// Held by theirs: the refusal names them, whatever node answered last.
	if g, err := q.Acquire(ctx, theirs, 10*time.Second, false); err != nil || !g.Held {
		t.Fatalf("Acquire(theirs) = %+v, %v", g, err)
	}
	g, err := q.Acquire(ctx, mine, 10*time.Second, false)
	if err != nil || g.Held || g.Holder != theirs.Token || g.PTTL <= 0 {
		t.Errorf("Acquire(mine) of a lock theirs holds = %+v, %v; want a refusal naming %q", g, err, theirs.Token)
	}

	// The caller's context ended before any answer came.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = q.Fence(cctx, mine)
	if qe, ok := errors.AsType[*QuorumError](err); ok {
		for i, err := range qe.Nodes {
			if errors.Is(err, errNoAnswer) {
				t.Errorf("Fence with its context ended: node %d: %v", i, err)
			}
		}
	}
	if err := q.late.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A walk of the keyspace over a quorum is bounded by the caller's ctx, not
// by the per-node timeout: with a node timeout far shorter than any SCAN it
// still gathers every node's keys; and with the caller's ctx ended it
// reports each node's own error, which says so, not that the fan-out
// stopped waiting.
func TestQuorumScanIsBoundedByItsContextNotTheNodeTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []Node
	for i := range 3 {
		rdb := redistest.Start(t).Client(t)
		if err := rdb.Set(ctx, fmt.Sprintf("dlock:{k%d}", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := NewQuorum(nodes, time.Nanosecond, new(Tracker))
	t.Cleanup(func() { q.late.Wait(context.Background()) })

	keys, err := q.Scan(ctx, "dlock:{*}")
	slices.Sort(keys)
	if want := []string{"dlock:{k0}", "dlock:{k1}", "dlock:{k2}"}; err != nil || !slices.Equal(keys, want) {
		t.Errorf("Scan with a 1ns node timeout = %q, %v; want %q", keys, err, want)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	keys, err = q.Scan(cctx, "dlock:{*}")
	qe, ok := errors.AsType[*QuorumError](err)
	if !ok || qe.Op != "list" || !errors.Is(err, context.Canceled) || errors.Is(err, errCutShort) || keys != nil {
		t.Errorf("Scan with its context ended = %q, %v; want a QuorumError of the nodes' context.Canceled", keys, err)
	}
}

// A walk of the keyspace over a quorum with one node's replies held ends
// with the caller's ctx, not at that node's read timeout, and gathers the
// keys of the majority that answered: every lock a majority holds is among
// them.
func TestQuorumScanWithAHeldNodeEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []Node
	var held *redistest.Proxy
	for i := range 3 {
		s := redistest.Start(t, redistest.TCP())
		if err := s.Client(t).Set(ctx, fmt.Sprintf("dlock:{k%d}", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		addr := s.Addr()
		if i == 2 {
			held = redistest.NewProxy(t, addr)
			addr = held.Addr()
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := NewQuorum(nodes, time.Second, new(Tracker))
	held.StallReplies()
	defer held.Cut() // the held node's SCAN fails at once

	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	keys, err := q.Scan(cctx, "dlock:{*}")
	took := time.Since(start)
	slices.Sort(keys)
	if want := []string{"dlock:{k0}", "dlock:{k1}"}; err != nil || !slices.Equal(keys, want) {
		t.Errorf("Scan with node 2's replies held = %q, %v; want %q", keys, err, want)
	}
	if took > 2*time.Second {
		t.Errorf("Scan with a 300ms ctx and node 2's replies held took %v, want it to end with its ctx, not at the node's 10s read timeout", took.Round(time.Millisecond))
	}
}

// endsAsAnswersLand is a context that ends at the moment its fanOut first
// looks at it: the first Done that fanOut asks for waits until every
// node's call has ended and sent its answer, then ends the context. The
// nodes' calls see it live.
type endsAsAnswersLand struct {
	context.Context
	once sync.Once
	done chan struct{}
}

func newEndsAsAnswersLand(parent context.Context) *endsAsAnswersLand {
	return &endsAsAnswersLand{Context: parent, done: make(chan struct{})}
}

// nodeCalls matches a goroutine of a fanOut's node call, started or not.
var nodeCalls = regexp.MustCompile(`backend\.fanOut\[[^\n]*\]\.func|backend\.\(\*Tracker\)\.Go\.func`)

func (c *endsAsAnswersLand) Done() <-chan struct{} {
	pc, _, _, _ := runtime.Caller(1)
	if f := runtime.FuncForPC(pc); f != nil && strings.Contains(f.Name(), ".fanOut[") && strings.HasSuffix(f.Name(), "]") {
		c.once.Do(func() {
			buf := make([]byte, 1<<20)
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if !nodeCalls.Match(buf[:runtime.Stack(buf, true)]) {
					break
				}
			}
			close(c.done)
		})
	}
	return c.done
}

func (c *endsAsAnswersLand) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// A fan-out whose caller's context ends when every node has already
// answered counts those answers: a List's SCAN (waited for until ctx ends)
// or an Inspect whose nodes all answered is not failed as if they had
// not, with ctx's error (or "no answer before the call's context ended")
// put on nodes that answered.
func TestQuorumAnswersInBeforeTheContextEndsAreCounted(t *testing.T) {
	// Serial: its context waits for every fanOut node call of the process
	// to end.
	ctx := t.Context()
	var nodes []Node
	for i := range 3 {
		rdb := redistest.Start(t).Client(t)
		if err := rdb.Set(ctx, fmt.Sprintf("dlock:{k%d}", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := NewQuorum(nodes, 5*time.Second, new(Tracker))
	t.Cleanup(func() { q.late.Wait(context.Background()) })
	k := KeysFor("dlock:", "k0")
	for try := range 8 { // (with both ready, a select picks either: 1 in 8 tries would pass by chance)
		keys, err := q.Scan(newEndsAsAnswersLand(ctx), "dlock:{*}")
		slices.Sort(keys)
		if want := []string{"dlock:{k0}", "dlock:{k1}", "dlock:{k2}"}; err != nil || !slices.Equal(keys, want) {
			t.Fatalf("try %d: Scan whose ctx ends once every node answered = %q, %v; want %q", try, keys, err, want)
		}
		if _, err := q.Inspect(newEndsAsAnswersLand(ctx), &k); err != nil {
			t.Fatalf("try %d: Inspect whose ctx ends once every node answered = %v", try, err)
		}
	}
}

// A walk of the keyspace over a quorum with one node down and another
// whose replies are held fails when its context ends, in node order: the
// node that answered granted, the node down says why in its own words, and
// the held node, without an answer, says that the context ended.
func TestQuorumScanWithANodeDownAndAHeldNodeSaysWhyPerNode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []Node
	var held *redistest.Proxy
	for i := range 3 {
		s := redistest.Start(t, redistest.TCP())
		addr := s.Addr()
		if i == 2 {
			held = redistest.NewProxy(t, addr)
			addr = held.Addr()
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Set(ctx, fmt.Sprintf("dlock:{k%d}", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			s.Kill()
		}
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := NewQuorum(nodes, time.Second, new(Tracker))
	held.StallReplies()
	defer held.Cut() // the held node's SCAN fails at once

	cctx, cancel := context.WithTimeout(ctx, 3*time.Second) // (past go-redis's dial retries on the node down)
	defer cancel()
	start := time.Now()
	keys, err := q.Scan(cctx, "dlock:{*}")
	took := time.Since(start)
	qe, ok := errors.AsType[*QuorumError](err)
	if !ok || keys != nil || qe.Op != "list" || qe.Held != 1 || qe.Need != 2 || len(qe.Nodes) != 3 {
		t.Fatalf("Scan with node 1 down and node 2's replies held = %q, %#v; want a QuorumError of list, 1 of 3 granted", keys, err)
	}
	if qe.Nodes[0] != nil || qe.Nodes[1] == nil || errors.Is(qe.Nodes[1], context.DeadlineExceeded) || !errors.Is(qe.Nodes[2], context.DeadlineExceeded) {
		t.Errorf("Scan's nodes = %v; want node 0 granted, node 1 its own error, node 2 the context's deadline", qe.Nodes)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "1 of 3 nodes granted, 2 needed; node 1: ") || !strings.HasSuffix(msg, "; node 2: context deadline exceeded") {
		t.Errorf("Scan's error = %q; want node 1's, then node 2's context deadline", msg)
	}
	if took > 5*time.Second {
		t.Errorf("Scan with a 3s ctx took %v, want it to end with its ctx, not at node 2's 10s read timeout", took.Round(time.Millisecond))
	}
}

// quorumOf returns a quorum over nodes that waits up to timeout for each,
// and drains its node calls when the test ends.
func quorumOf(t *testing.T, nodes []Node, timeout time.Duration) *Quorum {
	q := NewQuorum(nodes, timeout, new(Tracker))
	t.Cleanup(func() { q.late.Wait(context.Background()) })
	return q
}

// heldBy starts a server whose lock k is held by token, and returns its
// client.
func heldBy(t *testing.T, k Keys, token string) *redis.Client {
	rdb := redistest.Start(t).Client(t)
	if err := rdb.Set(t.Context(), k.Lock, token, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// A failed acquire attempt leaves nothing to undo on a node whose request
// was never sent, though that node had not answered when the others'
// refusals settled the round (its connection is refused only then): its
// undo waits for that call to end and sends nothing to the node, nor
// retries in the background; and the nodes that refused are not asked
// either.
func TestQuorumUndoSkipsANodeTheAttemptNeverReached(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	k := KeysFor("dlock:", "never")
	refusing := []*redis.Client{heldBy(t, k, "theirs"), heldBy(t, k, "theirs")}
	gate, dials := make(chan struct{}), atomic.Int32{}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1,
		Dialer: func(_ context.Context, network, _ string) (net.Conn, error) {
			dials.Add(1)
			<-gate
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}})
	t.Cleanup(func() { down.Close() })
	opened := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(opened)
	var nodes []Node
	for _, rdb := range append(refusing, down) {
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := quorumOf(t, nodes, 100*time.Millisecond)
	mine := &Claim{Keys: k, Kind: PlainLock}
	mine.SetToken("mine")

	g, err := q.Acquire(ctx, mine, 10*time.Second, false)
	if err != nil || g.Held || !g.Undo {
		t.Fatalf("Acquire refused by nodes 0 and 1, node 2 dialling = %+v, %v; want a refusal to undo (node 2 had not answered)", g, err)
	}
	if err := q.Undo(ctx, mine); err != nil {
		t.Errorf("Undo = %v", err)
	}
	opened() // node 2's connection is refused now
	if err := q.late.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("node 2 was dialled %d times; want once, by the acquire alone (no undo of a request never sent)", n)
	}
	for i, rdb := range refusing {
		if n, err := rdb.Exists(ctx, mine.Rev).Result(); err != nil || n != 0 {
			t.Errorf("node %d, which refused the attempt: its marker exists = %d, %v; want no undo sent there", i, n, err)
		}
	}
}

// A failed acquire attempt that a node granted after the others' refusals
// settled the round (its reply held back) is undone there once that
// node's call ends: the grant is not left to run out its lease.
func TestQuorumUndoEndsAGrantThatCameAfterTheRound(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	k := KeysFor("dlock:", "late")
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	late := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { late.Close() })
	var nodes []Node
	for _, rdb := range []*redis.Client{heldBy(t, k, "theirs"), heldBy(t, k, "theirs"), late} {
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := quorumOf(t, nodes, 100*time.Millisecond)
	mine := &Claim{Keys: k, Kind: PlainLock}
	mine.SetToken("mine")
	q.Prepare(ctx, mine) // (node 2 runs the acquire itself, not a NOSCRIPT reply)
	if err := q.late.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	p.StallReplies()
	g, err := q.Acquire(ctx, mine, 10*time.Second, false)
	if err != nil || g.Held || !g.Undo {
		t.Fatalf("Acquire refused by nodes 0 and 1, node 2's reply held = %+v, %v; want a refusal to undo", g, err)
	}
	if !waitFor(func() bool { return direct.Get(ctx, k.Lock).Val() == "mine" }) {
		t.Fatalf("node 2 never granted the attempt")
	}
	if err := q.Undo(ctx, mine); err != nil {
		t.Errorf("Undo = %v", err)
	}
	p.Cut() // node 2's acquire call fails, its reply lost
	if err := q.late.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := direct.Get(ctx, k.Lock).Result(); err != redis.Nil {
		t.Errorf("node 2's lock after the undo = %q, %v; want the late grant undone", v, err)
	}
}
