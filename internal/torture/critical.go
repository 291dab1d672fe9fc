package torture

import (
	"context"
	"time"

	"github.com/dlockio/dlock"
)

// critical is a critical section: the holder stamps "enter", then a few
// times extends (sometimes), writes through the fenced resource and works
// a while, and stamps "exit". Every stamp is taken BEFORE the holder checks
// that it still holds (believe), and recorded only if the check passes: the
// check reads the clock after the stamp, so a recorded stamp is an instant
// at which the lease was valid by the library's own account. (Stamping
// after the check would let a descheduled goroutine stamp a moment past
// the validity, and report overlaps the library never promised to prevent.)
func (w *Worker) critical(h *handle, believe func() bool) {
	if !w.stamp(OpEnter, h, believe) {
		w.exit(h, believe)
		return
	}
	ttl := w.cfg.TTL
	for steps := 1 + w.rng.IntN(4); steps > 0; steps-- {
		if w.rng.IntN(4) == 0 {
			w.extend(h, w.extendTTL())
		}
		if !w.write(h, believe) {
			break
		}
		work := w.dur(0, ttl/10)
		switch {
		case w.rng.IntN(8) != 0:
		case !w.opts.autoExtend:
			work = w.dur(ttl, 3*ttl/2) // outlive the lease: later stamps must stop
		default:
			work = w.dur(ttl/2, ttl) // through watchdog extensions, which a fault can put at risk (l)
		}
		time.Sleep(work)
	}
	w.exit(h, believe)
}

// holdOn keeps a critical section going for about d, writing as it goes.
func (w *Worker) holdOn(h *handle, believe func() bool, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if !w.write(h, believe) {
			return
		}
		time.Sleep(w.dur(w.cfg.TTL/16, w.cfg.TTL/6))
	}
}

// stamp records op at the current instant if the holder still believes it
// holds the lock at a check made after reading the clock.
func (w *Worker) stamp(op string, h *handle, believe func() bool) bool {
	t := now()
	if !believe() {
		return false
	}
	w.rec.Add(Event{Name: h.l.Name(), Op: op, Inv: t, CS: h.id, Tok: h.l.Token(), Own: h.own, Fence: h.fence,
		VU: h.l.ValidUntil().UnixNano(), Held: true})
	return true
}

// exit records the end of a critical section; Held says whether the holder
// still believed it held the lock at the end.
func (w *Worker) exit(h *handle, believe func() bool) {
	t := now()
	held := believe()
	w.rec.Add(Event{Name: h.l.Name(), Op: OpExit, Inv: t, CS: h.id, Tok: h.l.Token(), Own: h.own, Fence: h.fence,
		VU: h.l.ValidUntil().UnixNano(), Held: held})
	if !held && w.opts.autoExtend {
		w.missedJeopardy(h)
	}
}

// write stamps "alive" and, if still held, writes through the Guard with
// the lease's fence. The Guard's answer is recorded: accepted (ok) or stale.
func (w *Worker) write(h *handle, believe func() bool) bool {
	if !w.stamp(OpAlive, h, believe) {
		return false
	}
	if h.fence == 0 {
		return true // no fence to write with: the lease was lost before it asked
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e := Event{Name: h.l.Name(), Op: OpWrite, CS: h.id, Tok: h.l.Token(), Own: h.own, Fence: h.fence, Held: true}
	e.Inv = now()
	err := w.guard.Write(ctx, w.cfg.GuardKey+h.l.Name(), h.id, h.fence, h.l.Token())
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	w.rec.Add(e)
	return true
}

// extendTTL picks an Extend argument: shorter than the Client's TTL, about
// it, or much longer (long enough that the watchdog's next tick comes after
// a TTL has passed).
func (w *Worker) extendTTL() time.Duration {
	ttl := w.cfg.TTL
	switch w.rng.IntN(3) {
	case 0:
		return w.dur(ttl/4, ttl/2)
	case 1:
		return w.dur(ttl*3/4, ttl*5/4)
	}
	return w.dur(3*ttl, 4*ttl)
}

// extend calls Extend and records the validity before and after.
func (w *Worker) extend(h *handle, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e := Event{Name: h.l.Name(), Op: OpExtend, CS: h.id, Tok: h.l.Token(), Own: h.own, Fence: h.fence, Arg: int64(ttl),
		VU0: h.l.ValidUntil().UnixNano(), Held: h.l.Err() == nil}
	due := w.watchdogAt(h)
	e.Inv = now()
	err := h.l.Extend(ctx, ttl)
	e.VU = h.l.ValidUntil().UnixNano() // read before Ret: any extension it reflects began before Ret
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	w.rec.Add(e)
	w.extended(h, ttl, due)
}

// nested re-enters a reentrant lock the owner holds (outer), with Acquire,
// TryAcquire or Do, runs a critical section under the inner hold, releases
// it, and then keeps the outer one going past a TTL: a nested hold must
// neither shorten the outer lease (which may have been extended first) nor
// take it away when released.
func (w *Worker) nested(ctx context.Context, outer *handle, believe func() bool) {
	ttl := w.cfg.TTL
	if w.rng.IntN(2) == 0 {
		w.extend(outer, w.dur(3*ttl, 4*ttl))
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	name := outer.l.Name()
	held := believe()
	inv := now()
	if w.rng.IntN(3) == 0 {
		w.nestedDo(nctx, name, outer.own, inv)
	} else if !w.nestedAcquire(nctx, outer, inv, held, believe) {
		return
	}
	w.holdOn(outer, believe, w.dur(ttl/2, 3*ttl/2))
}

// nestedAcquire takes the inner hold with Acquire or TryAcquire; a refusal
// while the outer hold was believed held before and after is recorded.
func (w *Worker) nestedAcquire(ctx context.Context, outer *handle, inv int64, held bool, believe func() bool) bool {
	op, name := OpTry, outer.l.Name()
	var l *dlock.Lock
	var err error
	if w.rng.IntN(2) == 0 {
		op = OpAcquire
		l, err = w.client(outer.own).Acquire(ctx, name)
	} else {
		l, err = w.client(outer.own).TryAcquire(ctx, name)
	}
	vu := validUntil(l)
	e := Event{Name: name, Op: op, Inv: inv, Ret: now(), Res: classify(err), Err: errText(err), Note: "nested"}
	if l == nil {
		w.rec.Add(e)
		if held && e.Res == "notacq" && believe() {
			w.rec.Add(Event{Name: name, Op: OpReentry, Inv: inv, Ret: e.Ret, CS: outer.id,
				Tok: outer.l.Token(), Fence: outer.fence, Err: e.Err})
		}
		return false
	}
	inner := w.newHandle(l, outer.own)
	e.CS, e.Tok, e.Own, e.Fence, e.VU = inner.id, l.Token(), inner.own, inner.fence, vu
	w.rec.Add(e)
	w.critical(inner, func() bool { return l.Err() == nil })
	w.release(inner, "nested")
	return true
}

// nestedDo takes the inner hold with Do.
func (w *Worker) nestedDo(ctx context.Context, name, own string, inv int64) {
	err := w.client(own).Do(ctx, name, func(fctx context.Context, l *dlock.Lock) error {
		vu := validUntil(l)
		ret := now()
		inner := w.newHandle(l, own)
		defer w.fnReturned(inner)
		w.rec.Add(Event{Name: name, Op: OpDo, Inv: inv, Ret: ret, CS: inner.id, Tok: l.Token(), Own: own,
			Fence: inner.fence, VU: vu, Res: "ok", Note: "nested"})
		w.critical(inner, func() bool { return fctx.Err() == nil })
		return nil
	})
	w.rec.Add(Event{Name: name, Op: OpDoRet, Inv: inv, Ret: now(), Res: classify(err), Err: errText(err),
		Note: "nested"})
}
