package torture

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlockio/dlock"
)

// This file is the part of (d) that watches the run itself: no waiter
// sleeps through a free lock for long. From the history it reconstructs,
// per name, when a lease may have been held in Redis ("busy"); the rest of
// the time the lock was free. An Acquire (or Do's acquisition) waiting
// while its lock was free must get it, or see another waiter take it,
// within freeBound; a wait counts from the call until it returned the
// Lock, or until its context ended.
//
// A handle's lease (a successful Acquire, TryAcquire or Do) is busy from
// the earliest instant Redis can have granted it to the latest instant it
// can have ended:
//
//   - granted no earlier than max(invocation, ValidUntil − its lease
//     time, LeaseTTL or the TTL) — a set's part: its call's invocation: dlock
//     counts the validity from the start of the attempt that took the lock
//     (for a fair handover, from when the waiter queued), both before the
//     grant;
//   - ended no later than the first Release (or Do) that returned a
//     definite answer (nil or ErrNotHeld: the lease is gone from Redis by
//     then), nor than the latest expiry any call can have set: the
//     acquisition's return plus the TTL, an Extend's return plus its TTL
//     (plus landingSlack when its answer was lost), and with auto-extend
//     the watchdog's last extension (sent before the first Release call,
//     which stops it; landingSlack for one in flight) plus the longest
//     lease time asked for; each plus the lease's lock-delay, if any. A handle with auto-extend that was never
//     released (its process was killed) is busy to the end.
//
// Critical sections lie inside those spans (a stamp is only recorded while
// the lease is valid), so free means: no critical section of any worker
// covers the instant, and the last holder's lease was released or has run
// out. A holder still in its critical section after its validity ended
// (work past the lease, a paused process) does not keep the lock busy:
// that is the dead holder a waiter must skip once its lease runs out.
//
// Faults are exempt where they reach, from their start until healTail
// after they healed. Exempting every wait from every fault until a TTL
// after it would leave nothing to check: the injector starts a fault
// TTL/10 to TTL/2 after the last one healed, so such windows cover the
// whole run. What a fault does not reach is checked:
//
//   - a lock node paused or restarted (every worker loses its way to
//     Redis or its subscription) and an injector failure: every wait;
//   - a worker's SIGKILL: every wait, from a second before it to the end
//     (its last events may be missing, its leases and queue entries expire
//     on their own);
//   - a proxy stalled, delayed or cut: the waits of the workers that go
//     through that proxy;
//   - a worker's SIGSTOP: that worker's waits, and every wait for a lock it
//     was trying to take meanwhile (or had given up on a second before):
//     a fair release may hand the lock to its queue entry, or an attempt
//     of it take the lock, and the stopped worker cannot pass it on; so
//     too a worker's go-redis clients closed under its Client.
//
// A paused or killed holder needs nothing more: its lease counts as held
// until a Release of it returned or the bounds above, not until its last
// stamp.
//
// Not modelled, and left to freeBound: the lease an attempt took for a
// waiter that gave up (its context ended, or Redis failed to answer,
// while the attempt was in flight) until dlock's undo of it landed, and
// in fair mode the lease a release handed to such a waiter's queue entry.
// Against a healthy Redis the undo follows within a round trip; when a
// proxy fault holds it up, it lands within a second or two of the heal;
// the lease lasts a TTL at most. (Such a lease also outlived its attempt
// by a whole TTL without any fault: a Redlock attempt given up while the
// connections to the nodes were still being dialled, at the start of
// quorum5 rounds, e.g. -torture.seed=7 -torture.round=2.)

// freeBound is how long a waiter may keep waiting through a free stretch.
// By design a waiter learns of a free lock at once from the release
// message (fair mode: the release hands it the lock), and otherwise — the
// message lost, the holder gone without releasing — when it next wakes:
// fair mode after at most a third of its queue entry's life
// (min(TTL, 1 min)/3) or the holder's remaining lease, unfair mode and
// Redlock after at most the backoff cap (DefaultMaxBackoff, 1s) or the
// holder's remaining lease. On top of that wake-up (1s for TTLs up to 3s)
// the bound allows a TTL, for a lease a waiter that gave up left behind
// (see above), and a second of scheduling slack for -race on a loaded
// machine with two cores: 2s + TTL.
func freeBound(ttl time.Duration) time.Duration {
	wake := max(dlock.DefaultMaxBackoff, min(ttl, time.Minute)/3)
	return wake + ttl + time.Second
}

// healTail is how long after a fault healed it may still keep a waiter
// from a free lock: the requests a delay fault held are delivered up to
// 1.2s late; after a cut, a stall or a restart, connections (the pub/sub
// one too) are dialled again; a paused process catches up.
func healTail(kind string) time.Duration {
	if kind == FaultDelayReq || kind == FaultDelayRep {
		return 1500 * time.Millisecond
	}
	return time.Second
}

// landingSlack is how much later than an Extend returned its request may
// land when the call failed (a delay fault holds requests up to 1.2s, a
// stall 0.6s, and go-redis may re-send).
const landingSlack = 2 * time.Second

// expirySlack pads every computed expiry: Redis expires keys a little
// after their deadline, and an acquisition's answer comes back after the
// script ran.
const expirySlack = 200 * time.Millisecond

// lease is the span during which a handle's lease may have been held.
type lease struct {
	name, w, cs string
	from, to    int64
	n           int // of a semaphore: the permits it holds (AcquireN); 1 otherwise
}

// leases reconstructs the span of every handle's lease (see above).
func leases(h []Event, ttl time.Duration) []lease {
	auto := map[string]bool{}
	seenCfg := map[string]bool{}
	for _, e := range h {
		if e.Op == OpConfig {
			auto[e.W] = strings.Contains(e.Note, "auto=true")
			seenCfg[e.W] = true
		}
	}
	type span struct {
		lease
		acqRet  int64
		expiry  int64 // latest expiry a call can have set
		maxTTL  int64 // longest lease time asked for (the watchdog's)
		delay   int64 // the lease's lock-delay: Redis keeps it that much longer
		stop    int64 // first Release call (stops the watchdog); 0: none
		settled int64 // first definite end; 0: none
	}
	byCS := map[string]*span{}
	var order []*span
	doByInv := map[string]*span{} // Do's handle by worker, name and invocation
	key := func(e Event) string { return e.W + "\x00" + e.Name + "\x00" + strconv.FormatInt(e.Inv, 10) }
	for _, e := range h {
		if (e.Op != OpAcquire && e.Op != OpTry && e.Op != OpDo) || e.Res != "ok" || e.CS == "" {
			continue
		}
		lt := ttlOf(e, ttl) // the lease time it asked for
		from := e.Inv
		if e.VU != 0 && e.Grp == "" { // (a set's part may have been extended while the call took the others)
			from = max(from, e.VU-lt)
		}
		s := &span{lease: lease{name: e.Name, w: e.W, cs: e.CS, from: from, n: max(e.N, 1)}, acqRet: e.Ret,
			expiry: e.Ret + lt + e.Delay, maxTTL: lt + e.Delay, delay: e.Delay}
		byCS[e.CS] = s
		order = append(order, s)
		if e.Op == OpDo {
			doByInv[key(e)] = s
		}
	}
	first := func(t *int64, v int64) {
		if *t == 0 || v < *t {
			*t = v
		}
	}
	for _, e := range h {
		switch e.Op {
		case OpExtend:
			s := byCS[e.CS]
			if s == nil || (e.Res != "ok" && e.Res != "err" && e.Res != "closed") {
				continue
			}
			end := e.Ret + e.Arg + s.delay
			if e.Res != "ok" { // (a closed client's: it may have been under way)
				end += int64(landingSlack)
			}
			s.expiry = max(s.expiry, end)
			s.maxTTL = max(s.maxTTL, e.Arg+s.delay)
		case OpRelease:
			s := byCS[e.CS]
			if s == nil {
				continue
			}
			first(&s.stop, e.Inv)
			if e.Res == "ok" || e.Res == "notheld" {
				first(&s.settled, e.Ret)
			}
		case OpDoRet:
			s := doByInv[key(e)]
			if s == nil {
				continue
			}
			first(&s.stop, e.Ret) // Do released before it returned
			panicked := strings.HasPrefix(e.Note, "panic")
			if !panicked && (e.Res == "ok" || e.Res == "notheld" || e.Err == errFn.Error()) {
				first(&s.settled, e.Ret)
			}
		case OpCapFree:
			// After the loss at its max hold, the lock no longer carried it.
			if s := byCS[e.CS]; s != nil && e.Res == "released" {
				first(&s.settled, e.Ret)
			}
		case OpPanic:
			// afterPanic found the lease gone (Inspect) after Do re-panicked.
			if s := doByInv[key(e)]; s != nil && e.Res == "released" {
				first(&s.settled, e.Ret)
			}
		}
	}
	out := make([]lease, 0, len(order))
	for _, s := range order {
		end := s.expiry
		if !seenCfg[s.w] || auto[s.w] {
			if s.stop == 0 {
				end = math.MaxInt64 // the watchdog may still be extending it
			} else {
				end = max(end, s.stop+int64(landingSlack)+s.maxTTL) // an extension in flight may land late
			}
		}
		if end != math.MaxInt64 {
			end += int64(expirySlack)
		}
		if s.settled != 0 {
			end = min(end, s.settled)
		}
		s.to = max(end, s.from)
		out = append(out, s.lease)
	}
	return out
}

// busy is a merged span of leases and windows of one name.
type busy struct {
	from, to     int64
	first, last  string // the lease that opens it and the one that ends it ("" for a window)
	lastIsWindow bool   // a fault window ends it
	lastLease    string // the lease in it that ended last
	lastLeaseTo  int64
	// Of a semaphore, the wait ahead in the queue whose start opens it and
	// whose end ends it, if one does ("" if a lease or a window does).
	firstWait, lastWait string
	n                   int // the permits the lease of first holds (1 if 0)
}

// wait is one Acquire's (or Do's) wait: from its invocation until it got
// the lock, or until its context ended.
type wait struct {
	w, op, name, cs string
	from, to        int64
	res             string
	// Of a semaphore: n is the permits it waits for (AcquireN; else 1),
	// and queued, if not 0, when it was told to wait (OpQueued): its place
	// in the queue dates from no later.
	n      int
	queued int64
}

// waits gathers the waits of h.
func waits(h []Event) []wait {
	do := map[string]Event{}
	key := func(e Event) string { return e.W + "\x00" + e.Name + "\x00" + strconv.FormatInt(e.Inv, 10) }
	for _, e := range h {
		if e.Op == OpDo {
			do[key(e)] = e
		}
	}
	queued := map[string][]int64{} // by worker and name: when its waits were told to wait, in order
	for _, e := range h {
		if e.Op == OpQueued {
			k := e.W + "\x00" + e.Name
			queued[k] = append(queued[k], e.Inv)
		}
	}
	var out []wait
	for _, e := range h {
		if e.Op == OpAll {
			out = append(out, setWaits(e)...)
			continue
		}
		if (e.Op != OpAcquire && e.Op != OpDoRet) || e.Grp != "" { // (a set's parts wait one by one: setWaits)
			continue
		}
		wt := wait{w: e.W, op: e.Op, name: e.Name, cs: e.CS, from: e.Inv, to: e.Ret, res: e.Res, n: max(e.N, 1)}
		if e.Op == OpDoRet {
			wt.op = OpDo
			if d, ok := do[key(e)]; ok {
				wt.to, wt.cs, wt.res = d.Ret, d.CS, "ok"
			}
		}
		// (A worker waits for one acquisition at a time: the first time it
		// was told to wait for the name within the call is this call's.)
		qs := queued[e.W+"\x00"+e.Name]
		if i, _ := slices.BinarySearch(qs, wt.from); i < len(qs) && qs[i] <= wt.to {
			wt.queued = qs[i]
		}
		switch wt.res {
		case "invalid", "wrongtype":
			continue // refused before any wait
		case "ok":
		default:
			if e.DL != 0 {
				wt.to = min(wt.to, e.DL) // after its context ended it no longer waits
			}
		}
		if wt.to > wt.from {
			out = append(out, wt)
		}
	}
	return out
}

// effect is what a fault may do to free-wait checking: during window, the
// waits of the workers it cut off (all, if global) are not checked, nor
// are the locks those workers were trying to take (see lockSide).
type effect struct {
	window
	healed  int64           // when the fault itself ended
	global  bool            // it hit every worker, and every lock
	workers map[string]bool // else, the workers it hit
	calls   bool            // and the locks those workers were trying to take
}

// effects returns the reach of every fault of h.
func effects(h []Event) []effect {
	via := map[string][]string{} // worker: the proxies it goes through
	for _, e := range h {
		if e.Op == OpConfig {
			via[e.W] = strings.Fields(e.Via)
		}
	}
	var out []effect
	for _, e := range h {
		if e.Op != OpFault {
			continue
		}
		f := effect{window: window{e.Inv, max(e.Ret, e.Inv) + int64(healTail(e.Note))}, healed: max(e.Ret, e.Inv)}
		switch e.Note {
		case FaultWorkerKill:
			// The killed worker's last events may be missing, and its leases
			// and queue entries live on until they expire: check no more.
			f.from, f.to, f.global = e.Inv-int64(time.Second), math.MaxInt64, true
		case FaultWorkerPause, FaultClientClose:
			id, _, _ := strings.Cut(e.Name, " ")
			f.workers, f.calls = map[string]bool{id: true}, true
		case FaultDelayReq, FaultDelayRep, FaultStallReplies, FaultStall, FaultCut:
			if e.Via == "" {
				f.global = true
				break
			}
			f.workers = map[string]bool{}
			for w, addrs := range via {
				if slices.Contains(addrs, e.Via) {
					f.workers[w] = true
				}
			}
		default: // a lock node paused or restarted, or the injector failed
			f.global = true
		}
		out = append(out, f)
	}
	return out
}

// call is one acquisition call (Acquire, TryAcquire, Do until fn started):
// what can leave a lease or a queue entry behind when a fault hits it.
type call struct {
	w, name  string
	inv, ret int64
}

// calls gathers the acquisition calls of h.
func calls(h []Event) []call {
	var out []call
	acquired := map[string]bool{}
	for _, e := range h {
		switch e.Op {
		case OpAcquire, OpTry, OpDo:
			out = append(out, call{e.W, e.Name, e.Inv, e.Ret})
			if e.Op == OpDo {
				acquired[e.W+"\x00"+e.Name+"\x00"+strconv.FormatInt(e.Inv, 10)] = true
			}
		}
	}
	for _, e := range h {
		if e.Op == OpDoRet && !acquired[e.W+"\x00"+e.Name+"\x00"+strconv.FormatInt(e.Inv, 10)] {
			out = append(out, call{e.W, e.Name, e.Inv, e.Ret})
		}
		if e.Op == OpAll {
			for _, name := range strings.Split(e.Name, ",") {
				out = append(out, call{e.W, name, e.Inv, e.Ret})
			}
		}
	}
	return out
}

// lockSide reports whether fault f keeps name from every waiter: it hit
// every worker, or it stopped a worker that was in an acquisition call of
// name then, or had left one a second before (its undo may not have run).
// A proxy fault does not: the calls it cut off leave a lease behind only
// until their undo lands, soon after the heal (see the top of this file).
func lockSide(f effect, name string, cs []call) bool {
	if f.global {
		return true
	}
	if !f.calls {
		return false
	}
	for _, c := range cs {
		if c.name == name && f.workers[c.w] && c.ret >= f.from-int64(time.Second) && c.inv <= f.healed {
			return true
		}
	}
	return false
}

// checkFreeWaits is the part of (d) that watches the run: no Acquire or Do
// waits through a stretch in which its lock was free (see the top of this
// file) for longer than freeBound.
func checkFreeWaits(h []Event, p Params, r *Report) {
	bound := int64(freeBound(p.TTL))
	r.Free.Bound = bound
	fx := effects(h)
	cs := calls(h)
	byName := map[string][]busy{}
	for _, l := range append(leases(h, p.TTL), givenBack(h, p.TTL)...) {
		byName[l.name] = append(byName[l.name], busy{from: l.from, to: l.to, first: l.cs, last: l.cs, lastLease: l.cs, lastLeaseTo: l.to, n: l.n})
	}
	all := waits(h)
	var sem *semBusy
	if p.semaphore() { // a semaphore is busy for a waiter while fewer permits than it, or a waiter ahead of it, needs may be free
		sem = newSemBusy(byName, all, fx, p.Permits)
	}
	lockFx := map[string][]window{} // per name, the fault windows that keep it from every waiter
	for _, wt := range all {
		ws, ok := lockFx[wt.name]
		if !ok {
			for _, f := range fx {
				if lockSide(f, wt.name, cs) {
					ws = append(ws, f.window)
				}
			}
			lockFx[wt.name] = ws
		}
		ws = slices.Clip(ws)
		for _, f := range fx {
			if !f.global && f.workers[wt.w] {
				ws = append(ws, f.window) // the waiter itself was cut off
			}
		}
		r.Free.Waits++
		if sem != nil && wt.n > 1 {
			r.Free.Multi++
		}
		if sem != nil && wt.queued != 0 {
			r.Free.Queued++
		}
		r.Free.Waiting += wt.to - wt.from
		r.Free.Reachable += wt.to - wt.from - covered(merged(nil, ws), wt.from, wt.to)
		spans := byName[wt.name]
		if sem != nil {
			spans = sem.busyFor(wt)
			if d := sem.behind(wt, spans); d > 0 {
				r.Free.Behind++
				r.Free.BehindTime += d
			}
		}
		ss := merged(spans, ws)
		// The free stretches are the gaps between spans, and the time before
		// the first and after the last.
		for i := 0; i <= len(ss); i++ {
			prev := busy{to: math.MinInt64}
			if i > 0 {
				prev = ss[i-1]
			}
			next := busy{from: math.MaxInt64}
			if i < len(ss) {
				next = ss[i]
			}
			if prev.to >= wt.to {
				break
			}
			from, to := max(wt.from, prev.to), min(wt.to, next.from)
			if to <= from {
				continue
			}
			r.Checked["d"]++
			r.Free.Stretches++
			r.Free.Longest = max(r.Free.Longest, to-from)
			if to-from > bound {
				freeViolation(r, wt, prev, next, from, to, bound, i > 0)
			}
		}
	}
}

// freeViolation reports wt waiting through the free stretch [from, to]
// between the spans prev and next.
func freeViolation(r *Report, wt wait, prev, next busy, from, to, bound int64, hasPrev bool) {
	after := "no lease before it"
	switch {
	case hasPrev && prev.lastIsWindow && prev.lastLease != "":
		after = fmt.Sprintf("after a fault window; the last lease before, %s's, ended by %s", prev.lastLease, ms(prev.lastLeaseTo))
	case hasPrev && prev.lastIsWindow:
		after = "after a fault window"
	case hasPrev && prev.lastWait != "":
		after = "after " + prev.lastWait + ", ahead of it, ended"
	case hasPrev:
		after = "after " + prev.last + "'s lease ended"
	}
	until := "its wait ended"
	switch {
	case next.from == to && next.firstWait != "":
		until = next.firstWait + " came ahead of it"
	case next.from == to && next.first != "":
		until = next.first + " took it"
	}
	var cs []string
	for _, c := range []string{wt.cs, prev.lastLease, next.first} {
		if c != "" && !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	r.Violations = append(r.Violations, Violation{Inv: "d", Name: wt.name, At: from + bound, CS: cs,
		From: max(min(wt.from, from-int64(500*time.Millisecond)), from-int64(3*time.Second)), To: to + int64(100*time.Millisecond),
		Msg: fmt.Sprintf("%s %s (waited %s–%s, %s) slept %v through a free stretch, beyond the bound %v: the lock was free from %s (%s) to %s (%s)",
			wt.w, wt.op, ms(wt.from), ms(wt.to), wt.res, dur(to-from), dur(bound), ms(from), after, ms(to), until)})
}

// dur renders a span of ns in ms.
func dur(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

// covered returns how much of [from, to] the sorted, disjoint spans cover.
func covered(spans []busy, from, to int64) int64 {
	var n int64
	for _, b := range spans {
		if lo, hi := max(b.from, from), min(b.to, to); hi > lo {
			n += hi - lo
		}
	}
	return n
}

// A semaphore's waiters queue in arrival order, and a waiter for k permits
// at the head holds up everyone behind it while fewer than k are free
// (docs/semaphore.md: strict arrival order; a later caller wanting fewer
// does not pass it). So a waiter W for k permits is kept waiting, rightly,
// while fewer than k may be free, or while a waiter V ahead of it for more
// waits and fewer than V's may be free; else, the queue's head (W or one
// ahead of it) can be granted, and W must get its permits or see others
// take them within freeBound. Its lock is "busy" for W while that holds;
// with every wait for one permit that is while all N may be held.
//
// V may be ahead of W only if V was called before W's place in the queue
// was taken: before W was told to wait (OpQueued), W's first attempt
// having returned by then. A fault that reached W while it waited (its
// worker stopped or cut off past its queue entry's life, a restart that
// emptied the queue) may have sent it to the back: from then on every wait
// called before the fault ended may be ahead. Without an OpQueued (a worker
// killed before its events were written, say) every wait called before W's
// ended may be.

// semBusy computes, per waiter, when a semaphore's name is busy for it.
type semBusy struct {
	n      int
	leases map[string][]busy // by name, weighted by their permits
	waits  map[string][]wait // by name, the waits for more than one permit
	fx     []effect
	plain  map[string][]busy // by name and permits waited for, the busy stretches of a waiter with nobody ahead for more
}

func newSemBusy(leases map[string][]busy, ws []wait, fx []effect, n int) *semBusy {
	b := &semBusy{n: n, leases: leases, waits: map[string][]wait{}, fx: fx, plain: map[string][]busy{}}
	for _, wt := range ws {
		if wt.n > 1 {
			b.waits[wt.name] = append(b.waits[wt.name], wt)
		}
	}
	return b
}

// arrival is the latest instant wt's place in the queue can date from
// (see above).
func (b *semBusy) arrival(wt wait) int64 {
	at := wt.to
	if wt.queued != 0 {
		at = wt.queued
	}
	for _, f := range b.fx {
		if (f.global || f.workers[wt.w]) && f.from <= wt.to && f.to >= wt.from {
			at = max(at, f.to)
		}
	}
	return at
}

// busyFor returns the stretches in which wt's name is busy for wt.
func (b *semBusy) busyFor(wt wait) []busy {
	wt.n = max(wt.n, 1)
	var ahead []wait
	arrived := int64(math.MinInt64)
	for _, v := range b.waits[wt.name] {
		if v.n <= wt.n || v.to <= wt.from || v.from >= wt.to {
			continue // (one wanting no more does not hold wt up longer than wt's own need does)
		}
		if arrived == math.MinInt64 {
			arrived = b.arrival(wt)
		}
		if v.from <= arrived {
			ahead = append(ahead, v)
		}
	}
	if len(ahead) > 0 {
		return saturated(b.leases[wt.name], ahead, wt.n, b.n)
	}
	return b.own(wt.name, wt.n)
}

// own returns the stretches in which name is busy for a waiter for k
// permits with nobody ahead for more.
func (b *semBusy) own(name string, k int) []busy {
	key := name + "\x00" + strconv.Itoa(k)
	ss, ok := b.plain[key]
	if !ok {
		ss = saturated(b.leases[name], nil, k, b.n)
		b.plain[key] = ss
	}
	return ss
}

// behind returns how long within wt's wait its name was busy for wt,
// by busyFor's stretches ss, but not by its own need alone: the time the
// queue rule kept it behind a waiter for more with its permits free.
func (b *semBusy) behind(wt wait, ss []busy) int64 {
	return covered(ss, wt.from, wt.to) - covered(b.own(wt.name, max(wt.n, 1)), wt.from, wt.to)
}

// saturated returns the stretches in which a waiter for k permits of a
// semaphore of N = n, with the waits ahead of it, must wait: those in
// which the lease spans ls may hold more than n less what the waiter or
// one of ahead (while it waits) needs. With k = 1 and none ahead: when at
// least n of them overlap, every permit may be held. Each opens with the
// lease (or the wait) whose start made it so and ends with the one whose
// end made it no longer so.
func saturated(ls []busy, ahead []wait, k, n int) []busy {
	type edge struct {
		at      int64
		start   bool
		permits int    // a lease's, taken (start) or given back
		need    int    // a wait ahead's, from its start to its end
		cs      string // the lease's
		wait    string // the wait's
	}
	var edges []edge
	for _, l := range ls {
		p := max(l.n, 1)
		edges = append(edges, edge{at: l.from, start: true, permits: p, cs: l.first}, edge{at: l.to, permits: p, cs: l.first})
	}
	for _, v := range ahead {
		d := fmt.Sprintf("%s's wait for %d permits", v.w, v.n)
		edges = append(edges, edge{at: v.from, start: true, need: v.n, wait: d}, edge{at: v.to, need: v.n, wait: d})
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].start && !edges[j].start // a start before an end at the same instant: spans that touch are joined
	})
	var out []busy
	held := 0
	needs := map[int]int{} // the waits ahead under way, by permits needed
	full := false
	for _, e := range edges {
		switch {
		case e.start && e.need > 0:
			needs[e.need]++
		case e.need > 0:
			needs[e.need]--
		case e.start:
			held += e.permits
		default:
			held -= e.permits
		}
		need := k
		for m, c := range needs {
			if c > 0 {
				need = max(need, m)
			}
		}
		switch now := held+need > n; {
		case now && !full:
			out = append(out, busy{from: e.at, first: e.cs, firstWait: e.wait})
		case !now && full:
			b := &out[len(out)-1]
			b.to, b.last, b.lastLease, b.lastLeaseTo, b.lastWait = e.at, e.cs, e.cs, e.at, e.wait
			if e.cs == "" { // (a wait ended it: the last lease is the one that ended last in it)
				b.lastLease, b.lastLeaseTo = "", math.MinInt64
			}
		}
		full = held+need > n
	}
	return out
}

// merged sorts a name's lease spans together with the fault windows and
// merges those that overlap.
func merged(ls []busy, faults []window) []busy {
	all := make([]busy, 0, len(ls)+len(faults))
	all = append(all, ls...)
	for _, f := range faults {
		all = append(all, busy{from: f.from, to: f.to, lastIsWindow: true, lastLeaseTo: math.MinInt64})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].from < all[j].from })
	var out []busy
	for _, b := range all {
		if n := len(out); n > 0 && b.from <= out[n-1].to {
			if b.to > out[n-1].to {
				out[n-1].to, out[n-1].last, out[n-1].lastIsWindow, out[n-1].lastWait = b.to, b.last, b.lastIsWindow, b.lastWait
			}
			if b.lastLease != "" && b.lastLeaseTo >= out[n-1].lastLeaseTo {
				out[n-1].lastLease, out[n-1].lastLeaseTo = b.lastLease, b.lastLeaseTo
			}
			continue
		}
		out = append(out, b)
	}
	return out
}

// setWaits returns the waits of a multi-lock call (AcquireAll, DoAll;
// TryAcquireAll does not wait): it takes its names one by one, so from its
// invocation, or from the previous step of its trace, it waits for the
// name of the next part it takes; a call that failed waited last for the
// first name, in the names' order, that it did not hold, until it
// returned or its context ended.
func setWaits(e Event) []wait {
	kind, steps := parseTrace(e)
	if kind == OpTry {
		return nil
	}
	var out []wait
	held := map[string]bool{}
	prev := e.Inv
	for _, s := range steps {
		if s.kind == '+' {
			out = append(out, wait{w: e.W, op: OpAll, name: s.name, cs: e.Grp, from: prev, to: s.at, res: "ok"})
			held[s.name] = true
		} else {
			delete(held, s.name)
		}
		prev = s.at
	}
	if e.Res == "ok" || e.Res == "invalid" || e.Res == "wrongtype" {
		return out
	}
	names := strings.Split(e.Name, ",")
	slices.Sort(names)
	for _, n := range names {
		if !held[n] {
			to := e.Ret
			if e.DL != 0 {
				to = min(to, e.DL)
			}
			if to > prev {
				out = append(out, wait{w: e.W, op: OpAll, name: n, cs: e.Grp, from: prev, to: to, res: e.Res})
			}
			break
		}
	}
	return out
}

// givenBack returns the leases of parts a multi-lock call took and gave
// back before it returned (a failed call, or a round started over): they
// are in no acquisition event, only in the call's trace. Each may have
// been granted from the step before it was seen taken, and ends when its
// release returned a definite answer, or else (the undo goes on in the
// background, the watchdog stopped) a lease time and landingSlack later.
func givenBack(h []Event, ttl time.Duration) []lease {
	var out []lease
	for _, e := range h {
		if e.Op != OpAll {
			continue
		}
		_, steps := parseTrace(e)
		from := map[string]int64{}
		prev := e.Inv
		for _, s := range steps {
			switch s.kind {
			case '+':
				from[s.name] = prev
			case '-', '!':
				if f, ok := from[s.name]; ok {
					to := s.at
					if s.kind == '!' {
						to += ttlOf(e, ttl) + int64(landingSlack) + int64(expirySlack)
					}
					out = append(out, lease{name: s.name, w: e.W, cs: e.Grp + "/" + s.name, from: f, to: to, n: 1})
					delete(from, s.name)
				}
			}
			prev = s.at
		}
	}
	return out
}
