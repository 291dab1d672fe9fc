package torture

import (
	"sort"
	"testing"
	"time"
)

// The checks of a semaphore round, on small hand-made histories: (a)
// allows N holders at once and no more (N+1 of a name whose kept size the
// sizer changes), (b) wants distinct fences, not ordered ones, (d) counts
// a semaphore free while fewer than N of its leases may be held, and (p)
// wants every size a change returned to be N or N+1.
func TestSemaphoreChecks(t *testing.T) {
	const ttl = time.Second
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	cfg := func(w string) Event { return Event{W: w, Op: OpConfig, Inv: at(-10), Note: "auto=true"} }
	inside := func(w, cs string, fence int64, from, to int) []Event { // a critical section
		return []Event{
			{W: w, Name: "n0", Op: OpEnter, Inv: at(from), CS: cs, Tok: cs, Fence: fence, Held: true},
			{W: w, Name: "n0", Op: OpExit, Inv: at(to), CS: cs, Tok: cs, Fence: fence, Held: true},
		}
	}
	acquired := func(w, cs string, fence int64, inv int) Event { // auto-extended, never released
		return Event{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(inv + 5), Res: "ok", CS: cs, Tok: cs,
			Fence: fence, VU: at(inv) + int64(ttl)}
	}
	size := func(inv, delta, got int, res string) Event { // a change of the kept size by the sizer
		return Event{W: "g0", Name: "n0", Op: OpSize, Inv: at(inv), Ret: at(inv + 1), Arg: int64(delta), Size: int64(got), Res: res}
	}
	called := func(w, cs string, inv int) Event { // the acquisition of a critical section
		return Event{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(inv + 2), Res: "ok", CS: cs, Tok: cs}
	}
	three := [][]Event{inside("g1", "a", 1, 0, 100), inside("g2", "b", 2, 50, 150), inside("g3", "c", 3, 80, 200),
		{called("g1", "a", -2), called("g2", "b", 45), called("g3", "c", 75)}}
	waiter := Event{W: "g9", Name: "n0", Op: OpAcquire, Inv: at(50), Ret: at(6005), DL: at(6000), Bound: int64(time.Second), Res: "notacq"}
	cases := []struct {
		name    string
		permits int
		h       [][]Event
		fails   map[string]bool // the invariants violated
	}{
		{"two holders of a lock", 1, [][]Event{inside("g0", "a", 1, 0, 100), inside("g1", "b", 2, 50, 150)},
			map[string]bool{"a": true}},
		{"two holders of a semaphore of 2", 2, [][]Event{inside("g0", "a", 1, 0, 100), inside("g1", "b", 2, 50, 150)},
			map[string]bool{}},
		{"three holders of a semaphore of 2", 2, [][]Event{inside("g0", "a", 1, 0, 100), inside("g1", "b", 2, 50, 150),
			inside("g2", "c", 3, 80, 200)}, map[string]bool{"a": true}},
		{"three holders of a semaphore of 2 whose size grew", 2, append(three, []Event{size(-5, 1, 3, "ok")}),
			map[string]bool{}},
		{"four holders of a semaphore of 2 whose size grew", 2, [][]Event{{size(-5, 1, 3, "ok")}, inside("g0", "a", 1, 0, 100),
			inside("g1", "b", 2, 50, 150), inside("g2", "c", 3, 80, 200), inside("g3", "d", 4, 90, 210)}, map[string]bool{"a": true}},
		{"three holders after the size shrank back to 2", 2, append(three, []Event{size(-30, 1, 3, "ok"), size(-20, -1, 2, "ok")}),
			map[string]bool{"a": true}},
		{"three holders, the last asking while the size shrank", 2, append(three, []Event{size(-30, 1, 3, "ok"), size(77, -1, 2, "ok")}),
			map[string]bool{}},
		{"three holders after a failed shrink", 2, append(three, []Event{size(-30, 1, 3, "ok"), size(-20, -1, 0, "err")}),
			map[string]bool{}},
		{"three holders before the size grew", 2, append(three, []Event{size(90, 1, 3, "ok")}),
			map[string]bool{"a": true}},
		{"a size change applied twice", 2, [][]Event{{size(-5, 1, 4, "ok")}}, map[string]bool{"p": true}},
		{"a size taken below N", 2, [][]Event{{size(-5, -1, 1, "ok")}}, map[string]bool{"p": true}},
		{"a failed size change", 2, [][]Event{{size(-5, 1, 0, "err")}}, map[string]bool{}},
		{"three in turn, two at a time", 2, [][]Event{inside("g0", "a", 1, 0, 100), inside("g1", "b", 2, 50, 150),
			inside("g2", "c", 3, 120, 200)}, map[string]bool{}},
		{"two permits with one fence", 2, [][]Event{{acquired("g0", "a", 7, 0), acquired("g1", "b", 7, 10)}},
			map[string]bool{"b": true}},
		{"fences out of acquisition order", 2, [][]Event{{acquired("g0", "a", 8, 0), acquired("g1", "b", 7, 10)}},
			map[string]bool{}},
		{"a permit free while a waiter sleeps", 2, [][]Event{{cfg("g0"), cfg("g9"), acquired("g0", "a", 1, 0), waiter}},
			map[string]bool{"d": true}},
		{"both permits held while a waiter sleeps", 2, [][]Event{{cfg("g0"), cfg("g1"), cfg("g9"), acquired("g0", "a", 1, 0),
			acquired("g1", "b", 2, 10), waiter}}, map[string]bool{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h []Event
			for _, es := range c.h {
				h = append(h, es...)
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := Check(h, Params{TTL: ttl, Permits: c.permits})
			for _, inv := range []string{"a", "b", "d", "p"} {
				want := c.fails[inv]
				if got := r.Count(inv) > 0; got != want {
					t.Errorf("(%s) violated: %v, want %v: %+v", inv, got, want, r.Violations)
				}
			}
		})
	}
}
