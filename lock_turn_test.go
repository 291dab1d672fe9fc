package dlock

import (
	"context"
	"testing"
	"time"
)

// A Lock's turns: a call waits while its sort's turn is taken, and takes it
// once given back; it leaves when its context ends first (even one that
// ends while it waits); a taken turn of another sort does not hold it up,
// and a free turn is taken whatever the context.
func TestLockTurnWaitsForItsSortOnlyAndHonoursItsContext(t *testing.T) {
	t.Parallel()
	var l Lock
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if !l.take(done, relTurn) {
		t.Fatal("a free turn was refused to an ended context")
	}
	if !l.take(done, extTurn) || !l.take(done, fenceTurn) {
		t.Fatal("a turn of another sort was held up by a taken one")
	}
	if l.take(done, relTurn) {
		t.Fatal("a taken turn was taken again")
	}
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan bool)
	go func() { left <- l.take(ctx, extTurn) }()
	l.give(fenceTurn) // (wakes the waiter, which finds its own turn still taken)
	cancel()
	if <-left {
		t.Fatal("a call whose context ended while it waited took a taken turn")
	}
	got := make(chan bool)
	go func() { got <- l.take(t.Context(), relTurn) }()
	l.give(relTurn)
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("a waiting call did not take the turn given back")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting call did not take the turn given back within 10s")
	}
	l.give(relTurn)
	l.give(extTurn)
	if l.turns != 0 || l.freed != nil {
		t.Fatalf("turns %b, freed %v after every turn was given back, want none", l.turns, l.freed)
	}
}
