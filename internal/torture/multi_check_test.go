package torture

import (
	"sort"
	"testing"
	"time"
)

// The checks of multi-locks (i), max holds (j) and holder metadata (k),
// and the exclusion check (a) over a set's parts, on small hand-made
// histories: each violating history is reported, its fixed twin is not.
func TestMultiChecks(t *testing.T) {
	const ttl = time.Second
	cases := multiCheckCases()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h []Event
			for _, es := range c.h {
				h = append(h, es...)
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := Check(h, Params{TTL: ttl})
			for _, inv := range []string{"a", "i", "j", "k"} {
				if got := r.Count(inv) > 0; got != c.fails[inv] {
					t.Errorf("(%s) violated: %v, want %v: %+v", inv, got, c.fails[inv], r.Violations)
				}
			}
		})
	}
}

// A set's waits are counted part by part from its trace: a set that slept
// through a free name it was waiting for is reported; the names it had
// not reached yet, free meanwhile, are not its waits; and parts it took and
// gave back keep their names busy.
func TestSetWaits(t *testing.T) {
	const ttl = time.Second
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	cfg := func(w string) Event { return Event{W: w, Op: OpConfig, Inv: at(-10), Note: "auto=true"} }
	held := func(w, name, cs string, from, rel int) []Event { // a lone lease, released
		return []Event{
			{W: w, Name: name, Op: OpAcquire, Inv: at(from), Ret: at(from + 1), Res: "ok", CS: cs, Tok: cs, Fence: 1, VU: at(from) + int64(ttl)},
			{W: w, Name: name, Op: OpRelease, Inv: at(rel), Ret: at(rel + 1), Res: "ok", CS: cs, Tok: cs},
		}
	}
	all := func(tr, res string, ret int) Event {
		return Event{W: "g0", Name: "n0,n1", Op: OpAll, Grp: "s", Inv: at(0), Ret: at(ret), DL: at(ret), Bound: int64(time.Second), Res: res, Note: "acquire " + tr}
	}
	cases := []struct {
		name string
		h    [][]Event
		bad  bool
	}{
		// n0 is held by g1 until 6000; the set waits for it, then takes n1 at once.
		{"waits for a held name", [][]Event{held("g1", "n0", "z", 0, 6000), {all("+n0@6001000 +n1@6002000", "ok", 6003)}}, false},
		// n1 is free all along, but the set only reaches it after n0.
		{"a later name free meanwhile", [][]Event{held("g1", "n0", "z", 0, 6000), {all("+n0@6001000 +n1@6002000", "ok", 6003)},
			held("g2", "n1", "y", 6500, 6600)}, false},
		// n1 is free from 1000 while the set, holding n0, waits for it until its context ends.
		{"sleeps through a free later name", [][]Event{held("g1", "n1", "z", 0, 1000), {all("+n0@10000", "notacq", 8000)}}, true},
		// a part taken and given back keeps its name busy: g2 waits for n0 while the set held it.
		{"a part given back", [][]Event{{all("+n0@10000 -n0@5000000", "notacq", 5001), cfg("g2"),
			{W: "g2", Name: "n0", Op: OpAcquire, Inv: at(20), Ret: at(5002), Res: "ok", CS: "w", Tok: "w", Fence: 2, VU: at(5002) + int64(ttl)}}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := []Event{cfg("g0"), cfg("g1")}
			for _, es := range c.h {
				h = append(h, es...)
			}
			sort.SliceStable(h, func(i, j int) bool { return h[i].Inv < h[j].Inv })
			r := Check(h, Params{TTL: ttl})
			if got := r.Count("d") > 0; got != c.bad {
				t.Errorf("(d) violated: %v, want %v: %+v", got, c.bad, r.Violations)
			}
		})
	}
}

// multiCheckCase is a history, in pieces, and the invariants among (a),
// (i), (j) and (k) that the check must find violated in it.
type multiCheckCase struct {
	name  string
	h     [][]Event
	fails map[string]bool
}

// multiCheckCases returns the histories of TestMultiChecks.
func multiCheckCases() []multiCheckCase {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	// set is an AcquireAll of names returning at ret with the trace tr
	// (µs since inv 0), and its parts' acquisitions.
	set := func(grp, names, seen string, n int64, res, tr string, parts ...string) []Event {
		h := []Event{{W: "g0", Name: names, Op: OpAll, Grp: grp, Inv: at(0), Ret: at(50), Res: res, Arg: n, Seen: seen, Note: "acquire " + tr}}
		for i, p := range parts {
			h = append(h, Event{W: "g0", Name: p, Op: OpAcquire, Grp: grp, Inv: at(0), Ret: at(50), Res: "ok",
				CS: grp + p, Tok: grp + p, Fence: int64(i + 1), VU: at(900)})
		}
		return h
	}
	inside := func(w, name, cs string, fence int64, from, to int) []Event {
		return []Event{
			{W: w, Name: name, Op: OpEnter, Inv: at(from), CS: cs, Tok: cs, Fence: fence, Held: true},
			{W: w, Name: name, Op: OpExit, Inv: at(to), CS: cs, Tok: cs, Fence: fence, Held: true},
		}
	}
	capped := func(hold, capAt, vu, ret int) []Event {
		return []Event{{W: "g1", Name: "n0", Op: OpAcquire, Inv: at(0), Ret: at(ret), Res: "ok", CS: "c", Tok: "c", Fence: 1,
			VU: at(vu), Hold: int64(hold) * int64(time.Millisecond), Cap: at(capAt)}}
	}
	return []multiCheckCase{
		{"a set, in order", [][]Event{set("s", "n1,n0", "n1,n0", 2, "ok", "+n0@10 +n1@20", "n0", "n1")}, nil},
		{"a set taken out of order", [][]Event{set("s", "n1,n0", "n1,n0", 2, "ok", "+n1@10 +n0@20", "n0", "n1")},
			map[string]bool{"i": true}},
		{"a round started over, in order", [][]Event{set("s", "n1,n0", "n1,n0", 2, "ok", "+n0@10 +n1@20 -n0@30 -n1@30 +n0@40 +n1@45", "n0", "n1")}, nil},
		{"a set returned with a part missing", [][]Event{set("s", "n1,n0", "n1", 1, "ok", "+n0@10 +n1@20", "n1")},
			map[string]bool{"i": true}},
		{"a set returned holding one name", [][]Event{set("s", "n1,n0", "n1,n0", 2, "ok", "+n0@10", "n0", "n1")},
			map[string]bool{"i": true}},
		{"a failed call that gave its parts back", [][]Event{set("s", "n1,n0", "", 0, "notacq", "+n0@10 -n0@30")}, nil},
		{"a DoAll whose fn failed", [][]Event{func() []Event {
			h := set("s", "n1,n0", "n1,n0", 2, "err", "+n0@10 +n1@20", "n0", "n1")
			h[0].Note = "do +n0@10 +n1@20"
			return h
		}()}, nil},
		{"a failed call that kept a part", [][]Event{set("s", "n1,n0", "", 0, "notacq", "+n0@10")},
			map[string]bool{"i": true}},
		{"a part lost, the set still held", [][]Event{{{W: "g0", Name: "n0", Op: OpAllLost, CS: "x", Inv: at(10), Held: true, Res: "closed"}}},
			map[string]bool{"i": true}},
		{"a part lost, the set lost", [][]Event{{{W: "g0", Name: "n0", Op: OpAllLost, CS: "x", Inv: at(10), Res: "closed"}}}, nil},
		{"a part and a lone holder of its name at once", [][]Event{set("s", "n1,n0", "n1,n0", 2, "ok", "+n0@10 +n1@20", "n0", "n1"),
			inside("g0", "n0", "sn0", 1, 60, 200), inside("g1", "n0", "z", 3, 100, 150)}, map[string]bool{"a": true}},
		{"a part, then a lone holder of its name", [][]Event{set("s", "n1,n0", "n1,n0", 2, "ok", "+n0@10 +n1@20", "n0", "n1"),
			inside("g0", "n0", "sn0", 1, 60, 200), inside("g1", "n0", "z", 3, 300, 350)}, nil},

		{"a cap where the max hold puts it", [][]Event{capped(700, 700, 700, 20)}, nil},
		{"a cap later than the max hold allows", [][]Event{capped(700, 800, 700, 20)}, map[string]bool{"j": true}},
		{"a validity past the cap", [][]Event{capped(700, 700, 750, 20)}, map[string]bool{"j": true}},
		{"held past the cap", [][]Event{capped(700, 700, 700, 20), inside("g1", "n0", "c", 1, 100, 720)}, map[string]bool{"j": true}},
		{"held until the cap", [][]Event{capped(700, 700, 700, 20), inside("g1", "n0", "c", 1, 100, 699)}, nil},
		{"lost at the cap without ErrMaxHold", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(701), Ret: at(701), Held: true, VU0: at(700), Cap: at(700), Res: "notheld", Err: "expired"}}}, map[string]bool{"j": true}},
		{"lost before the cap for another reason", [][]Event{capped(700, 700, 500, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(501), Ret: at(501), Held: true, VU0: at(500), Cap: at(700), Res: "notheld", Err: "expired"}}}, nil},
		{"ErrMaxHold before the cap", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(600), Ret: at(600), Held: true, VU0: at(700), Cap: at(700), Res: "notheld", Err: "max hold", MH: true}}}, map[string]bool{"j": true}},
		{"no loss signal at the cap", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(2700), Ret: at(2700), VU0: at(700), Cap: at(700), Res: "ok"}}}, map[string]bool{"j": true}},
		{"ErrMaxHold at the cap", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(702), Ret: at(702), Held: true, VU0: at(700), Cap: at(700), Res: "notheld", Err: "max hold", MH: true},
			{W: "g1", Name: "n0", Op: OpCapFree, CS: "c", Inv: at(703), Ret: at(710), Cap: at(700), Res: "released"}}}, nil},
		{"a loss signal late for a holder waiting for it", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(650), Ret: at(1800), Held: true, VU0: at(700), Cap: at(700), Res: "notheld", Err: "max hold", MH: true}}}, map[string]bool{"j": true}},
		{"a loss signal found by a holder that looked only long after the cap", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapped, CS: "c",
			Inv: at(2500), Ret: at(2500), Held: true, VU0: at(700), Cap: at(700), Res: "notheld", Err: "max hold", MH: true}}}, nil},
		{"the key still there after the cap", [][]Event{capped(700, 700, 700, 20), {{W: "g1", Name: "n0", Op: OpCapFree, CS: "c",
			Inv: at(703), Ret: at(4710), Cap: at(700), Res: "stillheld"}}}, map[string]bool{"j": true}},

		{"Inspect shows the holder's metadata", [][]Event{{{W: "g1", Name: "n0", Op: OpInspect, CS: "c", Inv: at(5), Res: "mine",
			Meta: "job-7", Seen: "job-7", LMeta: "job-7"}}}, nil},
		{"Inspect shows other metadata", [][]Event{{{W: "g1", Name: "n0", Op: OpInspect, CS: "c", Inv: at(5), Res: "mine",
			Meta: "job-7", Seen: "job%2D7", LMeta: "job-7"}}}, map[string]bool{"k": true}},
		{"Inspect shows another holder", [][]Event{{{W: "g1", Name: "n0", Op: OpInspect, CS: "c", Inv: at(5), Res: "other",
			Meta: "job-7", Seen: "x", LMeta: "job-7"}}}, nil},
	}
}
