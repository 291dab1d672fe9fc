package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A candidate refused names the leader by the value it shows now, the one
// last proclaimed, as Leader and Inspect do.
func TestRefusedCandidateNamesTheLeadersProclaimedValue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("refused-proclaim")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	if err := ld.Proclaim(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.Campaign(cctx, "b")
	var na *dlock.NotAcquiredError
	if !errors.As(err, &na) {
		t.Fatalf("Campaign under a leader: %v, want a NotAcquiredError", err)
	}
	if na.Meta != "new" {
		t.Errorf("refusal names the leader %q (%v), want its proclaimed value %q", na.Meta, err, "new")
	}
}
