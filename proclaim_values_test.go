package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A proclaimed value is shown exactly, whatever it holds: empty, spaces,
// braces, or what looks like the value key's own numbering; and a later
// Proclaim still replaces it.
func TestProclaimedValuesWithSpacesBracesOrNothingAreShownExactly(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("pv")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "x {1} y")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	for _, v := range []string{"x {1} y", "", " ", "{99} z", "} {", "a b  c", "{", "tok{3} v", "last"} {
		if v != "x {1} y" {
			if err := ld.Proclaim(ctx, v); err != nil {
				t.Fatalf("Proclaim(%q): %v", v, err)
			}
		}
		got, err := e.Leader(ctx)
		if err != nil || got.Value != v || got.Token != ld.Lock().Token() {
			t.Errorf("after %q: Leader = %+v, %v", v, got, err)
		}
		if ld.Value() != v {
			t.Errorf("Value = %q, want %q", ld.Value(), v)
		}
	}
}
