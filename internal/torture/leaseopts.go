package torture

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dlockio/dlock"
)

// This file is the per-call options of the workload (LeaseTTL, MaxWait,
// WatchLoss, HolderMeta, MaxHold, LockDelay) and the max hold's part of it: a holder that keeps
// its critical section going past the cap, then watches the loss signal
// and the lock's key.

// optModes reports whether acquisitions of mode take per-call options and
// max holds: the modes whose names are plain locks (a reentrant owner's
// re-entries, semaphores, elections and read-write locks are left out).
func optModes(mode string) bool {
	switch mode {
	case ModePlain, ModeFair, ModeMulti, ModeQuorum3, ModeQuorum5, ModeNoScripts:
		return true
	}
	return false
}

// queuedKinds reports whether mode's names are the queued kinds other than
// a fair lock — semaphores, elections, read-write locks —, whose
// acquisitions take a lease time and a wait bound of their own (LeaseTTL,
// MaxWait) but no other per-call option (holder metadata is an election's
// value and a read-write hold's kind here). A lease time below the
// round's puts the lease's revocation window, and its queue entry's life,
// below the delays a fault holds requests for (400ms–1.2s), so a delayed
// queueing request can land after its window.
func queuedKinds(mode string) bool {
	return mode == ModeSemaphore || mode == ModeElection || mode == ModeRW
}

// metas are the holder metadata the workload gives leases: escaping, a
// comma (Inspect joins several holders' with ", "), the longest allowed, and none.
var metas = []string{"job-7", "host a:1/x", "ünï%20cødé", "k=v; w, x", strings.Repeat("mx", dlock.MaxMetaLen/2), ""}

// callOpts are the per-call options of one acquisition.
type callOpts struct {
	opts  []dlock.LockOption
	ttl   time.Duration // LeaseTTL; 0: none
	wait  time.Duration // MaxWait; -1: none
	meta  *string       // HolderMeta; nil: none
	hold  *time.Duration
	delay time.Duration // LockDelay; 0: none
}

// drawOpts picks the per-call options of an acquisition by op (OpAcquire,
// OpTry, OpDo), in the modes that take them: a lease time shorter or
// longer than the Client's (up to twice it: the checks' longest lease stays
// 4×TTL, an Extend's), a wait bound, WatchLoss on or off (with the
// watchdog), and (optModes) holder metadata, a max
// hold or none in place of the Client's, and a lock-delay (up to TTL/2:
// with twice the TTL asked, the lease stays within 4×TTL).
func (w *Worker) drawOpts(op string) callOpts {
	co := callOpts{wait: -1}
	queued := queuedKinds(w.cfg.Mode)
	if (!queued && !optModes(w.cfg.Mode)) || w.rng.IntN(3) != 0 {
		return co
	}
	ttl := w.cfg.TTL
	if w.rng.IntN(2) == 0 {
		co.ttl = w.dur(ttl/3, 2*ttl).Truncate(time.Millisecond)
		co.opts = append(co.opts, dlock.LeaseTTL(co.ttl))
	}
	if op != OpTry && w.rng.IntN(3) == 0 {
		co.wait = []time.Duration{0, w.dur(ttl/10, ttl)}[w.rng.IntN(2)]
		co.opts = append(co.opts, dlock.MaxWait(co.wait))
	}
	if w.opts.autoExtend && w.rng.IntN(3) == 0 { // (it needs the watchdog)
		co.opts = append(co.opts, dlock.WatchLoss(w.rng.IntN(2) == 0))
	}
	if queued {
		return co
	}
	if w.rng.IntN(2) == 0 {
		m := metas[w.rng.IntN(len(metas))]
		co.meta = &m
		co.opts = append(co.opts, dlock.HolderMeta(m))
	}
	if w.rng.IntN(3) == 0 {
		d := w.maxHold()
		if w.rng.IntN(4) == 0 {
			d = 0 // lifts the Client's cap
		}
		co.hold = &d
		co.opts = append(co.opts, dlock.MaxHold(d))
	}
	if w.rng.IntN(3) == 0 {
		co.delay = w.dur(ttl/10, ttl/2).Truncate(time.Millisecond)
		co.opts = append(co.opts, dlock.LockDelay(co.delay))
	}
	return co
}

// maxHold picks a max hold: from half a TTL (a lease time of the cap) to
// twice the TTL (the watchdog extends up to it).
func (w *Worker) maxHold() time.Duration {
	return w.dur(max(w.cfg.TTL/2, dlock.MinTTL), 2*w.cfg.TTL).Truncate(time.Millisecond)
}

// effHold is the max hold that applies to an acquisition with co: its own,
// or the Client's.
func (w *Worker) effHold(co callOpts) time.Duration {
	if co.hold != nil {
		return *co.hold
	}
	return w.hold
}

// expectMeta is the holder metadata a lease taken with co carries: its
// own, or the Client's ("" when the Client's is the default, which
// Lock.Meta then tells).
func (w *Worker) expectMeta(co callOpts, l *dlock.Lock) string {
	switch {
	case co.meta != nil:
		return *co.meta
	case w.meta != nil:
		return *w.meta
	}
	return l.Meta()
}

// annotate records in e what an acquisition with co asked for and what its
// lease got: its lease time, max hold and cap, and (MaxWait) the instant
// the call stops waiting, from which check (d) measures its lateness.
func (w *Worker) annotate(e *Event, co callOpts, l *dlock.Lock) {
	if co.ttl > 0 {
		e.TTL = int64(co.ttl)
	}
	if co.wait >= 0 && e.DL != 0 {
		e.DL = min(e.DL, e.Inv+int64(co.wait))
	}
	if l == nil {
		return
	}
	e.Hold = int64(w.effHold(co))
	e.Delay = int64(co.delay)
	if at, ok := l.Deadline(); ok {
		e.Cap = at.UnixNano()
	}
}

// inspect asks Redis, from inside a critical section, who holds the lock,
// and records the holder metadata shown against the one expected.
func (w *Worker) inspect(h *handle, co callOpts) {
	if !optModes(w.cfg.Mode) || w.rng.IntN(4) != 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e := Event{Name: h.l.Name(), Op: OpInspect, CS: h.id, Tok: h.l.Token(), Inv: now(),
		Meta: w.expectMeta(co, h.l), LMeta: h.l.Meta()}
	info, err := w.c.Inspect(ctx, h.l.Name())
	e.Ret, e.Err, e.Seen, e.Res = now(), errText(err), info.Meta, "other"
	switch {
	case err != nil:
		e.Res = classify(err)
	case info.Token == h.l.Token():
		e.Res = "mine"
	}
	w.rec.Add(e)
}

// overstay, for a lease with a max hold that ends within 2×TTL, keeps the
// critical section going (writes, no Extend) until the holder no longer
// believes it holds, then waits for the loss signal and records it
// (OpCapped), and, when the loss was the cap's, watches the lock's key go
// (OpCapFree). believe is the holder's check (Lock.Err, or Do's context);
// the loss itself is read from the Lock.
func (w *Worker) overstay(h *handle, believe func() bool) {
	at, ok := h.l.Deadline()
	if !ok || time.Until(at) > 2*w.cfg.TTL || w.rng.IntN(2) != 0 {
		return
	}
	done := h.l.Done()
	var lastVU int64 // ValidUntil while the lease was last seen held
	for i := 0; i < 1000 && time.Now().Before(at.Add(time.Second)); i++ {
		if h.l.Err() != nil {
			break
		}
		lastVU = h.l.ValidUntil().UnixNano()
		if !w.write(h, believe) {
			break
		}
		time.Sleep(min(w.dur(w.cfg.TTL/16, w.cfg.TTL/6), time.Until(at)+time.Millisecond))
	}
	e := Event{Name: h.l.Name(), Op: OpCapped, CS: h.id, Tok: h.l.Token(), Fence: h.fence, VU0: lastVU, Cap: at.UnixNano()}
	e.Inv = now() // the holder waits for the signal from here (a critical section may have slept past the cap)
	select {
	case <-done:
		e.Held = true
	case <-time.After(time.Until(at) + 2*time.Second):
	}
	err := h.l.Err()
	e.Ret, e.Res, e.Err, e.MH = now(), classify(err), errText(err), errors.Is(err, dlock.ErrMaxHold)
	w.rec.Add(e)
	if e.MH {
		w.capFree(h, at)
	}
}

// capFree polls Redis, after a lease's loss at its max hold, until the
// lock no longer carries it (the library releases it at once; at worst
// the key expires a drift margin after the cap; with a lock-delay, up to
// TTL/2 more), for at most 4s past the cap, and records what it found.
func (w *Worker) capFree(h *handle, at time.Time) {
	e := Event{Name: h.l.Name(), Op: OpCapFree, CS: h.id, Tok: h.l.Token(), Cap: at.UnixNano(), Inv: now(), Res: "stillheld"}
	for i := 0; i < 100 && e.Res == "stillheld"; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		held, _, err := w.carries(ctx, h.l.Name(), h.l.Token(), h.own)
		cancel()
		switch {
		case err != nil:
			e.Res, e.Err = "unknown", errText(err)
		case !held:
			e.Res = "released"
		case time.Now().After(at.Add(4 * time.Second)):
			e.Ret = now()
			w.rec.Add(e)
			return
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	e.Ret = now()
	w.rec.Add(e)
}
