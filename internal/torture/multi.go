package torture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockio/dlock"
)

// This file is the multi-lock part of the workload: AcquireAll,
// TryAcquireAll and DoAll over a few of the round's names, in rounds whose
// other acquisitions take the same names one at a time. Each part of a
// set is recorded as an acquisition of its name (Event.Grp names the set),
// so checks (a)–(g) see it as any other lease; the call itself is an
// OpAll event, whose trace says which parts were taken and given back
// while it ran (check (i)).

// multiShare is how many acquisitions of a mode, in 100, take a set of
// names (0: none).
func multiShare(mode string) int {
	switch mode {
	case ModeMulti:
		return 50
	case ModePlain, ModeFair:
		return 15
	}
	return 0
}

// acquireAll takes names all or nothing with opts, waiting (AcquireAll)
// or not (try: TryAcquireAll). It is the workload's one call of either.
func acquireAll(ctx context.Context, c *dlock.Client, names []string, try bool, opts []dlock.LockOption) (*dlock.MultiLock, error) {
	if try {
		return c.TryAcquireAll(ctx, names, opts...)
	}
	return c.AcquireAll(ctx, names, opts...)
}

// tracer records, while a multi-lock call runs, the parts its Client took
// and gave back, as the Client's Observer sees them end.
type tracer struct {
	mu    sync.Mutex
	on    bool
	inv   int64
	steps []string
}

// observer is the Observer that feeds the tracer.
func (t *tracer) observer() dlock.Observer {
	return dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		var s string
		switch {
		case e.Op == dlock.OpAcquire && e.Err == nil:
			s = "+"
		case e.Op == dlock.OpRelease && (e.Err == nil || errors.Is(e.Err, dlock.ErrNotHeld)):
			s = "-" // gone from Redis
		case e.Op == dlock.OpRelease:
			s = "!" // unknown: the undo goes on in the background
		default:
			return
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.on {
			t.steps = append(t.steps, fmt.Sprintf("%s%s@%d", s, e.Name, (now()-t.inv)/1000))
		}
	}}
}

// start begins a trace for a call invoked at inv.
func (t *tracer) start(inv int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on, t.inv, t.steps = true, inv, nil
}

// stop ends the trace and returns it.
func (t *tracer) stop() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on = false
	return strings.Join(t.steps, " ")
}

// step is one entry of a multi-lock call's trace: a part taken ('+'),
// given back and gone ('-'), or given back with an unknown outcome ('!').
type step struct {
	kind byte
	name string
	at   int64 // unix ns
}

// parseTrace reads the trace of the OpAll event e (its Note after the
// kind: "acquire +n0@120 +n1@4410 …", times in µs since e.Inv).
func parseTrace(e Event) (kind string, steps []step) {
	f := strings.Fields(e.Note)
	if len(f) == 0 {
		return "", nil
	}
	for _, s := range f[1:] {
		name, at, ok := strings.Cut(s[1:], "@")
		us, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil {
			continue
		}
		steps = append(steps, step{s[0], name, e.Inv + us*1000})
	}
	return f[0], steps
}

// pickNames returns two or more of the round's names, in random order.
func (w *Worker) pickNames() []string {
	names := slices.Clone(w.cfg.Names)
	w.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names[:2+w.rng.IntN(len(names)-1)]
}

// multi runs AcquireAll (op OpAcquire), TryAcquireAll (OpTry) or DoAll
// (OpDo) over a few names, with per-call options that apply to every part
// (MaxWait to the whole call), a critical section over the set, and its
// release.
func (w *Worker) multi(op string) {
	names := w.pickNames()
	co := w.drawOpts(op)
	ctx, cancel, dl := w.opCtx()
	defer cancel()
	grp := w.newID()
	all := Event{Name: strings.Join(names, ","), Op: OpAll, Grp: grp, DL: dl, Bound: w.lateBound()}
	all.Inv = now()
	w.annotate(&all, callOpts{ttl: co.ttl, wait: co.wait}, nil) // (the call's wait bound; its parts' leases are theirs)
	w.trace.start(all.Inv)
	if op == OpDo {
		w.doAll(ctx, names, &all, co)
		return
	}
	m, err := acquireAll(ctx, w.c, names, op == OpTry, co.opts)
	all.Ret, all.Res, all.Err = now(), classify(err), errText(err)
	all.Note = op + " " + w.trace.stop()
	if m == nil {
		w.rec.Add(all)
		return
	}
	all.DL = 0 // it returned the set: no lateness to measure
	hs := w.parts(m, &all, op, co)
	w.rec.Add(all)
	w.multiCritical(m, hs, co, func() bool { return m.Err() == nil })
	w.releaseAll(m, hs)
}

// doAll runs DoAll; fn does the critical section, and sometimes fails or
// panics (DoAll must then release every part).
func (w *Worker) doAll(ctx context.Context, names []string, all *Event, co callOpts) {
	var hs []*handle
	var panicked any
	err := func() (err error) {
		defer func() { panicked = recover() }()
		return w.c.DoAll(ctx, names, func(fctx context.Context, m *dlock.MultiLock) error {
			all.Ret = now()
			all.Note = OpDo + " " + w.trace.stop()
			hs = w.parts(m, all, OpDo, co)
			w.multiCritical(m, hs, co, func() bool { return fctx.Err() == nil })
			return w.fnOutcome()
		}, co.opts...)
	}()
	if hs == nil { // fn never ran
		all.Ret, all.Note = now(), OpDo+" "+w.trace.stop()
	} else {
		all.DL = 0
	}
	all.Res, all.Err = classify(err), errText(err)
	w.rec.Add(*all)
	// Each part's end, as Do's: "ok" (or fn's own error) says the part is
	// gone from Redis; any other error, joined from several parts, does not
	// say which, so it says nothing ("err").
	res := "err"
	if err == nil {
		res = "ok"
	}
	for _, h := range hs {
		e := Event{Name: h.l.Name(), Op: OpDoRet, Inv: all.Inv, Ret: now(), Tok: h.l.Token(), Res: res, Err: errText(err), Grp: all.Grp}
		if panicked != nil {
			e.Note = fmt.Sprint("panic: ", panicked)
		}
		w.rec.Add(e)
	}
	if panicked != nil {
		for _, h := range hs {
			w.afterPanic(h.l.Name(), h.l.Token(), "", all.Inv)
		}
	}
}

// parts records the parts of the set m that the call all returned, as
// acquisitions by op of their names, and what the set says of itself:
// Arg how many parts, Seen its names in order (check (i)). Each part's
// fence is asked for and recorded (OpFence): Redis issues it only while the
// part holds its lock.
func (w *Worker) parts(m *dlock.MultiLock, all *Event, op string, co callOpts) []*handle {
	all.Arg, all.Seen = int64(len(m.Locks())), strings.Join(m.Names(), ",")
	var hs []*handle
	for _, l := range m.Locks() {
		fe := Event{Name: l.Name(), Op: OpFence, Tok: l.Token(), VU0: l.ValidUntil().UnixNano(), Held: l.Err() == nil, Grp: all.Grp}
		h := &handle{l: l, id: w.newID()}
		fe.Inv = now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		f, err := l.Fence(ctx)
		cancel()
		h.fence = f
		fe.Ret, fe.Res, fe.Err, fe.CS, fe.Fence = now(), classify(err), errText(err), h.id, f
		e := Event{Name: l.Name(), Op: op, Inv: all.Inv, Ret: all.Ret, Res: "ok", CS: h.id, Tok: l.Token(),
			Fence: f, VU: l.ValidUntil().UnixNano(), Grp: all.Grp}
		w.annotate(&e, callOpts{ttl: co.ttl, wait: -1, hold: co.hold}, l)
		w.rec.Add(e)
		w.rec.Add(fe)
		hs = append(hs, h)
	}
	return hs
}

// multiCritical is a critical section over a set: each step stamps and
// writes through every part, believing the set held (believe: MultiLock.Err
// or DoAll's context); sometimes the set is extended. At the end, if a part
// was lost, the set must say so (OpAllLost).
func (w *Worker) multiCritical(m *dlock.MultiLock, hs []*handle, co callOpts, believe func() bool) {
	for _, h := range hs {
		w.stamp(OpEnter, h, believe)
	}
	for steps := 1 + w.rng.IntN(3); steps > 0; steps-- {
		if w.rng.IntN(4) == 0 {
			w.extendAll(m, hs, w.extendTTL())
		}
		for _, h := range hs {
			if !w.write(h, believe) {
				steps = 0
			}
		}
		time.Sleep(w.dur(0, w.cfg.TTL/10))
	}
	for _, h := range hs {
		w.inspect(h, co)
		w.exit(h, believe)
	}
	for _, h := range hs {
		if err := h.l.Err(); err != nil && err != dlock.ErrReleased {
			// The part's loss is declared: the set's must be too.
			e := Event{Name: h.l.Name(), Op: OpAllLost, CS: h.id, Tok: h.l.Token(), Inv: now(), Err: errText(err),
				Held: m.Err() == nil, Res: "closed"}
			select {
			case <-m.Done():
			default:
				e.Res = "open"
			}
			w.rec.Add(e)
			break
		}
	}
}

// extendAll calls MultiLock.Extend and records it as an Extend of each
// part (see setCall).
func (w *Worker) extendAll(m *dlock.MultiLock, hs []*handle, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.setCall(hs, Event{Op: OpExtend, Arg: int64(ttl), Note: "multi"}, func() error { return m.Extend(ctx, ttl) })
}

// setCall runs call, a call on the whole set, and records it as one event
// like e for each part, with the part's validity before (VU0) and after:
// "ok" if call returned nil, "closed" if its error matches ErrClosed (as
// classify says a single call's), else "err" (its error joins the parts',
// and does not say which of them took effect).
func (w *Worker) setCall(hs []*handle, e Event, call func() error) error {
	es := make([]Event, len(hs))
	for i, h := range hs {
		es[i] = e
		es[i].Name, es[i].CS, es[i].Tok, es[i].Fence = h.l.Name(), h.id, h.l.Token(), h.fence
		es[i].VU0, es[i].Held = h.l.ValidUntil().UnixNano(), h.l.Err() == nil
	}
	inv := now()
	err := call()
	ret, res := now(), "ok"
	switch {
	case errors.Is(err, dlock.ErrClosed):
		res = "closed" // (o), as classify says a single call's
	case err != nil:
		res = "err"
	}
	for i, h := range hs {
		if e.Op == OpExtend {
			es[i].VU = h.l.ValidUntil().UnixNano()
		}
		es[i].Inv, es[i].Ret, es[i].Res, es[i].Err = inv, ret, res, errText(err)
		w.rec.Add(es[i])
	}
	return err
}

// releaseAll releases the set, once or twice, and after a Redis error
// again (bounded), as the docs allow; each call is recorded as a Release
// of each part (see setCall).
func (w *Worker) releaseAll(m *dlock.MultiLock, hs []*handle) {
	note := "first"
	for try := 0; try < 5; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := w.setCall(hs, Event{Op: OpRelease, Note: note}, func() error { return m.Release(ctx) })
		cancel()
		switch {
		case err == nil && w.rng.IntN(5) == 0 && note == "first":
			note = "again"
			continue
		case err == nil:
			for _, h := range hs {
				w.selfCheck(h)
			}
			return
		case errors.Is(err, dlock.ErrNotHeld):
			return // a part was lost; the others' releases answered
		}
		note = "retry"
		time.Sleep(300 * time.Millisecond)
	}
}
