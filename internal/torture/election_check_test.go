package torture

import (
	"testing"
	"time"
)

// Check (h) on small hand-made histories: a read of the leader must name
// it with its own term's fence and one of the term's values, and reads must
// not go back to an earlier term once a later one was read.
func TestLeaderReadChecks(t *testing.T) {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	term := func(tok string, fence int64, inv int) Event {
		return Event{W: "g0", Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(inv + 1), Res: "ok", CS: tok, Tok: tok, Fence: fence,
			VU: at(inv + 100)}
	}
	readV := func(w, tok string, fence int64, inv, ret int, value string) Event {
		return Event{W: w, Name: "n0", Op: OpLeader, Inv: at(inv), Ret: at(ret), Res: "ok", Tok: tok, Fence: fence, Seen: value}
	}
	read := func(w, tok string, fence int64, inv, ret int) Event { // showing the campaign's value
		return readV(w, tok, fence, inv, ret, "g0")
	}
	proclaim := func(tok, value string, inv int) Event {
		return Event{W: "g0", Name: "n0", Op: OpProclaim, Inv: at(inv), Ret: at(inv + 2), Res: "ok", CS: tok, Tok: tok, Seen: value}
	}
	cases := []struct {
		name string
		h    []Event
		fail bool
	}{
		{"reads in term order", []Event{term("a", 10, 0), read("g1", "a", 10, 5, 6), term("b", 20, 200),
			read("g2", "b", 20, 205, 206), read("g1", "", 0, 400, 401)}, false},
		{"a leader read with another term's fence", []Event{term("a", 10, 0), read("g1", "a", 9, 5, 6)}, true},
		{"a leader read with a later fence than its campaign's", []Event{term("a", 10, 0), read("g1", "a", 11, 5, 6)}, true},
		{"a term handed to a paused candidate before its campaign's", []Event{read("g1", "a", 5, 0, 1), term("a", 10, 0)}, false},
		{"a later read names an earlier term", []Event{term("a", 10, 0), term("b", 20, 200),
			read("g1", "b", 20, 205, 206), read("g2", "a", 10, 210, 211)}, true},
		{"a read after the next campaign returned names the term before", []Event{term("a", 10, 0), term("b", 20, 200),
			read("g2", "a", 10, 210, 211)}, true},
		{"a read overlapping the next campaign names the term before", []Event{term("a", 10, 0), term("b", 20, 200),
			read("g2", "a", 10, 199, 211)}, false},
		{"a read shows the value proclaimed", []Event{term("a", 10, 0), proclaim("a", "p:a:1", 10), readV("g1", "a", 10, 15, 16, "p:a:1")}, false},
		{"a read during the Proclaim shows either", []Event{term("a", 10, 0), read("g1", "a", 10, 11, 12), proclaim("a", "p:a:1", 10),
			readV("g2", "a", 10, 11, 12, "p:a:1")}, false},
		{"a read shows the campaign's value after a Proclaim returned", []Event{term("a", 10, 0), proclaim("a", "p:a:1", 10),
			read("g1", "a", 10, 15, 16)}, true},
		{"a read shows a value before it was proclaimed", []Event{term("a", 10, 0), readV("g1", "a", 10, 5, 6, "p:a:1"),
			proclaim("a", "p:a:1", 10)}, true},
		{"a read shows another term's value", []Event{term("a", 10, 0), proclaim("a", "p:a:1", 10), term("b", 20, 200),
			readV("g1", "b", 20, 205, 206, "p:a:1")}, true},
		{"a read shows a value nobody gave", []Event{term("a", 10, 0), readV("g1", "a", 10, 5, 6, "g7")}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{Checked: map[string]int{}}
			checkLeaderReads(c.h, nil, r)
			if got := r.Count("h") > 0; got != c.fail {
				t.Errorf("(h) violated: %v, want %v: %+v", got, c.fail, r.Violations)
			}
		})
	}
}
