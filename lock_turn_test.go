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
	l.give(fenceTurn) // (not the waiter's turn: it waits on)
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
	if l.turns != 0 || len(l.waits) != 0 {
		t.Fatalf("turns %b, waits %v after every turn was given back, want none", l.turns, l.waits)
	}
}

// A turn given back just as a waiter's context ends is neither lost nor
// held twice: of two calls waiting for it, the one whose context lives
// takes it, at once or once the other (which took it as its context ended)
// gives it back; a Downgrade's three turns, taken in order once it is
// given back again, are all given back.
func TestLockTurnGivenAsAWaiterLeavesIsTakenOnce(t *testing.T) {
	t.Parallel()
	wait := func(ch <-chan bool, what string) bool {
		t.Helper()
		select {
		case ok := <-ch:
			return ok
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return within 10s", what)
			return false
		}
	}
	for i := range 300 {
		var l Lock
		turn := []uint8{relTurn, extTurn, fenceTurn}[i%3]
		l.take(t.Context(), turn)
		ctx, cancel := context.WithCancel(t.Context())
		leaving, staying, all := make(chan bool, 1), make(chan bool, 1), make(chan bool, 1)
		go func() { leaving <- l.take(ctx, turn) }()
		go func() { staying <- l.take(t.Context(), turn) }()
		go cancel()
		l.give(turn)
		if wait(leaving, "a waiter whose context ended") {
			l.give(turn)
		}
		if !wait(staying, "a waiter whose context lives") {
			t.Fatal("a waiter whose context lives did not take the turn")
		}
		go func() { // (waits for turn, which the test holds for staying)
			for _, t := range []uint8{relTurn, extTurn, fenceTurn} {
				if !l.take(context.Background(), t) {
					all <- false
					return
				}
			}
			all <- true
		}()
		l.give(turn)
		if !wait(all, "a call taking every turn") {
			t.Fatal("a call taking every turn did not take them")
		}
		l.give(relTurn)
		l.give(extTurn)
		l.give(fenceTurn)
		if l.turns != 0 || len(l.waits) != 0 {
			t.Fatalf("round %d: turns %b, waits %v once every call returned, want none", i, l.turns, l.waits)
		}
	}
}
