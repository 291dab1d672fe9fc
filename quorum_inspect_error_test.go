package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Over a quorum, a read of a name's state that no majority answers fails
// with a QuorumError of Op "inspect" that names each node's error, through
// Client.Inspect and a Lock's TTL alike, once the node timeout passed, not
// after the stalled nodes' read timeouts.
func TestRedlockInspectWithoutAMajorityIsAQuorumError(t *testing.T) {
	t.Parallel()
	ps, via, _ := proxiedQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, via, 200*time.Millisecond, dlock.LeaseTTL(20*time.Second), dlock.WithAutoExtend(false))
	l := takeWithin(t, ctx, c, "inspected")
	defer l.Release(ctx)
	ps[1].Stall()
	ps[2].Stall()
	defer ps[2].Cut()
	defer ps[1].Cut()
	reads := map[string]func() error{
		"Client.Inspect": func() error { _, err := c.Inspect(ctx, "inspected"); return err },
		"Lock.TTL":       func() error { _, err := l.TTL(ctx); return err },
	}
	for what, read := range reads {
		start := time.Now()
		err := read()
		took := time.Since(start)
		qe, ok := errors.AsType[*dlock.QuorumError](err)
		switch {
		case !ok:
			t.Errorf("%s with 2 of 3 nodes stalled = %v, want a QuorumError", what, err)
		case qe.Op != "inspect" || qe.Need != 2 || qe.Held > 1 || len(qe.Nodes) != 3 || qe.Nodes[1] == nil || qe.Nodes[2] == nil:
			t.Errorf("%s with 2 of 3 nodes stalled = %+v, want Op inspect, 2 needed, nodes 1 and 2 failed", what, *qe)
		}
		if took > 2500*time.Millisecond { // (the node timeout is 200ms; go-redis's read timeout, 3s, is not waited for)
			t.Errorf("%s took %v with 2 of 3 nodes stalled", what, took)
		}
	}
}
