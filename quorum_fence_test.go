package dlock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A quorum node whose clock runs ahead of the others (independent masters
// are not clock-synchronised) lifts a fence to its time, and Lock.Fence
// writes that fence back to a majority. The counters must outlive any
// plausible disagreement of the clocks: if they expired after a minute, as a
// single node's do, a later majority without that node would issue fences
// from its own, earlier clock — lower than a fence an earlier lease used.
// (The skewed node's fence is written into its counter directly, as
// TestFenceStrictlyIncreases does: libfaketime crashes redis-server here.)
func TestQuorumFenceOutlivesASkewedNode(t *testing.T) {
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, nodes, 0, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second))
	name := "skewed-fence"
	counter := "dlock:{" + name + "}:fence"

	tm, err := nodes[0].Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Node 0's clock is 2 minutes ahead, and a fence it issued was written
	// back to a majority (nodes 0 and 1), as Fence does: every majority
	// sees it, whichever two nodes answer first.
	ahead := tm.Add(2 * time.Minute).UnixMicro()
	for _, n := range nodes[:2] {
		n.Set(ctx, counter, strconv.FormatInt(ahead, 10), time.Minute)
	}

	l1, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	f1 := fenceOf(t, l1)
	if f1 <= ahead {
		t.Fatalf("Fence of the first lease = %d, want > %d (the skewed node's)", f1, ahead)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A majority's counters live a day (a minute would let fences fall
	// back). Not necessarily every node's: one slow to answer may not have
	// held the lease yet when the fence was issued.
	dayLong := func() (n int, pttls []time.Duration) {
		for _, node := range nodes {
			d := node.PTTL(ctx, counter).Val()
			pttls = append(pttls, d)
			if d >= 23*time.Hour {
				n++
			}
		}
		return n, pttls
	}
	if !waitFor(2*time.Second, func() bool { n, _ := dayLong(); return n >= 2 }) {
		_, pttls := dayLong()
		t.Errorf("fence counters live %v on the three nodes, want a day on a majority", pttls)
	}

	srvs[0].Pause() // a majority without the skewed node
	defer srvs[0].Resume()
	var l2 *dlock.Lock
	for range 20 {
		if l2, err = c.TryAcquire(ctx, name); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryAcquire on the majority of nodes 1, 2 = %v", err)
	}
	defer l2.Release(ctx)
	if f2 := fenceOf(t, l2); f2 <= f1 {
		t.Errorf("Fence of the later lease = %d, not above the earlier lease's %d", f2, f1)
	}
}
