package dlock_test

import (
	"context"
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
	c := newRedlock(t, nodes, dlock.WithTTL(2*time.Second), dlock.WithFair(false), dlock.WithHolderMeta("job-7"))
	// Two of the three nodes hold the lock for someone else: the first
	// attempt wins node 0 alone, and gives it back.
	var others []*dlock.Lock
	for _, n := range nodes[1:] {
		l, err := newClient(t, n, dlock.WithTTL(2*time.Second), dlock.WithFair(false)).Acquire(ctx, "qm")
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
