package torture

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Invariants, by the letter the failure messages and summaries use.
var Invariants = []struct{ ID, What string }{
	{"a", "no two holders of a name (of a semaphore: no more than N permits, each hold weighed by the permits it took, or the size in force when the last was granted; of a read-write lock: no writer with another holder) believe they hold it at once (outside exempt windows)"},
	{"b", "fences strictly increase in acquisition order per name (of a semaphore: differ between permits; of a read-write lock: a write's above every earlier hold's, a read's above every earlier write's)"},
	{"c", "the Guard never accepts a write with a fence below one it accepted before"},
	{"d", "liveness: contexts honoured, no waiter sleeps long through a free lock, freed locks acquirable, workers finish"},
	{"e", "nothing left in Redis but fence keys and short-lived revocation markers"},
	{"f", "no goroutine growth, bounded connection pools"},
	{"g", "lease accounting: ValidUntil within the lease, losses reported truthfully, re-entry granted"},
	{"h", "elections: a leader is read with its own term's fence, and terms rise in real time across reads and campaigns"},
	{"i", "multi-locks: the set returned is the one asked for, its parts taken in the names' order and all held at return; a failed call keeps none; a part's loss is the set's"},
	{"j", "max hold: a lease's deadline is its max hold after its acquisition; never held past it; its loss there signalled on time with ErrMaxHold; its key gone soon after"},
	{"k", "holder metadata: Inspect and Lock.Meta show a holder with the metadata it was given"},
	{"l", "jeopardy: told only while an automatic extension is in flight or after one failed; a loss never leaves Jeopardy open"},
	{"m", "no deadlock reported where names nest in one global order"},
	{"n", "a Lost hook's call of the lost lease's Lock returns within a bound of its context's end and never reports the lease held"},
	{"o", "calls through a Client whose go-redis client was closed fail with ErrClosed at once, its waits end, and it closes"},
	{"p", "a semaphore's kept size changes once per AddPermits: every size returned is one the sizer's changes allow"},
}

// FreeWaits sums up the free-wait part of (d) over a round.
type FreeWaits struct {
	Waits     int   // Acquire and Do waits examined
	Waiting   int64 // their time, ns
	Reachable int64 // of it, outside the faults that reach them, ns
	Stretches int   // free stretches a waiter waited through (also in Checked["d"])
	Longest   int64 // the longest of them, ns
	Bound     int64 // the bound, ns
	// Of a semaphore's: the waits for several permits (AcquireN), and
	// the waits whose queueing (OpQueued) was found.
	Multi, Queued int
	// Behind counts a semaphore's waits that the queue rule alone kept
	// waiting for a while: a waiter for more, possibly ahead, waited
	// while as many permits as this one needs may have been free;
	// BehindTime sums those whiles, ns.
	Behind     int
	BehindTime int64
}

// Violation is one broken invariant, with the instant it is about.
type Violation struct {
	Inv  string
	Name string
	At   int64
	Msg  string
	CS   []string // the critical sections or handles involved, for the excerpt
	// From and To, when set, are the stretch of the history to show;
	// otherwise the excerpt is taken around At.
	From, To int64
}

// Report is the outcome of checking one round's history.
type Report struct {
	Ops        map[string]int // operations by kind and outcome
	Faults     map[string]int
	Checked    map[string]int // items examined per invariant
	Exempt     int            // overlaps excused by an exempt window
	Free       FreeWaits      // (d) waits through a free lock
	Hooks      map[string]int // (n) calls by Lost hooks, by call and outcome
	Violations []Violation
	// Beside counts a semaphore's critical sections entered, within the
	// bound, beside another holder where one of them took several permits
	// (AcquireN): a 2 beside a 1 under N = 3, say.
	Beside int
}

func (r *Report) fail(inv, name string, at int64, format string, args ...any) {
	r.failCS(inv, name, at, nil, format, args...)
}

func (r *Report) failCS(inv, name string, at int64, cs []string, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Inv: inv, Name: name, At: at, CS: cs, Msg: fmt.Sprintf(format, args...)})
}

// Count returns the violations of invariant inv.
func (r *Report) Count(inv string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Inv == inv {
			n++
		}
	}
	return n
}

// Params describe the round a history comes from.
type Params struct {
	TTL time.Duration
	// Permits is how many holders of a name may hold it at once: a
	// semaphore's N; 0 or 1 for a lock.
	Permits int
	// RW: the names are read-write locks, whose reads may overlap (a
	// lease's kind is in its token, see IsWrite).
	RW bool
}

// semaphore reports whether the round's names are semaphores.
func (p Params) semaphore() bool { return p.Permits > 1 }

// Check runs every history invariant over a merged history (sorted by Inv).
// Checks (e) and (f) that need Redis or the runtime are done by the
// coordinator, which records their findings in the history (leftover,
// hung, probe, pool events) for this function to count.
func Check(h []Event, p Params) *Report {
	r := &Report{Ops: map[string]int{}, Faults: map[string]int{}, Checked: map[string]int{}, Hooks: map[string]int{}}
	ex := exemptWindows(h, p)
	for _, e := range h {
		switch e.Op {
		case OpFault:
			r.Faults[e.Note]++
		case OpRefused:
			r.Faults[OpRefused]++ // (no window: the invariants hold through it)
		case OpAcquire, OpTry, OpDoRet, OpExtend, OpRelease, OpWrite, OpAll, OpCapped, OpCapFree, OpInspect, OpResume, OpDowngrade, OpProclaim, OpSize:
			r.Ops[e.Op+":"+e.Res]++
			if e.N > 1 {
				r.Ops[fmt.Sprintf("%s-%d:%s", e.Op, e.N, e.Res)]++ // (of those counted: AcquireN)
			}
			if e.Op == OpRelease && e.Note == raceNote {
				r.Ops["release-racing-watchdog:"+e.Res]++ // (of the releases counted)
			}
		}
	}
	checkOverlaps(h, ex, p, r)
	switch {
	case p.semaphore():
		checkPermitFences(h, r)
	case p.RW:
		checkRWFences(h, ex, r)
	default:
		checkFences(h, ex, r)
	}
	checkGuard(h, r)
	checkLiveness(h, r)
	checkFreeWaits(h, p, r)
	checkLeftovers(h, r)
	checkAccounting(h, ex, p, r)
	checkLeaderReads(h, ex, r)
	checkMulti(h, r)
	checkMaxHold(h, r)
	checkMeta(h, r)
	checkJeopardy(h, r)
	checkNoDeadlock(h, r)
	checkLostCalls(h, r)
	checkClosed(h, r)
	checkSizes(h, p, r)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At < r.Violations[j].At })
	return r
}

// window is a time range [from, to].
type window struct{ from, to int64 }

// exempt lists the windows in which the docs allow two holders: after a
// lock node came back empty, until the longest lease granted before it
// (the workload extends up to 4×TTL) has run out.
type exempt []window

func exemptWindows(h []Event, p Params) exempt {
	var ex exempt
	for _, e := range h {
		if e.Op == OpFault && e.Note == FaultServerRestart {
			ex = append(ex, window{e.Inv, e.Ret + int64(4*p.TTL+time.Second)})
		}
	}
	return ex
}

// covers reports whether [from, to] meets an exempt window.
func (ex exempt) covers(from, to int64) bool {
	for _, w := range ex {
		if from <= w.to && to >= w.from {
			return true
		}
	}
	return false
}

// interval is one critical section: the instants its holder recorded a
// belief that it held the lock.
type interval struct {
	w, cs, name, tok string
	fence            int64
	from, to         int64
	write            bool // a write hold of a read-write lock
}

// intervals gathers the critical sections of h from their stamps. A write
// hold downgraded to a read is two: its stamps before the Downgrade was
// called are a write's, those after it returned a read's.
func intervals(h []Event) []*interval {
	read := downgrades(h, true)
	byCS := map[string]*interval{}
	var out []*interval
	for _, e := range h {
		if (e.Op != OpEnter && e.Op != OpAlive && e.Op != OpExit) || !e.Held {
			continue
		}
		key, write := e.CS, IsWrite(e.Tok)
		if at, ok := read[e.CS]; ok && e.Inv > at {
			key, write = e.CS+"/read", false
		}
		iv := byCS[key]
		if iv == nil {
			iv = &interval{w: e.W, cs: e.CS, name: e.Name, tok: holder(e), fence: e.Fence, from: e.Inv, to: e.Inv, write: write}
			byCS[key] = iv
			out = append(out, iv)
		}
		iv.from, iv.to = min(iv.from, e.Inv), max(iv.to, e.Inv)
	}
	return out
}

// downgrades returns the holds of h whose Downgrade was called, with the
// instant it returned: of those it succeeded for only if ok is set.
func downgrades(h []Event, ok bool) map[string]int64 {
	m := map[string]int64{}
	for _, e := range h {
		if e.Op == OpDowngrade && (!ok || e.Res == "ok") {
			m[e.CS] = e.Ret
		}
	}
	return m
}

// checkOverlaps is (a): critical sections of one name held by different
// holders must not overlap; of a semaphore, no more than its N may, or
// N+1 where the sizer may have changed its kept size (size.go): the bound
// at the size in force when the last of them was granted, which came
// after the latest of their acquisitions began. Nested reentrant holds
// share their owner.
func checkOverlaps(h []Event, ex exempt, p Params, r *Report) {
	spans := sizeSpans(h, p.Permits)
	called := map[string]int64{} // a critical section's acquisition: when its call began
	weight := map[string]int{}   // a semaphore's critical section: the permits its hold took (AcquireN)
	for _, e := range h {
		if (e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDo) && e.Res == "ok" && e.CS != "" {
			called[e.CS] = e.Inv
			weight[e.CS] = max(e.N, 1)
		}
	}
	permits := func(ivs ...*interval) int { // the permits the holds of ivs took, together
		n := 0
		for _, iv := range ivs {
			n += max(weight[iv.cs], 1)
		}
		return n
	}
	ivs := intervals(h)
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].from < ivs[j].from })
	active := map[string][]*interval{}
	for _, iv := range ivs {
		r.Checked["a"]++
		keep := active[iv.name][:0]
		var others []*interval // other holders inside when iv entered
		for _, o := range active[iv.name] {
			if o.to < iv.from {
				continue
			}
			keep = append(keep, o)
			if o.tok == iv.tok || (p.RW && !o.write && !iv.write) {
				continue // (a reentrant owner's nested hold; two reads)
			}
			if ex.covers(iv.from, o.to) {
				r.Exempt++
				continue
			}
			others = append(others, o)
		}
		active[iv.name] = append(keep, iv)
		if p.semaphore() {
			last := int64(math.MinInt64) // no later than the last grant
			for _, o := range append(others, iv) {
				if at, ok := called[o.cs]; ok {
					last = max(last, at)
				}
			}
			n := permitsAt(spans, iv.name, last, iv.from, p.Permits)
			switch all := permits(others...) + permits(iv); {
			case all > n:
				semOverlap(r, iv, others, n, permits)
			case len(others) > 0 && all > len(others)+1:
				r.Beside++
			}
			continue
		}
		for _, o := range others {
			r.failCS("a", iv.name, iv.from, []string{iv.cs, o.cs}, "%s (%s fence %d) entered at %s while %s (%s fence %d) still believed it held until %s",
				iv.cs, iv.w, iv.fence, ms(iv.from), o.cs, o.w, o.fence, ms(o.to))
		}
	}
}

// semOverlap reports iv entering a semaphore's critical section while
// others still believed they held permits: with iv's, more than its N.
// weigh says how many permits holds took (AcquireN takes several).
func semOverlap(r *Report, iv *interval, others []*interval, n int, weigh func(...*interval) int) {
	cs := []string{iv.cs}
	var desc []string
	for _, o := range others {
		cs = append(cs, o.cs)
		desc = append(desc, fmt.Sprintf("%s (%s fence %d, %d permits, until %s)", o.cs, o.w, o.fence, weigh(o), ms(o.to)))
	}
	r.failCS("a", iv.name, iv.from, cs, "%s (%s fence %d, %d permits) entered at %s while %d other holders of %d permits (N = %d) still believed they held them: %s",
		iv.cs, iv.w, iv.fence, weigh(iv), ms(iv.from), len(others), weigh(others...), n, strings.Join(desc, ", "))
}

// ms formats a unix-ns instant as seconds.milliseconds within its minute,
// enough to find it in an excerpt.
func ms(t int64) string { return time.Unix(0, t).Format("05.000") }

// acquisitions returns the successful acquisitions of h, sorted by return.
func acquisitions(h []Event) []Event {
	var out []Event
	for _, e := range h {
		if (e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDo) && e.Res == "ok" && e.Tok != "" {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Ret < out[j].Ret })
	return out
}

// checkFences is (b): in the order acquisitions returned, each fence of a
// name is above every earlier one; equal only for the same owner token (a
// reentrant re-entry shares the first hold's fence). A plain lease's fence
// is asked for right after it was acquired, and issued only while the
// lease holds the lock, so the order of leases is the order of fences.
func checkFences(h []Event, ex exempt, r *Report) {
	type top struct {
		fence int64
		tok   string
		cs    string
	}
	last := map[string]top{}
	for _, e := range acquisitions(h) {
		if e.Fence == 0 {
			continue // the lease was lost before it asked for a fence
		}
		r.Checked["b"]++
		t := last[e.Name]
		bad := e.Fence < t.fence || (e.Fence == t.fence && holder(e) != t.tok)
		if bad && !ex.covers(e.Inv, e.Ret) {
			r.failCS("b", e.Name, e.Ret, []string{e.CS, t.cs}, "%s got fence %d at %s after %s had fence %d", e.CS, e.Fence, ms(e.Ret), t.cs, t.fence)
		}
		if e.Fence > t.fence {
			last[e.Name] = top{e.Fence, holder(e), e.CS}
		}
	}
}

// checkPermitFences is (b) for a semaphore: permits held at once are not
// ordered, but no two permits share a fence.
func checkPermitFences(h []Event, r *Report) {
	seen := map[string]map[int64]Event{}
	for _, e := range acquisitions(h) {
		if e.Fence == 0 {
			continue
		}
		r.Checked["b"]++
		if seen[e.Name] == nil {
			seen[e.Name] = map[int64]Event{}
		}
		if o, ok := seen[e.Name][e.Fence]; ok && holder(o) != holder(e) {
			r.failCS("b", e.Name, e.Ret, []string{e.CS, o.CS}, "%s got fence %d at %s, as %s did", e.CS, e.Fence, ms(e.Ret), o.CS)
		}
		seen[e.Name][e.Fence] = e
	}
}

// checkRWFences is (b) for a read-write lock: in the order acquisitions
// returned, a write's fence is above every earlier hold's (the reads it
// excluded among them), and a read's above every earlier write's; reads
// held at once are not ordered among themselves. As for a lock, a fence
// is issued only while its hold holds the lock, and holds that exclude
// each other do not overlap.
func checkRWFences(h []Event, ex exempt, r *Report) {
	type top struct {
		fence int64
		cs    string
	}
	all, writes := map[string]top{}, map[string]top{}
	for _, e := range acquisitions(h) {
		if e.Fence == 0 {
			continue // the hold was lost before it asked for a fence
		}
		r.Checked["b"]++
		t, kind := writes[e.Name], "write"
		if IsWrite(e.Tok) {
			t, kind = all[e.Name], "hold"
		}
		if e.Fence <= t.fence && !ex.covers(e.Inv, e.Ret) {
			r.failCS("b", e.Name, e.Ret, []string{e.CS, t.cs}, "%s (write %v) got fence %d at %s after the %s %s had fence %d",
				e.CS, IsWrite(e.Tok), e.Fence, ms(e.Ret), kind, t.cs, t.fence)
		}
		if e.Fence > all[e.Name].fence {
			all[e.Name] = top{e.Fence, e.CS}
		}
		if IsWrite(e.Tok) && e.Fence > writes[e.Name].fence {
			writes[e.Name] = top{e.Fence, e.CS}
		}
	}
}

// checkGuard is (c): a write the Guard accepted has a fence at least that of
// every write it accepted that had returned before this one was sent (equal
// only from the same lease).
func checkGuard(h []Event, r *Report) {
	var acc []Event
	for _, e := range h {
		if e.Op == OpWrite && e.Res == "ok" {
			acc = append(acc, e)
		}
	}
	byRet := append([]Event(nil), acc...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].Ret < byRet[j].Ret })
	type top struct {
		fence   int64
		tok, cs string
	}
	high := map[string]top{}
	k := 0
	for _, e := range acc { // in Inv order
		for ; k < len(byRet) && byRet[k].Ret < e.Inv; k++ {
			b := byRet[k]
			if b.Fence >= high[b.Name].fence {
				high[b.Name] = top{b.Fence, b.Tok, b.CS}
			}
		}
		r.Checked["c"]++
		t := high[e.Name]
		if e.Fence < t.fence || (e.Fence == t.fence && e.Tok != t.tok) {
			r.failCS("c", e.Name, e.Inv, []string{e.CS, t.cs}, "guard accepted %s's write with fence %d after accepting fence %d from %s", e.CS, e.Fence, t.fence, t.cs)
		}
	}
}

// checkLiveness is (d): calls return within their context's deadline plus
// a bound (unless their process was paused meanwhile), probes of freed
// locks succeed in time, and workers finish.
func checkLiveness(h []Event, r *Report) {
	paused := map[string][]window{}
	for _, e := range h {
		if e.Op == OpFault && e.Note == FaultWorkerPause {
			paused[e.Name] = append(paused[e.Name], window{e.Inv, e.Ret})
		}
	}
	for _, e := range h {
		switch {
		case (e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDoRet || e.Op == OpAll) && e.DL != 0 && e.Res != "ok":
			r.Checked["d"]++
			late := e.Ret - e.DL
			if late > e.Bound && !exempt(paused[e.W]).covers(e.Inv, e.Ret) {
				r.fail("d", e.Name, e.Ret, "%s %s returned %v after its context ended (bound %v): %s",
					e.W, e.Op, time.Duration(late).Round(time.Millisecond), time.Duration(e.Bound), e.Err)
			}
		case e.Op == OpProbe:
			r.Checked["d"]++
			if e.Res != "ok" || e.Ret-e.Inv > e.Bound {
				r.fail("d", e.Name, e.Inv, "probe of a freed lock: %s after %v (bound %v) %s",
					e.Res, time.Duration(e.Ret-e.Inv).Round(time.Millisecond), time.Duration(e.Bound), e.Err)
			}
		case e.Op == OpHung:
			r.fail("d", e.Name, e.Inv, "worker %s did not finish: %s", e.Note, e.Err)
		}
	}
}

// checkLeftovers is (e) as recorded: keys the coordinator's scan found,
// holds a worker's self-check found after its last release, and locks a
// panicking Do left held.
// leaseOf returns the critical sections (handles) whose lease had token
// tok: the history of a key left behind.
func leaseOf(h []Event, tok string) []string {
	var cs []string
	for _, e := range h {
		if tok != "" && e.Tok == tok && e.CS != "" && !slices.Contains(cs, e.CS) {
			cs = append(cs, e.CS)
		}
	}
	return cs
}

func checkLeftovers(h []Event, r *Report) {
	for _, e := range h {
		switch {
		case e.Op == OpLeftover:
			r.Checked["e"]++
			r.failCS("e", e.Name, e.Inv, leaseOf(h, e.Tok), "%s: left in Redis after release: %s", e.W, e.Note)
		case e.Op == OpPanic:
			r.Checked["e"]++
			if e.Res == "stillheld" {
				r.fail("e", e.Name, e.Inv, "%s: fn panicked inside Do and the lock was still held after Do re-panicked", e.W)
			}
		case e.Op == OpPool:
			r.Checked["f"]++
			if e.Arg > e.Bound+2 {
				r.fail("f", "", e.Inv, "%s: go-redis pool of %s holds %d connections (pool size %d)", e.W, e.Note, e.Arg, e.Bound)
			}
		}
	}
}

// checkAccounting is (g): what a Lock says about its lease matches what
// happened to it.
func checkAccounting(h []Event, ex exempt, p Params, r *Report) {
	auto := map[string]bool{}
	for _, e := range h {
		if e.Op == OpConfig {
			auto[e.W] = strings.Contains(e.Note, "auto=true")
		}
	}
	acq := acquisitions(h)
	began := map[string]int64{} // each lease's acquisition's return
	for _, a := range acq {
		if _, ok := began[a.CS]; !ok {
			began[a.CS] = a.Ret
		}
	}
	read := downgrades(h, false) // (whatever a Downgrade returned, the hold may be a read since)
	// A handle whose Resume failed may have been superseded by it: a
	// resume's extension can land although the call fails (its reply
	// lost, or a read after it refused), and the old Lock, which the
	// worker goes on with, then rightly finds its lease driven by another
	// Lock, or undone.
	superseded := map[string]bool{}
	spurious := func(e Event, ex exempt, r *Report) {
		if !superseded[e.CS] {
			spurious(e, ex, r)
		}
	}
	called := map[string]bool{}  // handles whose Release has been called
	hooked := map[string]int64{} // handles whose Release a Lost hook called, when it first did
	for _, e := range h {
		if _, ok := hooked[e.CS]; e.Op == OpLostCall && e.Note == "release" && !ok {
			hooked[e.CS] = e.Inv
		}
	}
	for _, e := range h {
		switch {
		case e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDo:
			// (A set's part may have been extended before the set returned.)
			if ttl := ttlOf(e, p.TTL); e.Res == "ok" && e.Grp == "" && e.VU > e.Ret+ttl {
				r.fail("g", e.Name, e.Ret, "%s: ValidUntil %s is beyond the lease (returned %s + TTL %v)", e.CS, ms(e.VU), ms(e.Ret), time.Duration(ttl))
			}
		case e.Op == OpExtend:
			r.Checked["g"]++
			if e.Res == "ok" && !auto[e.W] && e.VU > e.Ret+e.Arg {
				r.failCS("g", e.Name, e.Ret, []string{e.CS}, "%s: Extend(%v) left ValidUntil at %s, beyond the new lease (%s + %v)",
					e.CS, time.Duration(e.Arg), ms(e.VU), ms(e.Ret), time.Duration(e.Arg))
			}
			spurious(e, ex, r)
		case e.Op == OpRelease:
			r.Checked["g"]++
			if !young(e, h, began) {
				spurious(e, ex, r)
			}
			// Only a handle's first Release tells (a Lost hook's counts): a
			// later call returns nil once one has run, and one after a Redis
			// error cannot know whether the failed call's script ran (and
			// freed the lock).
			hk, ok := hooked[e.CS]
			first := !called[e.CS] && (!ok || hk > e.Ret) // (a Lost hook's may run inside it: see lapse)
			called[e.CS] = true
			if e.Res == "ok" && first && !p.semaphore() { // (other permits come and go while one is held)
				if b, ok := laterLease(acq, e, p.RW, read); ok {
					r.failCS("g", e.Name, e.Inv, []string{e.CS, b.CS}, "%s: Release returned nil, but %s (%s) acquired the lock with fence %d > %d at %s, before the release",
						e.CS, b.CS, b.W, b.Fence, e.Fence, ms(b.Ret))
				}
			}
		case e.Op == OpFence:
			r.Checked["g"]++
			spurious(e, ex, r)
		case e.Op == OpDowngrade, e.Op == OpProclaim:
			r.Checked["g"]++
			spurious(e, ex, r) // a valid hold is there to downgrade, a valid leadership to proclaim
		case e.Op == OpResume:
			r.Checked["g"]++
			spurious(e, ex, r) // a lease valid when resumed is still there to resume
			superseded[e.CS] = superseded[e.CS] || e.Res != "ok"
			switch {
			case e.Res == "wrongtoken":
				r.failCS("g", e.Name, e.Ret, []string{e.CS}, "%s: Resume returned another lease: %s", e.CS, e.Err)
			case e.Res == "ok" && e.VU > e.Ret+e.Arg:
				r.failCS("g", e.Name, e.Ret, []string{e.CS}, "%s: the resumed Lock's ValidUntil %s is beyond its lease (%s + %v)",
					e.CS, ms(e.VU), ms(e.Ret), time.Duration(e.Arg))
			}
		case e.Op == OpReentry:
			if !ex.covers(e.Inv, e.Ret) {
				r.fail("g", e.Name, e.Inv, "%s: the owner's re-entry was refused while its outer hold was valid: %s", e.CS, e.Err)
			}
		}
	}
}

// spurious reports a Release, Extend or Fence that said the lock was lost
// (ErrNotHeld) although the handle held it when called and the answer came
// back before its validity ended: Redis cannot have dropped a valid lease.
//
// An Extend to a shorter TTL may itself end the lease sooner: its first copy
// sets the lease to the new TTL from when it lands, and a copy go-redis
// re-sends after a cut can find it already gone. So an Extend's lease is
// taken to end at the earlier of the validity before it and its invocation
// plus the TTL it asked for.
func spurious(e Event, ex exempt, r *Report) {
	until := e.VU0
	if e.Op == OpExtend && e.Arg > 0 {
		until = min(until, e.Inv+e.Arg)
	}
	if e.Res != "notheld" || !e.Held || e.Ret >= until || ex.covers(e.Inv, e.Ret) {
		return
	}
	r.failCS("g", e.Name, e.Ret, []string{e.CS}, "%s: %s reported ErrNotHeld at %s, before its lease ended at %s: %s",
		e.CS, e.Op, ms(e.Ret), ms(until), e.Err)
}

// young reports whether the lease that rel releases began within
// youngServer of a server's start (the round's, or a restart): a release
// whose reply was lost and that found its clean lease gone then reports
// the lease lost, as the server's uptime, in whole seconds, cannot tell
// that the server was up before the lease began.
func young(rel Event, h []Event, began map[string]int64) bool {
	b, ok := began[rel.CS]
	if !ok || len(h) == 0 {
		return false
	}
	first := h[0].Inv
	for _, e := range h {
		if e.Inv > 0 && e.Inv < first {
			first = e.Inv
		}
	}
	if b < first+int64(youngServer) {
		return true
	}
	for _, e := range h {
		if e.Op == OpFault && e.Note == FaultServerRestart && e.Inv <= b && b < e.Ret+int64(youngServer) {
			return true
		}
	}
	return false
}

// youngServer: see young.
const youngServer = 2500 * time.Millisecond

// laterLease returns an acquisition of rel's name with a higher fence that
// returned before rel was invoked: rel's lease was over by then.
// Of a read-write lock, reads come and go while a read is held: a read's
// release is ordered after later writes only.
func laterLease(acq []Event, rel Event, rw bool, read map[string]int64) (Event, bool) {
	_, downgraded := read[rel.CS]
	relWrite := IsWrite(rel.Tok) && !downgraded
	if rel.Fence == 0 {
		return Event{}, false // the lease got no fence (it asked too late): nothing to order by
	}
	for _, a := range acq {
		if a.Ret >= rel.Inv {
			break
		}
		if a.Name == rel.Name && a.Fence > rel.Fence && (!rw || IsWrite(a.Tok) || relWrite) {
			return a, true
		}
	}
	return Event{}, false
}
