package torture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlockio/dlock"
	"github.com/redis/go-redis/v9"
)

// acquire runs Acquire or TryAcquire and, if it got the lock, a critical
// section, then a release (or keeps the handle for a late release).
func (w *Worker) acquire(name, op string) {
	ctx, cancel, dl := w.opCtx()
	defer cancel()
	own := w.owner()
	co := w.drawOpts(op)
	n := w.permits()
	t := w.targetN(own, name, co.opts, n)
	inv := now()
	var (
		l   *dlock.Lock
		err error
	)
	if op == OpAcquire {
		l, err = t.Acquire(ctx)
	} else {
		l, err = t.TryAcquire(ctx)
	}
	vu := validUntil(l) // read before Ret: any extension it reflects began before Ret
	e := Event{Name: name, Op: op, Inv: inv, Ret: now(), Res: classify(err), Err: errText(err), DL: dl, Bound: w.lateBound()}
	w.annotate(&e, co, l)
	if n > 1 {
		e.N = n
	}
	if l == nil {
		w.rec.Add(e)
		return
	}
	h := w.newHandle(l, own)
	h.ttl, h.n = cmp.Or(co.ttl, w.cfg.TTL), n
	e.CS, e.Tok, e.Own, e.Fence, e.VU = h.id, l.Token(), own, h.fence, vu
	w.rec.Add(e)
	if own == "" && !w.opts.autoExtend && co.hold == nil && w.hold == 0 && w.rng.IntN(5) == 0 {
		w.resume(h, name, co) // h.l is the resumed Lock from here on
	}
	believe := func() bool { return h.l.Err() == nil }
	w.critical(h, believe)
	if rw := w.rws[name]; rw != nil && IsWrite(h.l.Token()) && w.rng.IntN(3) == 0 && w.downgrade(h, rw) {
		w.critical(h, believe) // now as a read: readers may join it
	}
	if ld := w.won[h.l]; ld != nil && w.rng.IntN(2) == 0 { // (h.l: the resumed Lock, if resumed)
		w.proclaim(h, ld)
		w.critical(h, believe)
	}
	delete(w.won, l)
	delete(w.won, h.l)
	w.inspect(h, co)
	if own != "" && w.rng.IntN(2) == 0 {
		w.nested(ctx, h, believe)
	}
	w.overstay(h, believe)
	w.dispose(h)
}

// resume takes over h's lease by its token (dlock.Resume) through a new
// Lock of the same kind, as another process would, and carries on the
// critical section with it; the old Lock, which has no watchdog (the
// worker does not extend automatically), is dropped unused. The fence
// stays the one the lease got: the resumed Lock does not ask for another;
// but a resumed leadership is issued a new one, above its term's, which
// the event records (check (h) reads the term's fence from it).
func (w *Worker) resume(h *handle, name string, co callOpts) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	t := w.targetN("", name, nil, h.n) // (a hold of n permits is resumed as n: AcquireN)
	if rw := w.rws[name]; rw != nil {
		t = rwSide(rw, IsWrite(h.l.Token())) // the side of the hold, not a random one
	}
	ttl := co.ttl
	if ttl == 0 {
		ttl = w.cfg.TTL
	}
	opts := []dlock.LockOption{dlock.Resume(h.l.Token()), dlock.LeaseTTL(ttl)}
	if co.meta != nil {
		opts = append(opts, dlock.HolderMeta(*co.meta))
	}
	e := Event{Name: name, Op: OpResume, CS: h.id, Tok: h.l.Token(), Fence: h.fence, Arg: int64(ttl),
		VU0: h.l.ValidUntil().UnixNano(), Held: h.l.Err() == nil}
	if h.n > 1 {
		e.N = h.n
	}
	e.Inv = now()
	l, err := t.TryAcquire(ctx, opts...)
	vu := validUntil(l)
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	if l != nil {
		e.VU = vu
		if l.Token() != h.l.Token() {
			e.Res, e.Err = "wrongtoken", "resumed "+l.Token()
		}
		if ld := w.won[l]; ld != nil {
			e.Fence, h.fence = ld.Fence(), ld.Fence()
		}
		h.l = l
		w.watch(l, h.id, h.fence)
	}
	w.rec.Add(e)
}

// downgrade turns h's write hold into a read (RWMutex.Downgrade) and
// records it; it reports whether the hold is now surely a read. After an
// error the hold may be either, so the caller goes no further with it.
func (w *Worker) downgrade(h *handle, rw *dlock.RWMutex) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e := Event{Name: h.l.Name(), Op: OpDowngrade, CS: h.id, Tok: h.l.Token(), Fence: h.fence,
		VU0: h.l.ValidUntil().UnixNano(), Held: h.l.Err() == nil}
	e.Inv = now()
	err := rw.Downgrade(ctx, h.l)
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	w.rec.Add(e)
	return err == nil
}

// proclaim changes the value h's leadership shows (Leadership.Proclaim) to
// one unique to the call, and records it; check (h) then wants a read of the
// leader to show a value of the term it names.
func (w *Worker) proclaim(h *handle, ld *dlock.Leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v := fmt.Sprintf("p:%s:%d", h.id, w.rng.IntN(1000))
	e := Event{Name: h.l.Name(), Op: OpProclaim, CS: h.id, Tok: h.l.Token(), Fence: h.fence, Seen: v,
		VU0: h.l.ValidUntil().UnixNano(), Held: h.l.Err() == nil}
	e.Inv = now()
	err := ld.Proclaim(ctx, v)
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	w.rec.Add(e)
}

// dispose ends a handle's life: most are released at once (some twice),
// some are kept to be released again later, and (without auto-extend) some
// are left to lapse first, so that a later Release comes from a stale handle;
// with auto-extend, some are released as the watchdog runs (raceWatchdog).
func (w *Worker) dispose(h *handle) {
	switch r := w.rng.IntN(10); {
	case r == 0:
		w.release(h, "first")
		w.stale = append(w.stale, h)
	case r == 1 && !w.opts.autoExtend:
		w.stale = append(w.stale, h) // lapses by itself; released late
	case r == 1:
		w.raceWatchdog(h)
	default:
		err := w.release(h, "first")
		if w.rng.IntN(5) == 0 {
			err = w.release(h, "again")
		}
		if err == nil { // a Release that failed leaves the lease to expire, as documented
			w.selfCheck(h)
		}
	}
}

// release calls Release and records it; a Redis error keeps the handle for
// another try at the end, as the docs allow.
func (w *Worker) release(h *handle, note string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e := Event{Name: h.l.Name(), Op: OpRelease, CS: h.id, Tok: h.l.Token(), Own: h.own, Fence: h.fence,
		VU0: h.l.ValidUntil().UnixNano(), Held: h.l.Err() == nil, Note: note}
	e.Inv = now()
	err := h.l.Release(ctx)
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	w.rec.Add(e)
	if e.Res == "err" {
		w.pending = append(w.pending, h)
	}
	return err
}

// lateRelease releases a handle kept from an earlier operation.
func (w *Worker) lateRelease() {
	if len(w.stale) == 0 {
		return
	}
	i := w.rng.IntN(len(w.stale))
	h := w.stale[i]
	w.stale = append(w.stale[:i], w.stale[i+1:]...)
	w.release(h, "late")
}

// finish releases what the worker still has: stale handles, and handles
// whose Release failed, retried while Redis may still be recovering.
func (w *Worker) finish() {
	for _, h := range w.stale {
		w.release(h, "late")
	}
	w.stale = nil
	for try := 0; try < 10 && len(w.pending) > 0; try++ {
		left := w.pending
		w.pending = nil
		for _, h := range left {
			w.release(h, "retry")
		}
		if len(w.pending) > 0 {
			time.Sleep(300 * time.Millisecond)
		}
	}
}

// selfCheck asks Redis, after a successful release, whether the lock still
// carries this handle's lease.
func (w *Worker) selfCheck(h *handle) {
	if h.l.Err() != dlock.ErrReleased || w.rng.IntN(3) != 0 {
		return
	}
	w.gone(h, "")
}

// carries reports whether the lock name still carries the lease tok: a
// plain lock as its token, a semaphore as one of its permits, a reentrant
// one (owner own) as the hold's own field. Not the owner: other holds of it may legitimately be there — a
// stale handle waiting for its late release, or an attempt whose outcome
// was unknown and whose undo runs in the background.
func (w *Worker) carries(ctx context.Context, name, tok, own string) (bool, string, error) {
	if own != "" {
		key := w.cfg.Prefix + "{" + name + "}"
		deadline, err := w.rdbs[0].HGet(ctx, key, "h:"+tok).Result()
		if err == redis.Nil {
			return false, "", nil
		}
		return err == nil, "hold field h:<token> = " + deadline, err
	}
	info, err := w.c.Inspect(ctx, name)
	held := info.Token == tok
	for _, p := range info.Permits {
		held = held || p.Token == tok
	}
	for _, p := range info.RWHolds {
		held = held || p.Token == tok
	}
	return err == nil && held, fmt.Sprintf("type=%s ttl=%v", info.Type, info.TTL), err
}

// do runs Client.Do; fn does a critical section, sometimes nests (reentrant
// mode), returns an error, or panics. A panic is recovered here, and the
// lock must then be released: Do releases before it re-panics.
func (w *Worker) do(name string) { w.doIn(context.Background(), name) }

// doIn is do with a context derived from parent (a nested Do's is its
// outer fn's, which carries the outer lease: see nest), and extra options.
func (w *Worker) doIn(parent context.Context, name string, extra ...dlock.LockOption) {
	ctx, cancel, dl := w.opCtxIn(parent)
	defer cancel()
	own := w.owner()
	co := w.drawOpts(OpDo)
	co.opts = slices.Concat(co.opts, extra)
	inv := now()
	var tok string
	var panicked any
	err := func() (err error) {
		defer func() { panicked = recover() }()
		return w.target(own, name, co.opts).Do(ctx, func(fctx context.Context, l *dlock.Lock) error {
			vu := validUntil(l)
			ret := now()
			h := w.newHandle(l, own)
			defer w.fnReturned(h)
			tok = l.Token()
			e := Event{Name: name, Op: OpDo, Inv: inv, Ret: ret, CS: h.id, Tok: tok, Own: own,
				Fence: h.fence, VU: vu, Res: "ok"}
			w.annotate(&e, co, l)
			w.rec.Add(e)
			// A Do user is told of the loss by fn's context.
			believe := func() bool { return fctx.Err() == nil }
			w.critical(h, believe)
			w.inspect(h, co)
			if own != "" && w.rng.IntN(2) == 0 {
				w.nested(fctx, h, believe)
			}
			w.nest(fctx, name)
			w.overstay(h, believe)
			return w.fnOutcome()
		})
	}()
	e := Event{Name: name, Op: OpDoRet, Inv: inv, Ret: now(), Tok: tok, Res: classify(err), Err: errText(err),
		DL: dl, Bound: w.lateBound(), MH: errors.Is(err, dlock.ErrMaxHold)}
	w.annotate(&e, co, nil)
	if tok != "" {
		e.DL = 0 // fn ran (for as long as it liked): no lateness to measure
	}
	if panicked != nil {
		e.Note = fmt.Sprint("panic: ", panicked)
	}
	w.rec.Add(e)
	if panicked != nil && tok != "" {
		w.afterPanic(name, tok, own, inv)
	}
}

// fnReturned records that a Do's fn holding h returned (or panicked): Do
// releases the lock from then on.
func (w *Worker) fnReturned(h *handle) {
	w.rec.Add(Event{Name: h.l.Name(), Op: OpFnRet, Inv: now(), CS: h.id, Tok: h.l.Token()})
}

// errFn is what fn returns when the workload makes it fail.
var errFn = errors.New("torture: fn failed")

// fnOutcome decides how fn ends: mostly nil, sometimes an error, sometimes
// a panic.
func (w *Worker) fnOutcome() error {
	switch w.rng.IntN(12) {
	case 0:
		panic("torture: fn panics")
	case 1:
		return errFn
	}
	return nil
}

// afterPanic checks, after Do re-panicked, that the lock no longer carries
// the token of the Do that panicked.
func (w *Worker) afterPanic(name, tok, own string, inv int64) {
	// Do releases before it re-panics; a release that failed for want of an
	// answer is retried in the background (its first try before the panic
	// goes on), so allow it a moment to land.
	res := "stillheld"
	var err error
	for deadline := time.Now().Add(2 * time.Second); res == "stillheld" && time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var held bool
		held, _, err = w.carries(ctx, name, tok, own)
		cancel()
		switch {
		case err != nil:
			res = "unknown"
		case held:
			time.Sleep(100 * time.Millisecond)
		default:
			res = "released"
		}
	}
	w.rec.Add(Event{Name: name, Op: OpPanic, Inv: inv, Ret: now(), Tok: tok, Res: res, Err: errText(err)})
}

// readLeader reads the leader of the election name and records what it
// read (check (h)).
func (w *Worker) readLeader(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	inv := now()
	ld, err := w.elect[name].Leader(ctx)
	w.rec.Add(Event{Name: name, Op: OpLeader, Inv: inv, Ret: now(), Res: classify(err), Err: errText(err),
		Tok: ld.Token, Fence: ld.Fence, Seen: ld.Value})
}

// validUntil is l's ValidUntil in ns (0 for no Lock), read as soon as the
// call that returned l is over: a watchdog extension after that (the
// worker descheduled, or annotating the event with a round trip) would
// make it reach past the call's return plus a TTL.
func validUntil(l *dlock.Lock) int64 {
	if l == nil {
		return 0
	}
	return l.ValidUntil().UnixNano()
}
