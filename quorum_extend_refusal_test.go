package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A Redlock extension that no majority can grant however often it is sent
// (one node no longer holds the lease, one refuses for good with a marker
// of another type, one grants) ends after one round: a node's "not ours"
// is an answer, not an error that may pass, so the extension is not tried
// again until the validity runs short.
func TestRedlockExtendRefusedByEveryNodeThatFailedEndsAfterOneRound(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx := t.Context()
	// Every node answers here, so the node timeout only has to outlast a
	// loaded machine's round trip (TTL/50, 400ms, did not always): a node
	// left unanswered may still answer, and is tried again.
	c := newRedlock(t, nodes, 5*time.Second, dlock.WithAutoExtend(false), dlock.LeaseTTL(20*time.Second))
	l, err := c.TryAcquire(ctx, "ext-refused")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// The acquire returned once a majority granted it: wait for every
	// node's grant, one of which may still be on its way, before changing
	// two nodes and counting node 0's calls.
	for i, n := range nodes {
		if !waitFor(5*time.Second, func() bool { return n.Exists(ctx, l.Key()).Val() == 1 }) {
			t.Fatalf("node %d never granted the lease", i)
		}
	}
	nodes[1].Del(ctx, l.Key())                                        // node 1: the lease is gone there
	nodes[2].HSet(ctx, l.Key()+":r:"+l.Token(), "another", "program") // node 2: the marker is another type
	// The scripts node 0 ran: its script calls but those that met NOSCRIPT,
	// which ran nothing. The acquisition waited for a majority's script
	// loads only, so node 0's may still be on its way when the extension
	// gets there, which then sends its script again.
	ran := func() int {
		return scriptCalls(t, nodes[0]) - serverStat(t, ctx, nodes[0], "errorstats", "errorstat_NOSCRIPT", "count")
	}
	before := ran()
	err = l.Extend(ctx, 5*time.Second) // (shorter: a numbered extension, which reads the marker with GET)
	if qe, ok := errors.AsType[*dlock.QuorumError](err); !ok || qe.Op != "extend" || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Extend granted by one node of three = %v, want an extend's QuorumError, not ErrNotAcquired", err)
	}
	if n := ran() - before; n != 1 {
		t.Errorf("node 0 ran %d scripts for an Extend that no retry could make win, want 1", n)
	}
}
