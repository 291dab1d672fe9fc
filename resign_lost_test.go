package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// A Resign whose reply is lost hands the term to the candidate waiting at
// once, as it ran in Redis; Resign asked again reports success, and the
// next leader's term is left alone.
func TestResignWhoseReplyIsLostHandsTheTermOnOnce(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 0)
	ctx := t.Context()
	oldServer(t, direct)
	ttl := 20 * time.Second
	lead, err := newElection(t, newClient(t, rdb, dlock.LeaseTTL(ttl)), "resign-lost").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	e2 := newElection(t, newClient(t, direct, dlock.LeaseTTL(ttl)), "resign-lost")
	next := make(chan *dlock.Leadership, 1)
	go func() {
		ld, err := e2.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		next <- ld
	}()
	if !queued(ctx, direct, "resign-lost", 1) {
		t.Fatal("the second candidate never queued")
	}
	p.StallReplies()
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = lead.Resign(sctx)
	cancel()
	if err == nil {
		t.Fatal("a Resign whose reply was stalled succeeded")
	}
	var b *dlock.Leadership
	select {
	case b = <-next:
	case <-time.After(5 * time.Second): // far below the 20s term: the lost Resign handed it on
		t.Fatal("the waiting candidate did not lead after the Resign ran in Redis")
	}
	p.Cut()
	if err := lead.Resign(ctx); err != nil {
		t.Errorf("Resign asked again after its lost reply = %v, want nil", err)
	}
	if b == nil {
		t.FailNow()
	}
	if got, err := e2.Leader(ctx); err != nil || got.Value != "b" || got.Fence != b.Fence() || b.Err() != nil {
		t.Errorf("after the old leader's second Resign: Leader = %+v, %v (next's Err %v); want b's term", got, err, b.Err())
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
