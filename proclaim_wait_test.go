package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// While a Proclaim waits on a server whose replies are stalled, the
// leadership's Value answers at once (the value known before it) and a
// second Proclaim ends with its own context: neither waits for the first
// one's reply.
func TestProclaimInFlightBlocksNeitherValueNorAnotherProclaimsContext(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, -1)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(20*time.Second), dlock.WithAutoExtend(false))
	e, err := c.Election("pwait")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	p.StallReplies()
	first := make(chan error, 1)
	fctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	go func() { first <- ld.Proclaim(fctx, "v1") }()
	e2, _ := newClient(t, direct).Election("pwait")
	if !waitFor(5*time.Second, func() bool { got, err := e2.Leader(ctx); return err == nil && got.Value == "v1" }) {
		t.Fatal("the first Proclaim never ran on the server")
	}
	values := make(chan string, 1)
	began := time.Now()
	go func() { values <- ld.Value() }()
	waited := false
	select {
	case v := <-values:
		if v != "v0" {
			t.Errorf("Value while a Proclaim's outcome is unknown = %q, want v0 (the value known)", v)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("Value waited %v for a Proclaim in flight", time.Since(began))
		waited = true
	}
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	began = time.Now()
	err = ld.Proclaim(sctx, "v2")
	scancel()
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("a second Proclaim took %v past its 200ms context", took)
	}
	if err == nil {
		t.Error("a second Proclaim behind a stalled one succeeded")
	}
	p.Cut()
	if err := <-first; err == nil {
		t.Error("the stalled Proclaim succeeded")
	}
	if waited {
		<-values
	}
	if err := ld.Proclaim(ctx, "v3"); err != nil {
		t.Fatalf("Proclaim after the stall: %v", err)
	}
	if got, err := e2.Leader(ctx); err != nil || got.Value != "v3" || ld.Value() != "v3" {
		t.Errorf("after the stall Leader = %+v, %v and Value = %q; want v3", got, err, ld.Value())
	}
	ld.Resign(ctx)
}
