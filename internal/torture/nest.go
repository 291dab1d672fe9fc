package torture

import (
	"context"
	"slices"
	"time"

	"github.com/dlockio/dlock"
)

// This file is the nesting part of the workload: in rounds of plain locks
// on one deployment, a Do's fn sometimes takes a second name, above its
// own in the names' byte order (the round's one global order, as
// AcquireAll's), by a Do of its own under fn's context, which carries the
// outer lease: the inner wait looks for deadlocks (a short DeadlockCheck),
// and none can exist. Check (m) counts any ErrDeadlock as a violation.

// nestShare is how many Dos of a mode, in 100, nest a second name (0:
// none): the plain lock modes whose deadlock check runs.
func nestShare(mode string) int {
	switch mode {
	case ModePlain, ModeFair, ModeNoScripts, ModeMulti:
		return 50
	}
	return 0
}

// nest runs, sometimes, a Do of a name above name under fctx, the outer
// Do's fn context, with a short deadlock check.
func (w *Worker) nest(fctx context.Context, name string) {
	names := slices.Sorted(slices.Values(w.cfg.Names))
	i := slices.Index(names, name)
	if i < 0 || i == len(names)-1 || w.rng.IntN(100) >= nestShare(w.cfg.Mode) {
		return
	}
	inner := names[i+1+w.rng.IntN(len(names)-i-1)]
	check := dlock.DeadlockCheck(w.dur(10*time.Millisecond, 200*time.Millisecond))
	w.doIn(fctx, inner, check)
}

// recordLife bounds a deadlock record's life: three of the nested waits'
// check periods (at most 200ms) and a second.
const recordLife = 2 * time.Second

// checkNoDeadlock is (m): no acquisition reports a deadlock, as the
// workload nests names in one global order only.
func checkNoDeadlock(h []Event, r *Report) {
	for _, e := range h {
		if e.Op != OpDoRet && e.Op != OpAcquire && e.Op != OpTry {
			continue
		}
		r.Checked["m"]++
		if e.Res == "deadlock" {
			r.fail("m", e.Name, e.Ret, "%s %s: a deadlock reported where names nest in one order: %s", e.W, e.Op, e.Err)
		}
	}
}
