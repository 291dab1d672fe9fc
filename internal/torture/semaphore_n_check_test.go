package torture

import (
	"sort"
	"testing"
	"time"
)

// The checks of a semaphore round where holds take several permits at
// once (AcquireN), on small hand-made histories: (a) weighs each critical
// section by the permits its hold took; (d) counts a semaphore free for a
// waiter only while the permits it needs may be free, and while no waiter
// ahead of it in the queue (called before it was told to wait) waits for
// more than are free: such a head holds up everyone behind it.
func TestSemaphoreChecksWeighPermits(t *testing.T) {
	const ttl = time.Second
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	cfg := func(w string) Event { return Event{W: w, Op: OpConfig, Inv: at(-10), Note: "auto=true"} }
	// hold is a critical section of a hold of n permits, with its
	// acquisition (which says n) just before it.
	hold := func(w, cs string, fence int64, n, from, to int) []Event {
		return []Event{
			{W: w, Name: "n0", Op: OpAcquire, Inv: at(from - 5), Ret: at(from - 2), Res: "ok", CS: cs, Tok: cs, Fence: fence, N: n},
			{W: w, Name: "n0", Op: OpEnter, Inv: at(from), CS: cs, Tok: cs, Fence: fence, Held: true},
			{W: w, Name: "n0", Op: OpExit, Inv: at(to), CS: cs, Tok: cs, Fence: fence, Held: true},
		}
	}
	size := func(inv, delta, got int) Event { // a change of the kept size by the sizer
		return Event{W: "g0", Name: "n0", Op: OpSize, Inv: at(inv), Ret: at(inv + 1), Arg: int64(delta), Size: int64(got), Res: "ok"}
	}
	// held: w holds n permits from inv on (auto-extended, never released).
	held := func(w, cs string, fence int64, n, inv int) Event {
		return Event{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(inv + 5), Res: "ok", CS: cs, Tok: cs,
			Fence: fence, VU: at(inv) + int64(ttl), N: n}
	}
	// waiter: w, called at inv and told to wait at queued (none if 0),
	// waits in vain for n permits until its deadline dl.
	waiter := func(w string, n, inv, queued, dl int) []Event {
		es := []Event{{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(dl + 5), DL: at(dl), Bound: int64(time.Second), Res: "notacq", N: n}}
		if queued != 0 {
			es = append(es, Event{W: w, Name: "n0", Op: OpQueued, Inv: at(queued)})
		}
		return es
	}
	pause := func(w string, inv, ret int) Event { // w's process stopped
		return Event{W: "coord", Name: w + " pid", Op: OpFault, Note: FaultWorkerPause, Inv: at(inv), Ret: at(ret)}
	}
	cfgs := []Event{cfg("g0"), cfg("g1"), cfg("g8"), cfg("g9")}
	cases := []struct {
		name    string
		permits int
		h       [][]Event
		fails   map[string]bool // the invariants violated
	}{
		// (a)
		{"a hold of 2 and two of 1 at once, of 3", 3, [][]Event{hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 1, 50, 150),
			hold("g2", "c", 3, 1, 80, 200)}, map[string]bool{"a": true}},
		{"a hold of 2 entering beside two of 1, of 3", 3, [][]Event{hold("g0", "a", 1, 1, 0, 100), hold("g1", "b", 2, 1, 50, 150),
			hold("g2", "c", 3, 2, 80, 200)}, map[string]bool{"a": true}},
		{"a hold of 2 beside one of 1, of 3", 3, [][]Event{hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 1, 50, 150)},
			map[string]bool{}},
		{"a hold of 2, then two of 1 once it ended, of 3", 3, [][]Event{hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 1, 50, 150),
			hold("g2", "c", 3, 1, 120, 200)}, map[string]bool{}},
		{"two holds of 2 at once, of 3", 3, [][]Event{hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 2, 50, 150)},
			map[string]bool{"a": true}},
		{"a hold of 2 beside one of 1, of 2", 2, [][]Event{hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 1, 50, 150)},
			map[string]bool{"a": true}},
		{"a hold of 2 beside one of 1, of 2 whose size grew to 3", 2, [][]Event{{size(-50, 1, 3)}, hold("g0", "a", 1, 2, 0, 100),
			hold("g1", "b", 2, 1, 50, 150)}, map[string]bool{}},
		{"a hold of 2 beside one of 1, of 2 whose size grew and shrank back", 2, [][]Event{{size(-50, 1, 3), size(-30, -1, 2)},
			hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 1, 50, 150)}, map[string]bool{"a": true}},
		// (d)
		{"a waiter for 1 behind a waiter for 2, one of 3 held", 3, [][]Event{cfgs, {held("g0", "a", 1, 1, 0)},
			{held("g1", "b", 2, 1, 10)}, waiter("g8", 2, 40, 45, 6000), waiter("g9", 1, 50, 55, 6000)}, map[string]bool{}},
		{"a waiter for 1 behind a waiter for 2 whose request landed first", 2, [][]Event{cfgs, {held("g0", "a", 1, 1, 0)},
			waiter("g9", 1, 50, 70, 6000), waiter("g8", 2, 60, 65, 6000)}, map[string]bool{}},
		{"a waiter for 2, one of 2 held", 2, [][]Event{cfgs, {held("g0", "a", 1, 1, 0)}, waiter("g8", 2, 40, 45, 6000)},
			map[string]bool{}},
		{"a waiter for 1, a hold of 2 of 3 held", 3, [][]Event{cfgs, {held("g0", "a", 1, 2, 0)}, waiter("g9", 1, 50, 55, 6000)},
			map[string]bool{"d": true}},
		{"a waiter for 2, a hold of 2 of 3 held", 3, [][]Event{cfgs, {held("g0", "a", 1, 2, 0)}, waiter("g8", 2, 50, 55, 6000)},
			map[string]bool{}},
		{"a waiter for 1 before a waiter for 2, one of 2 held", 2, [][]Event{cfgs, {held("g0", "a", 1, 1, 0)},
			waiter("g9", 1, 50, 55, 6000), waiter("g8", 2, 100, 105, 6000)}, map[string]bool{"d": true}},
		{"a waiter for 1 after a waiter for 2 gave up, one of 2 held", 2, [][]Event{cfgs, {held("g0", "a", 1, 1, 0)},
			waiter("g8", 2, 40, 45, 500), waiter("g9", 1, 50, 55, 6000)}, map[string]bool{"d": true}},
		{"waiters for 2 and for 1 with 2 of 3 free", 3, [][]Event{cfgs, {held("g0", "a", 1, 1, 0)},
			waiter("g8", 2, 40, 45, 6000), waiter("g9", 1, 50, 55, 6000)}, map[string]bool{"d": true}},
		{"a waiter for 1 stopped, then behind a later waiter for 2", 2, [][]Event{cfgs, {held("g0", "a", 1, 1, 0), pause("g9", 1000, 2500)},
			waiter("g9", 1, 50, 55, 8000), waiter("g8", 2, 2000, 2005, 8000)}, map[string]bool{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h []Event
			for _, es := range c.h {
				h = append(h, es...)
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := Check(h, Params{TTL: ttl, Permits: c.permits})
			for _, inv := range []string{"a", "d"} {
				want := c.fails[inv]
				if got := r.Count(inv) > 0; got != want {
					t.Errorf("(%s) violated: %v, want %v: %+v", inv, got, want, r.Violations)
				}
			}
		})
	}
}

// A semaphore round's summary counts the cases only N > 2 can show: a hold
// entered beside another where one of them took several permits, within
// N (Report.Beside), and a waiter kept waiting, with the permits it needs
// free, behind a waiter for more (FreeWaits.Behind).
func TestSemaphoreSummaryCountsHoldsBesideAndWaitsBehind(t *testing.T) {
	const ttl = time.Second
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	hold := func(w, cs string, fence int64, n, from, to int) []Event {
		return []Event{
			{W: w, Name: "n0", Op: OpAcquire, Inv: at(from - 5), Ret: at(from - 2), Res: "ok", CS: cs, Tok: cs, Fence: fence, N: n},
			{W: w, Name: "n0", Op: OpEnter, Inv: at(from), CS: cs, Tok: cs, Fence: fence, Held: true},
			{W: w, Name: "n0", Op: OpExit, Inv: at(to), CS: cs, Tok: cs, Fence: fence, Held: true},
		}
	}
	held := func(w, cs string, fence int64, inv int) []Event { // 1 permit from inv on, never released
		return []Event{{W: w, Op: OpConfig, Inv: at(-10), Note: "auto=true"}, {W: w, Name: "n0", Op: OpAcquire, Inv: at(inv),
			Ret: at(inv + 5), Res: "ok", CS: cs, Tok: cs, Fence: fence, VU: at(inv) + int64(ttl)}}
	}
	waiter := func(w string, n, inv int) []Event { // waits in vain for n permits until 6s
		return []Event{{W: w, Op: OpConfig, Inv: at(-10), Note: "auto=true"},
			{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(6005), DL: at(6000), Bound: int64(time.Second), Res: "notacq", N: n},
			{W: w, Name: "n0", Op: OpQueued, Inv: at(inv + 5)}}
	}
	cases := []struct {
		name           string
		permits        int
		h              [][]Event
		beside, behind int
	}{
		{"a hold of 1 entering beside one of 2, of 3", 3, [][]Event{hold("g0", "a", 1, 2, 0, 100), hold("g1", "b", 2, 1, 50, 150)}, 1, 0},
		{"a hold of 2 entering beside one of 1, of 3", 3, [][]Event{hold("g0", "a", 1, 1, 0, 100), hold("g1", "b", 2, 2, 50, 150)}, 1, 0},
		{"two holds of 1 at once, of 3", 3, [][]Event{hold("g0", "a", 1, 1, 0, 100), hold("g1", "b", 2, 1, 50, 150)}, 0, 0},
		{"a hold of 2 after one of 1 ended, of 3", 3, [][]Event{hold("g0", "a", 1, 1, 0, 100), hold("g1", "b", 2, 2, 120, 150)}, 0, 0},
		{"a waiter for 1 behind a waiter for 2, two of 3 held", 3, [][]Event{held("g0", "a", 1, 0), held("g1", "b", 2, 10),
			waiter("g8", 2, 40), waiter("g9", 1, 50)}, 0, 1},
		{"a waiter for 1 ahead of a waiter for 2, all of 2 held", 2, [][]Event{held("g0", "a", 1, 0), held("g1", "b", 2, 10),
			waiter("g9", 1, 40), waiter("g8", 2, 50)}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h []Event
			for _, es := range c.h {
				h = append(h, es...)
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := Check(h, Params{TTL: ttl, Permits: c.permits})
			if r.Beside != c.beside || r.Free.Behind != c.behind {
				t.Errorf("beside %d, behind %d (%v); want %d and %d; violations: %+v",
					r.Beside, r.Free.Behind, time.Duration(r.Free.BehindTime), c.beside, c.behind, r.Violations)
			}
			if c.behind > 0 && r.Free.BehindTime <= 0 {
				t.Errorf("behind for %v, want a while", time.Duration(r.Free.BehindTime))
			}
			if len(r.Violations) > 0 {
				t.Errorf("violations: %+v", r.Violations)
			}
		})
	}
}
