package backend

import (
	"context"
	"errors"
	"testing"
)

// Wait is Drain without draining: a test's wait for what the tracker
// counts, after which it goes on.
func (t *Tracker) Wait(ctx context.Context) error { return t.wait(ctx, false) }

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
		if !tr.Go(func() { <-release }) {
			t.Fatalf("round %d: Go after a Wait = false, want true: only Drain drains", round)
		}
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

// Lend leaves its caller uncounted while f runs, so that a Drain in f
// returns; it reports false once drained meanwhile, and counts its caller
// again either way.
func TestTrackerLendUncountsItsCaller(t *testing.T) {
	t.Parallel()
	var tr Tracker
	tr.Enter()
	if !tr.Lend(func() {}) {
		t.Error("Lend with no Wait meanwhile = false, want true")
	}
	var waited error
	if !tr.Lend(func() { waited = tr.Wait(t.Context()) }) {
		t.Error("Lend whose f waited = false, want true: only Drain drains")
	}
	if tr.Lend(func() { waited = tr.Drain(t.Context()) }) {
		t.Error("Lend whose f drained = true, want false: the Drain found nothing counted")
	}
	if waited != nil {
		t.Errorf("Drain in a lent f = %v, want nil", waited)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := tr.Wait(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait once Lend counted its caller again = %v, want context.Canceled", err)
	}
	tr.Leave()
}

// Once drained, Go starts nothing and reports false, also after a Drain
// whose ctx ended first, once the count is back at zero; Enter still
// counts.
func TestTrackerStartsNothingOnceDrained(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, drainEnded := range []bool{false, true} {
		var tr Tracker
		if drainEnded {
			tr.Enter()
			if err := tr.Drain(ended); !errors.Is(err, context.Canceled) {
				t.Fatalf("Drain while counting, its ctx ended = %v, want context.Canceled", err)
			}
			tr.Leave()
		} else if err := tr.Drain(t.Context()); err != nil {
			t.Fatalf("Drain on a new Tracker = %v, want nil", err)
		}
		ran := make(chan struct{})
		if tr.Go(func() { close(ran) }) {
			<-ran
			t.Errorf("drainEnded=%v: Go once drained = true, want false", drainEnded)
		}
		select {
		case <-ran:
			t.Errorf("drainEnded=%v: Go once drained ran its function", drainEnded)
		default:
		}
		tr.Enter()
		if err := tr.Wait(ended); !errors.Is(err, context.Canceled) {
			t.Errorf("drainEnded=%v: Wait after an Enter once drained = %v, want context.Canceled", drainEnded, err)
		}
		tr.Leave()
	}
}
