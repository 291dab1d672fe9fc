package torture

import (
	"slices"
	"strings"
	"time"
)

// This file holds the checks of multi-locks (i), max holds (j) and holder
// metadata (k). (a)–(g) see each part of a set, and each lease taken with
// per-call options, as any other lease: the parts are acquisitions of
// their names, and the checks that count a lease's time use the lease
// time it asked for (ttlOf).

// capSlack absorbs the difference between the history's clock (wall time)
// and the library's (monotonic) over a lease's life.
const capSlack = int64(5 * time.Millisecond)

// checkMulti is (i): a set returned is the set asked for, each part taken
// in one global order (the names' bytes; a round that starts over gives
// back what it took first), all of them held when the call returned; a
// call that failed kept none; a part's loss is the set's.
func checkMulti(h []Event, r *Report) {
	parts := map[string][]Event{}
	for _, e := range h {
		if e.Grp != "" && (e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDo) && e.Res == "ok" {
			parts[e.Grp] = append(parts[e.Grp], e)
		}
	}
	for _, e := range h {
		switch e.Op {
		case OpAll:
			r.Checked["i"]++
			checkSet(e, parts[e.Grp], r)
		case OpAllLost:
			r.Checked["i"]++
			if e.Held || e.Res == "open" {
				r.failCS("i", e.Name, e.Inv, []string{e.CS}, "%s: a part of a set was lost (%s), but the set's Err was nil (%v) or its Done open (%s)",
					e.CS, e.Err, e.Held, e.Res)
			}
		}
	}
}

// checkSet checks one multi-lock call, e, and the parts it returned.
func checkSet(e Event, parts []Event, r *Report) {
	names := strings.Split(e.Name, ",")
	kind, steps := parseTrace(e)
	fail := func(format string, args ...any) {
		var cs []string
		for _, p := range parts {
			cs = append(cs, p.CS)
		}
		r.failCS("i", e.Name, e.Ret, cs, "%s %s of %s (%s): "+format, append([]any{e.W, kind, e.Grp, e.Name}, args...)...)
	}
	// The order of the grants, round by round.
	held := map[string]bool{}
	var last string // the round's last grant
	newRound := true
	for _, s := range steps {
		if s.kind != '+' {
			delete(held, s.name)
			newRound = true
			continue
		}
		if !newRound && s.name <= last {
			fail("took %s after %s in one round: not in the names' order (trace %s)", s.name, last, e.Note)
			return
		}
		held[s.name], last, newRound = true, s.name, false
	}
	// A DoAll whose fn ran returns fn's outcome: it took the set if its
	// parts were recorded (as fn started).
	if e.Res != "ok" && (kind != OpDo || len(parts) == 0) {
		if len(held) > 0 {
			fail("failed (%s) but did not give back %v (trace %s)", e.Err, keys(held), e.Note)
		}
		return
	}
	if len(parts) == 0 && kind == OpDo {
		return // (a DoAll that returned nil ran fn: only a worker killed in fn leaves no parts)
	}
	got := map[string]bool{}
	toks := map[string]bool{}
	for _, p := range parts {
		got[p.Name], toks[p.Tok] = true, true
	}
	switch {
	case int(e.Arg) != len(names) || e.Seen != e.Name:
		fail("returned a set of %d parts named %q, not the %d names asked for", e.Arg, e.Seen, len(names))
	case len(parts) != len(names) || len(got) != len(names) || len(toks) != len(names):
		fail("returned %d parts over %d names with %d tokens", len(parts), len(got), len(toks))
	case len(held) != len(names):
		fail("returned while holding only %v of its names (trace %s)", keys(held), e.Note)
	}
	for _, n := range names {
		if !got[n] {
			fail("returned no part for %s", n)
		}
	}
}

// keys returns the sorted keys of m.
func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkMaxHold is (j): a lease with a max hold d gets the deadline d after
// its acquisition began (between the call's invocation and return, plus
// d), is never believed held past it nor given a validity beyond it, and
// when kept past it, its loss signal fires by then (a second's slack for
// the timer) with an error that says the cap was reached (when its validity
// had been cut to the cap, nothing else can end it first), never earlier
// than the cap, and its key is gone soon after (the library releases it at
// once; the key itself expires a drift margin after the cap unless a
// fault held an extension back).
func checkMaxHold(h []Event, r *Report) {
	capOf := map[string]int64{}
	paused := map[string][]window{}
	var faults []window
	for _, e := range h {
		if e.Op == OpFault {
			faults = append(faults, window{e.Inv, max(e.Ret, e.Inv) + int64(time.Second)})
			if e.Note == FaultWorkerPause {
				id, _, _ := strings.Cut(e.Name, " ")
				paused[id] = append(paused[id], window{e.Inv, e.Ret + int64(time.Second)})
			}
		}
	}
	for _, e := range h {
		switch {
		case (e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDo) && e.Res == "ok" && e.CS != "":
			if e.Hold == 0 && e.Cap == 0 {
				continue
			}
			r.Checked["j"]++
			capOf[e.CS] = e.Cap
			switch {
			case e.Hold > 0 && e.Cap == 0:
				r.failCS("j", e.Name, e.Ret, []string{e.CS}, "%s: acquired with a max hold of %v, but its lease has no deadline", e.CS, time.Duration(e.Hold))
			case e.Hold == 0:
				r.failCS("j", e.Name, e.Ret, []string{e.CS}, "%s: acquired without a max hold, but its lease has a deadline at %s", e.CS, ms(e.Cap))
			case e.Cap < e.Inv+e.Hold-capSlack || e.Cap > e.Ret+e.Hold+capSlack:
				r.failCS("j", e.Name, e.Ret, []string{e.CS}, "%s: max hold %v, acquisition called at %s and returned at %s, but its deadline is %s",
					e.CS, time.Duration(e.Hold), ms(e.Inv), ms(e.Ret), ms(e.Cap))
			}
		case e.Op == OpCapped:
			r.Checked["j"]++
			checkCapped(e, exempt(paused[e.W]), r)
		case e.Op == OpCapFree:
			r.Checked["j"]++
			if e.Res == "stillheld" && !exempt(faults).covers(e.Cap-int64(landingSlack), e.Ret) {
				r.failCS("j", e.Name, e.Ret, []string{e.CS}, "%s: its lease reached its max hold at %s, and the lock still carried it at %s",
					e.CS, ms(e.Cap), ms(e.Ret))
			}
		}
		at, ok := capOf[e.CS]
		if !ok || at == 0 || e.Op == OpCapped || e.Op == OpCapFree {
			continue
		}
		if e.VU > at {
			r.failCS("j", e.Name, e.Inv, []string{e.CS}, "%s: %s left ValidUntil at %s, past its max hold's deadline %s", e.CS, e.Op, ms(e.VU), ms(at))
		}
		if (e.Op == OpEnter || e.Op == OpAlive || e.Op == OpExit) && e.Held && e.Inv > at+capSlack {
			r.failCS("j", e.Name, e.Inv, []string{e.CS}, "%s: believed held at %s, past its max hold's deadline %s", e.CS, ms(e.Inv), ms(at))
		}
	}
}

// checkCapped checks a lease kept past its max hold (see checkMaxHold);
// paused are the windows in which its worker was stopped.
func checkCapped(e Event, paused exempt, r *Report) {
	fail := func(format string, args ...any) {
		r.failCS("j", e.Name, e.Inv, []string{e.CS}, "%s: "+format, append([]any{e.CS}, args...)...)
	}
	switch {
	case !e.Held && !paused.covers(e.Cap, e.Ret):
		fail("kept past its max hold's deadline %s, its loss signal had not fired at %s (Err: %q)", ms(e.Cap), ms(e.Ret), e.Err)
	case e.Held && e.Ret > e.Cap+int64(time.Second) && e.Inv <= e.Cap+int64(time.Second) && !paused.covers(e.Cap, e.Ret):
		// (A holder that began to wait only later, its critical section
		// having slept past the cap, cannot tell when the signal fired.)
		fail("its loss signal fired at %s, more than a second after its max hold's deadline %s", ms(e.Ret), ms(e.Cap))
	case e.MH && e.Ret < e.Cap-capSlack:
		fail("lost at %s with %q, before its max hold's deadline %s", ms(e.Ret), e.Err, ms(e.Cap))
	case e.VU0 == e.Cap && e.Err != "" && !e.MH:
		fail("its validity had been cut to its max hold's deadline %s, but it was lost with %q, not ErrMaxHold", ms(e.Cap), e.Err)
	}
}

// checkMeta is (k): a holder that Inspect shows holding the lock (its
// token) is shown with the holder metadata it was given, and its Lock says
// the same.
func checkMeta(h []Event, r *Report) {
	for _, e := range h {
		if e.Op != OpInspect {
			continue
		}
		r.Checked["k"]++
		switch {
		case e.Res == "mine" && e.Seen != e.Meta:
			r.failCS("k", e.Name, e.Inv, []string{e.CS}, "%s: Inspect showed the holder's metadata as %q, not %q", e.CS, e.Seen, e.Meta)
		case e.LMeta != e.Meta:
			r.failCS("k", e.Name, e.Inv, []string{e.CS}, "%s: Lock.Meta said %q, not %q", e.CS, e.LMeta, e.Meta)
		}
	}
}
