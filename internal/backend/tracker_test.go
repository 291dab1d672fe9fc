package backend

import (
	"context"
	"errors"
	"testing"
)

// Wait returns at once when nothing is counted, waits for every goroutine
// and call counted, and does so again once the count went back to zero.
func TestTrackerWaitsForWhatItCounts(t *testing.T) {
	t.Parallel()
	var tr Tracker
	if err := tr.Wait(t.Context()); err != nil {
		t.Fatalf("Wait on a new Tracker = %v, want nil", err)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for round := range 2 {
		release := make(chan struct{})
		tr.Go(func() { <-release })
		tr.Enter()
		if err := tr.Wait(ended); !errors.Is(err, context.Canceled) {
			t.Errorf("round %d: Wait while counting, its ctx ended = %v, want context.Canceled", round, err)
		}
		tr.Leave()
		close(release)
		if err := tr.Wait(t.Context()); err != nil {
			t.Errorf("round %d: Wait = %v, want nil", round, err)
		}
		if err := tr.Wait(ended); err != nil {
			t.Errorf("round %d: Wait once nothing is counted, its ctx ended = %v, want nil", round, err)
		}
	}
}

// Lend leaves its caller uncounted while f runs, so that a Wait in f
// returns; it reports false once a Wait found nothing counted meanwhile,
// and counts its caller again either way.
func TestTrackerLendUncountsItsCaller(t *testing.T) {
	t.Parallel()
	var tr Tracker
	tr.Enter()
	if !tr.Lend(func() {}) {
		t.Error("Lend with no Wait meanwhile = false, want true")
	}
	var waited error
	if tr.Lend(func() { waited = tr.Wait(t.Context()) }) {
		t.Error("Lend whose f waited = true, want false: the Wait found nothing counted")
	}
	if waited != nil {
		t.Errorf("Wait in a lent f = %v, want nil", waited)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := tr.Wait(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait once Lend counted its caller again = %v, want context.Canceled", err)
	}
	tr.Leave()
}
