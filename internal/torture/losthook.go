package torture

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlockio/dlock"
)

// This file is the Lost hook part of the workload: half the Clients have a
// Lost hook that, told of the loss of one of its worker's leases, calls
// back into that lease's Lock under a bounded context — Release, Fence,
// Extend or Err, a write hold's Downgrade, a leadership's Proclaim, one
// chosen at random — as it may be told by the very call that found the
// loss (a Fence, an extension, the watchdog's, a Downgrade, a Proclaim).
// Each call is recorded (OpLostCall) for check (n).

// lostHook is a worker's Lost hook and the leases it watches. It runs on
// whatever goroutine tells the loss, so it has a random source of its own.
type lostHook struct {
	rec   *Recorder
	ttl   time.Duration
	bound int64 // how late after its context's end a call may return (lateBound)
	mu    sync.Mutex
	rng   *rand.Rand
	held  map[string][]*hooked // by name: the leases not yet released or lost
}

// hooked is a lease the hook watches: its Lock and what else it can call.
type hooked struct {
	l     *dlock.Lock
	id    string
	fence int64             // the fence issued before (0: none)
	rw    *dlock.RWMutex    // a write hold's read-write lock, else nil
	ld    *dlock.Leadership // a leadership, else nil
	done  bool              // released, or its loss handled
}

// newLostHook returns the hook of a worker drawing from its seed, or nil
// for the other half of the workers.
func newLostHook(w *Worker) *lostHook {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, 0x1057))
	if rng.IntN(2) != 0 {
		return nil
	}
	return &lostHook{rec: w.rec, ttl: w.cfg.TTL, bound: w.lateBound(), rng: rng, held: map[string][]*hooked{}}
}

// watch adds the lease of l (handle id, fence) to those the hook watches.
func (w *Worker) watch(l *dlock.Lock, id string, fence int64) {
	if w.hook == nil {
		return
	}
	x := &hooked{l: l, id: id, fence: fence, ld: w.won[l]}
	if rw := w.rws[l.Name()]; rw != nil && IsWrite(l.Token()) {
		x.rw = rw
	}
	w.hook.mu.Lock()
	defer w.hook.mu.Unlock()
	w.hook.held[l.Name()] = append(w.hook.held[l.Name()], x)
}

func (k *lostHook) observer() dlock.Observer {
	return dlock.Observer{Lost: func(_ context.Context, e *dlock.Event) {
		// The event does not say which lease: the watched ones of its name
		// that are lost and not yet handled are (no lock is held while the
		// Lock is read: a read may tell another loss).
		called := false
		for _, x := range k.of(e.Name) {
			err := x.l.Err()
			if err != nil && k.claim(x) && errors.Is(err, dlock.ErrNotHeld) {
				k.call(x)
				called = true
			}
		}
		if !called { // (a multi-lock's part, or a lease lost before it was watched)
			k.rec.Add(Event{Name: e.Name, Op: OpLostCall, Inv: now(), Note: "unwatched", Err: errText(e.Err)})
		}
	}}
}

// of returns the leases of name still watched.
func (k *lostHook) of(name string) []*hooked {
	k.mu.Lock()
	defer k.mu.Unlock()
	var live []*hooked
	for _, x := range k.held[name] {
		if !x.done {
			live = append(live, x)
		}
	}
	k.held[name] = live
	return append([]*hooked(nil), live...)
}

// claim marks x done, and reports whether it was not yet.
func (k *lostHook) claim(x *hooked) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	was := x.done
	x.done = true
	return !was
}

// call makes one call of the lost lease x's Lock and records it.
func (k *lostHook) call(x *hooked) {
	k.mu.Lock()
	call := []string{"release", "fence", "extend", "err"}[k.rng.IntN(4)]
	switch half := k.rng.IntN(2) == 0; { // (a call that takes every turn, or holds the leadership's, half the time)
	case x.rw != nil && half:
		call = "downgrade"
	case x.ld != nil && half:
		call = "proclaim"
	}
	timeout := k.ttl/10 + time.Duration(k.rng.Int64N(int64(k.ttl)))
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e := Event{Name: x.l.Name(), Op: OpLostCall, CS: x.id, Tok: x.l.Token(), Fence: x.fence, Note: call, Bound: k.bound}
	e.Inv = now()
	e.DL = e.Inv + int64(timeout)
	var err error
	switch call {
	case "release":
		err = x.l.Release(ctx)
	case "fence":
		e.Arg, err = x.l.Fence(ctx)
	case "extend":
		err = x.l.Extend(ctx, k.ttl)
	case "err":
		err = x.l.Err()
	case "downgrade":
		err = x.rw.Downgrade(ctx, x.l)
	case "proclaim":
		err = x.ld.Proclaim(ctx, "lost:"+x.id)
	}
	e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
	k.rec.Add(e)
}

// checkLostCalls is (n): a call a Lost hook made of the lost lease's Lock
// returned within its bound of its context's end, and did not report the
// lease held: Err is the loss; Extend, Downgrade and Proclaim fail; Fence
// returns only the fence issued before the loss; Release returns nil only
// as a repeat of another Release of the Lock (the worker's, or Do's once
// its fn returned), called before it returned.
func checkLostCalls(h []Event, r *Report) {
	released := map[string]int64{} // when each handle's worker (or Do) first released it
	for _, e := range h {
		if _, ok := released[e.CS]; (e.Op == OpRelease || e.Op == OpFnRet) && !ok {
			released[e.CS] = e.Inv
		}
	}
	for _, e := range h {
		if e.Op != OpLostCall {
			continue
		}
		r.Hooks[e.Note+":"+e.Res]++
		if e.Note == "unwatched" {
			continue
		}
		r.Checked["n"]++
		if late := e.Ret - e.DL; late > e.Bound {
			r.failCS("n", e.Name, e.Ret, []string{e.CS}, "%s: %s from the Lost hook returned %v after its context ended (bound %v): %s",
				e.CS, e.Note, time.Duration(late).Round(time.Millisecond), time.Duration(e.Bound), e.Err)
		}
		if e.Res != "ok" {
			continue
		}
		rel, ok := released[e.CS]
		switch {
		case e.Note == "fence" && e.Arg != 0 && e.Arg == e.Fence:
		case e.Note == "release" && ok && rel < e.Ret:
		default:
			r.failCS("n", e.Name, e.Ret, []string{e.CS}, "%s: %s from the Lost hook succeeded (fence %d; issued before: %d) on a lost lease",
				e.CS, e.Note, e.Arg, e.Fence)
		}
	}
}
