package dlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Over a quorum, a lease's holder metadata shows in Inspect as it does on
// one node — also when the lease was taken by a later attempt, after an
// earlier one won too few nodes and was given back (the Lock then takes a
// new token). Found by the fault checker's check (k) in quorum rounds.
func TestRedlockInspectShowsHolderMetaAfterRetry(t *testing.T) {
	_, nodes := startQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, nodes, 0, dlock.LeaseTTL(2*time.Second), dlock.WithUnfair(nil), dlock.HolderMeta("job-7"))
	// Two of the three nodes hold the lock for someone else: the first
	// attempt wins node 0 alone, and gives it back.
	var others []*dlock.Lock
	for _, n := range nodes[1:] {
		l, err := newClient(t, n, dlock.LeaseTTL(2*time.Second), dlock.WithUnfair(nil)).Acquire(ctx, "qm")
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, l)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		for _, l := range others {
			l.Release(context.Background())
		}
	}()
	l, err := c.Acquire(ctx, "qm")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	info, err := c.Inspect(ctx, "qm")
	if err != nil {
		t.Fatal(err)
	}
	if info.Token != l.Token() || info.Meta != "job-7" || l.Meta() != "job-7" {
		t.Errorf("Inspect shows token %q meta %q; the lease has token %q, Lock.Meta %q; want meta %q",
			info.Token, info.Meta, l.Token(), l.Meta(), "job-7")
	}
}

// An undo over a quorum with a node that refuses connections asks that
// node again on its own, in the background, not the whole quorum: the
// nodes that did their part get one undo each. (It re-ran the fan-out on
// every node up to five times, so a node down multiplied the undo traffic
// of the healthy ones.)
func TestQuorumUndoRetriesOnlyTheNodeThatFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	srvs, nodes := startQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newRedlock(t, nodes, 100*time.Millisecond, dlock.LeaseTTL(5*time.Second), dlock.WithUnfair(nil))
	warm, err := c.TryAcquire(ctx, "qu-warm") // the scripts loaded on every node
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx)
	other, err := newClient(t, nodes[1], dlock.WithUnfair(nil)).TryAcquire(ctx, "qu")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.WithoutCancel(ctx))
	srvs[0].Kill() // node 0 refuses connections
	nodes[2].ConfigResetStat(ctx)
	// Node 2 grants, node 1 refuses, node 0 fails: one of three, undone.
	if _, err := c.TryAcquire(ctx, "qu"); err == nil {
		t.Fatal("TryAcquire won a majority with one node down and one held")
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := c.Close(dctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := nodes[2].Exists(ctx, "dlock:{qu}").Val(); n != 0 {
		t.Errorf("the undone attempt's lock is still on node 2")
	}
	stats := nodes[2].Info(ctx, "commandstats").Val()
	calls := 0
	for _, cmd := range []string{"evalsha", "eval"} {
		if i := strings.Index(stats, "cmdstat_"+cmd+":calls="); i >= 0 {
			n, _ := strconv.Atoi(strings.SplitN(stats[i+len("cmdstat_"+cmd+":calls="):], ",", 2)[0])
			calls += n
		}
	}
	if calls != 2 {
		t.Errorf("node 2 ran %d scripts for one attempt and its undo, want 2\n%s", calls, stats)
	}
}
