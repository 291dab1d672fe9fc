package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Inspect (and so `dlock inspect`) reads an election's leader as Leader
// does: its Meta is the value last proclaimed, not the campaign's.
func TestInspectShowsTheLeadersProclaimedValue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("insp-proclaim")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	if in, err := c.Inspect(ctx, "insp-proclaim"); err != nil || in.Meta != "first" {
		t.Fatalf("Inspect before Proclaim = %+v, %v; want Meta first", in, err)
	}
	if err := ld.Proclaim(ctx, "second value"); err != nil {
		t.Fatal(err)
	}
	in, err := c.Inspect(ctx, "insp-proclaim")
	if err != nil || in.Meta != "second value" || in.Token != ld.Lock().Token() {
		t.Errorf("Inspect after Proclaim = %+v, %v; want Meta %q (Leader shows it)", in, err, "second value")
	}
	if got, _ := e.Leader(ctx); got.Value != "second value" {
		t.Errorf("Leader = %+v", got)
	}
}

// A Client made WithoutScripts reads an election's leader as a scripted
// one does: Inspect's Meta is the value last proclaimed.
func TestInspectWithoutScriptsShowsTheLeadersProclaimedValue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("insp-proclaim-ns")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	if err := ld.Proclaim(ctx, "second value"); err != nil {
		t.Fatal(err)
	}
	ns := newClient(t, rdb, dlock.WithoutScripts())
	in, err := ns.Inspect(ctx, "insp-proclaim-ns")
	if err != nil || in.Meta != "second value" || in.Token != ld.Lock().Token() {
		t.Errorf("Inspect WithoutScripts after Proclaim = %+v, %v; want Meta %q", in, err, "second value")
	}
}

// A leader that proclaimed the empty value shows it: Inspect's Meta is
// "", as Leader's Value is, not the metadata its lease token carries.
func TestInspectShowsALeadersEmptyProclaimedValue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("insp-proclaim-empty")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	if err := ld.Proclaim(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Inspect(ctx, "insp-proclaim-empty"); err != nil || in.Meta != "" || in.Token != ld.Lock().Token() {
		t.Errorf("Inspect after Proclaim(\"\") = %+v, %v; want Meta \"\"", in, err)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "" {
		t.Errorf("Leader after Proclaim(\"\") = %+v, %v; want Value \"\"", got, err)
	}
}
