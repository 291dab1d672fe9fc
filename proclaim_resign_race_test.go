package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Proclaims racing a Resign each end with nil or ErrReleased: a Proclaim
// that Redis refuses because the Resign's delete came first reports the
// release, not a loss, and no loss is told. Once all are over, nothing the
// term wrote is left: no Proclaim landing after the Resign wrote the value
// key back, and the next leader shows its own value.
func TestProclaimsRacingResignEndAsReleasedAndLeaveNoValue(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var losses atomic.Int32
	c := newClient(t, rdb, dlock.LeaseTTL(10*time.Second),
		dlock.WithObserver(dlock.Observer{Lost: func(context.Context, *dlock.Event) { losses.Add(1) }}))
	for round := range 20 {
		name := fmt.Sprint("pr-race-", round)
		e := newElection(t, c, name)
		ld, err := e.Campaign(ctx, "first")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4*8)
		for g := range 4 {
			wg.Go(func() {
				for i := range 8 {
					errs <- ld.Proclaim(ctx, fmt.Sprint("v", g, "-", i))
				}
			})
		}
		wg.Go(func() {
			if err := ld.Resign(ctx); err != nil {
				t.Errorf("round %d: Resign amid Proclaims = %v, want nil", round, err)
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, dlock.ErrReleased) {
				t.Errorf("round %d: a Proclaim racing Resign = %v, want nil or ErrReleased", round, err)
			}
		}
		if err := ld.Err(); !errors.Is(err, dlock.ErrReleased) {
			t.Errorf("round %d: the Leadership's Err after Resign = %v, want ErrReleased", round, err)
		}
		if n := rdb.Exists(ctx, "dlock:{"+name+"}:v").Val(); n != 0 {
			t.Errorf("round %d: the value key %q is left after Resign", round, rdb.Get(ctx, "dlock:{"+name+"}:v").Val())
		}
		next, err := e.Campaign(ctx, "next")
		if err != nil {
			t.Fatal(err)
		}
		if l, err := e.Leader(ctx); err != nil || l.Value != "next" {
			t.Errorf("round %d: the next leader = %+v, %v; want its own value", round, l, err)
		}
		next.Resign(ctx)
	}
	if n := losses.Load(); n != 0 {
		t.Errorf("%d losses told for terms that were resigned", n)
	}
}
