package torture

import (
	"sort"
	"testing"
	"time"
)

// The checks of an rw round, on small hand-made histories: (a) lets reads
// overlap and nothing else, (b) wants a write's fence above every earlier
// hold's and a read's above every earlier write's, and (g) orders a read's
// release after later writes only; a downgraded write is a read from its
// Downgrade on.
func TestRWChecks(t *testing.T) {
	const ttl = time.Second
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	tok := func(cs string, write bool) string {
		if write {
			return cs + ".w"
		}
		return cs + ".r"
	}
	inside := func(w, cs string, write bool, from, to int) []Event { // a critical section
		return []Event{
			{W: w, Name: "n0", Op: OpEnter, Inv: at(from), CS: cs, Tok: tok(cs, write), Held: true},
			{W: w, Name: "n0", Op: OpExit, Inv: at(to), CS: cs, Tok: tok(cs, write), Held: true},
		}
	}
	acquired := func(w, cs string, write bool, fence int64, inv int) Event {
		return Event{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(inv + 5), Res: "ok", CS: cs, Tok: tok(cs, write),
			Fence: fence, VU: at(inv) + int64(ttl)}
	}
	released := func(w, cs string, write bool, fence int64, inv int) Event {
		return Event{W: w, Name: "n0", Op: OpRelease, Inv: at(inv), Ret: at(inv + 5), Res: "ok", CS: cs, Tok: tok(cs, write),
			Fence: fence, VU0: at(inv) + int64(ttl), Held: true}
	}
	downgraded := func(w, cs string, inv int, res string) Event { // cs's write downgraded to a read
		return Event{W: w, Name: "n0", Op: OpDowngrade, Inv: at(inv), Ret: at(inv + 5), Res: res, CS: cs, Tok: tok(cs, true),
			VU0: at(inv) + int64(ttl), Held: true}
	}
	// a's write from 0 to 40, downgraded at 50, then a's read from 60 to 100
	downgradedWrite := []Event{inside("g0", "a", true, 0, 40)[0], inside("g0", "a", true, 0, 40)[1], downgraded("g0", "a", 50, "ok"),
		inside("g0", "a", true, 60, 100)[0], inside("g0", "a", true, 60, 100)[1]}
	cases := []struct {
		name  string
		h     [][]Event
		fails map[string]bool
	}{
		{"two reads at once", [][]Event{inside("g0", "a", false, 0, 100), inside("g1", "b", false, 50, 150)}, map[string]bool{}},
		{"a write inside a read", [][]Event{inside("g0", "a", false, 0, 100), inside("g1", "b", true, 50, 150)}, map[string]bool{"a": true}},
		{"a read inside a write", [][]Event{inside("g0", "a", true, 0, 100), inside("g1", "b", false, 50, 150)}, map[string]bool{"a": true}},
		{"two writes at once", [][]Event{inside("g0", "a", true, 0, 100), inside("g1", "b", true, 50, 150)}, map[string]bool{"a": true}},
		{"read, write, read in turn", [][]Event{inside("g0", "a", false, 0, 100), inside("g1", "b", true, 120, 150),
			inside("g2", "c", false, 160, 200)}, map[string]bool{}},
		{"a read joins a downgraded write", [][]Event{downgradedWrite, inside("g1", "b", false, 70, 150)}, map[string]bool{}},
		{"a read inside the write before its downgrade", [][]Event{downgradedWrite, inside("g1", "b", false, 30, 150)},
			map[string]bool{"a": true}},
		{"a write inside a downgraded write's read", [][]Event{downgradedWrite, inside("g1", "b", true, 70, 150)},
			map[string]bool{"a": true}},
		{"a downgrade refused while the write was valid", [][]Event{{downgraded("g0", "a", 50, "notheld")}}, map[string]bool{"g": true}},
		{"a downgraded write released after a later read", [][]Event{{acquired("g0", "a", true, 1, 0), downgraded("g0", "a", 6, "ok"),
			acquired("g1", "b", false, 2, 12), released("g0", "a", true, 1, 20)}}, map[string]bool{}},
		{"a downgraded write released after a later write", [][]Event{{acquired("g0", "a", true, 1, 0), downgraded("g0", "a", 6, "ok"),
			acquired("g1", "b", true, 2, 12), released("g0", "a", true, 1, 20)}}, map[string]bool{"g": true}},
		{"reads' fences out of order", [][]Event{{acquired("g0", "a", false, 8, 0), acquired("g1", "b", false, 7, 10)}}, map[string]bool{}},
		{"a write fenced below an earlier read", [][]Event{{acquired("g0", "a", false, 8, 0), acquired("g1", "b", true, 7, 10)}},
			map[string]bool{"b": true}},
		{"a read fenced below an earlier write", [][]Event{{acquired("g0", "a", true, 8, 0), acquired("g1", "b", false, 7, 10)}},
			map[string]bool{"b": true}},
		{"a read released after a later read", [][]Event{{acquired("g0", "a", false, 1, 0), acquired("g1", "b", false, 2, 10),
			released("g0", "a", false, 1, 20)}}, map[string]bool{}},
		{"a read released after a later write", [][]Event{{acquired("g0", "a", false, 1, 0), acquired("g1", "b", true, 2, 10),
			released("g0", "a", false, 1, 20)}}, map[string]bool{"g": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h []Event
			for _, es := range c.h {
				h = append(h, es...)
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := Check(h, Params{TTL: ttl, Permits: 1, RW: true})
			for _, inv := range []string{"a", "b", "g"} {
				want := c.fails[inv]
				if got := r.Count(inv) > 0; got != want {
					t.Errorf("(%s) violated: %v, want %v: %+v", inv, got, want, r.Violations)
				}
			}
		})
	}
}
