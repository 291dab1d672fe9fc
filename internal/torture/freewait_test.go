package torture

import (
	"sort"
	"strings"
	"testing"
	"time"
)

// freeWaitCase is a history, whether check (d) must find a free wait in
// it, and the longest free stretch it must measure.
type freeWaitCase struct {
	name    string
	h       []Event
	fails   bool
	longest time.Duration
}

// freeWaitCases returns the histories of TestFreeWaits, for a lease of ttl.
func freeWaitCases(ttl time.Duration) []freeWaitCase {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	cfg := func(w string, auto bool) Event {
		note := "auto=false"
		if auto {
			note = "auto=true"
		}
		return Event{W: w, Op: OpConfig, Inv: at(-10), Note: note, Via: map[string]string{"g0": "A", "g1": "B", "g2": "C"}[w]}
	}
	held := func(w, cs string, inv, ret int) Event { // g0 takes the lock
		return Event{W: w, Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(ret), Res: "ok", CS: cs, Tok: cs,
			Fence: 1, VU: at(inv) + int64(ttl)}
	}
	delayed := func(e Event, d time.Duration) Event { e.Delay = int64(d); return e } // taken with LockDelay(d)
	release := func(w, cs string, inv, ret int, res string) Event {
		return Event{W: w, Name: "n0", Op: OpRelease, Inv: at(inv), Ret: at(ret), Res: res, CS: cs, Tok: cs}
	}
	waiter := func(inv, dl int) Event { // g1 waits in vain until its deadline
		return Event{W: "g1", Name: "n0", Op: OpAcquire, Inv: at(inv), Ret: at(dl + 5), DL: at(dl), Res: "notacq"}
	}
	fault := func(inv, ret int) Event {
		return Event{W: "coord", Op: OpFault, Note: FaultServerPause, Inv: at(inv), Ret: at(ret)}
	}
	proxyFault := func(inv, ret int, via string) Event {
		return Event{W: "coord", Op: OpFault, Note: FaultStall, Inv: at(inv), Ret: at(ret), Via: via}
	}
	return []freeWaitCase{
		{"released, waiter sleeps on", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 6000)}, true, 5890 * time.Millisecond},
		{"released, waiter gives up within the bound", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 2000)}, false, 1890 * time.Millisecond},
		{"a node paused in the stretch", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 5000), fault(1000, 1500)}, false, 2500 * time.Millisecond},
		{"a node paused, then the waiter sleeps on", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 6000), fault(1000, 1500)}, true, 3500 * time.Millisecond},
		{"lapsed without auto-extend", []Event{cfg("g0", false), cfg("g1", true), held("g0", "g0#1", 0, 10),
			waiter(50, 6000)}, true, 6000*time.Millisecond - ttl - 10*time.Millisecond - expirySlack},
		{"lapsed with a lock-delay: Redis keeps it the delay longer", []Event{cfg("g0", false), cfg("g1", true),
			delayed(held("g0", "g0#1", 0, 10), 2*time.Second), waiter(50, 6000)}, false,
			6000*time.Millisecond - ttl - 10*time.Millisecond - 2*time.Second - expirySlack},
		{"auto-extended, never released", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			waiter(50, 6000)}, false, 0},
		{"release failed: the watchdog's last lease runs out", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 500, 800, "err"), waiter(50, 5000)}, false,
			5000*time.Millisecond - 500*time.Millisecond - landingSlack - ttl - expirySlack},
		{"a proxy fault that cut off the waiter", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 5000), proxyFault(1000, 1500, "B")}, false, 2500 * time.Millisecond},
		{"a proxy fault that cut off another worker trying the lock", []Event{cfg("g0", true), cfg("g1", true), cfg("g2", true),
			held("g0", "g0#1", 0, 10), release("g0", "g0#1", 100, 110, "ok"), waiter(50, 6000),
			{W: "g2", Name: "n0", Op: OpTry, Inv: at(1200), Ret: at(1300), Res: "err"}, proxyFault(1000, 1500, "C")}, true, 5890 * time.Millisecond},
		{"a paused worker trying the lock", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 5000),
			{W: "p0", Name: "n0", Op: OpAcquire, Inv: at(900), Ret: at(4000), DL: at(1000), Res: "notacq"},
			{W: "coord", Op: OpFault, Note: FaultWorkerPause, Name: "p0", Inv: at(950), Ret: at(1100)}}, false, 2900 * time.Millisecond},
		{"a paused worker trying another lock", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 5000),
			{W: "p0", Name: "n1", Op: OpAcquire, Inv: at(900), Ret: at(4000), DL: at(1000), Res: "notacq"},
			{W: "coord", Op: OpFault, Note: FaultWorkerPause, Name: "p0", Inv: at(950), Ret: at(1100)}}, true, 4890 * time.Millisecond},
		{"next holder ends the stretch", []Event{cfg("g0", true), cfg("g1", true), cfg("g2", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 6000), held("g2", "g2#1", 2000, 2010),
			release("g2", "g2#1", 2100, 2110, "ok")}, true, 3890 * time.Millisecond},
		{"Do returns fn's error", []Event{cfg("g0", true), cfg("g1", true),
			{W: "g0", Name: "n0", Op: OpDo, Inv: at(0), Ret: at(10), Res: "ok", CS: "g0#1", Tok: "t1", VU: at(1000)},
			{W: "g0", Name: "n0", Op: OpDoRet, Inv: at(0), Ret: at(500), Tok: "t1", Res: "err", Err: errFn.Error()},
			{W: "g1", Name: "n0", Op: OpDoRet, Inv: at(50), Ret: at(5005), DL: at(5000), Res: "notacq"}}, true, 4500 * time.Millisecond},
		{"Do's fn panics", []Event{cfg("g0", true), cfg("g1", true),
			{W: "g0", Name: "n0", Op: OpDo, Inv: at(0), Ret: at(10), Res: "ok", CS: "g0#1", Tok: "t1", VU: at(1000)},
			{W: "g0", Name: "n0", Op: OpDoRet, Inv: at(0), Ret: at(500), Tok: "t1", Res: "ok", Note: "panic: x"},
			{W: "g0", Name: "n0", Op: OpPanic, Inv: at(0), Ret: at(700), Tok: "t1", Res: "released"},
			{W: "g1", Name: "n0", Op: OpDoRet, Inv: at(50), Ret: at(5005), DL: at(5000), Res: "notacq"}}, true, 4300 * time.Millisecond},
		{"killed worker", []Event{cfg("g0", true), cfg("g1", true), held("g0", "g0#1", 0, 10),
			release("g0", "g0#1", 100, 110, "ok"), waiter(50, 6000),
			{W: "coord", Op: OpFault, Note: FaultWorkerKill, Inv: at(1500), Ret: at(1501)}}, false, 390 * time.Millisecond},
	}
}

// TestFreeWaits checks the reconstruction of free stretches on small
// hand-made histories.
func TestFreeWaits(t *testing.T) {
	const ttl = time.Second
	bound := freeBound(ttl)
	cases := freeWaitCases(ttl)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := append([]Event(nil), c.h...)
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := &Report{Checked: map[string]int{}}
			checkFreeWaits(h, Params{TTL: ttl}, r)
			if got := r.Count("d") > 0; got != c.fails {
				t.Errorf("violation: %v, want %v (bound %v): %+v", got, c.fails, bound, r.Violations)
			}
			if got := time.Duration(r.Free.Longest); got != c.longest {
				t.Errorf("longest free wait %v, want %v", got, c.longest)
			}
			for _, v := range r.Violations {
				if !strings.Contains(v.Msg, "free stretch") || v.From == 0 {
					t.Errorf("violation without its stretch: %+v", v)
				}
			}
		})
	}
}
