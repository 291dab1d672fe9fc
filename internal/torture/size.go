package torture

import "time"

// In a semaphore round without node restarts, one goroutine worker, the
// sizer, changes the names' kept sizes (Semaphore.AddPermits), a change
// every TTL/20 on average, while the others hold and wait, through the
// same faults. It keeps each size
// at N (SemPermits) or N+1: it adds a permit to a size it knows is N or
// less, and takes one from a larger size. A change whose call failed may
// have been applied, or be applied later by a copy still on its way (a
// request a delay fault or a paused server holds): the sizer leaves that
// name alone for sizeQuiet, until every copy has landed, and then reads
// its size (AddPermits(0)) before it changes it again.
//
// So, if each change is applied once, every size a call returns is N or
// N+1, and at most N+1 permits are held at once: (p) checks the first,
// and (a) the second (checkOverlaps). A change applied twice (a re-sent or
// asked-again request counted again) or applied to another size than the
// one Redis answered with shows there.

// sizes is the sizer's state.
type sizes struct {
	known map[string]int       // each name's size as its last change returned it; absent: unknown
	quiet map[string]time.Time // until when a name is left alone after a failed change
}

// sizeQuiet is how long a failed change's copies may still land: a delay
// fault holds requests for up to a TTL and delivers them up to 1.2s late,
// a paused server runs them once it resumes (within a TTL).
func (w *Worker) sizeQuiet() time.Duration { return 2*w.cfg.TTL + 2*time.Second }

// resize reads or changes the kept size of name, as the sizer.
func (w *Worker) resize(name string) {
	if time.Now().Before(w.sizes.quiet[name]) {
		return
	}
	delta := 0
	if n, ok := w.sizes.known[name]; ok {
		delta = 1
		if n > SemPermits {
			delta = -1
		}
	}
	ctx, cancel, dl := w.opCtx()
	defer cancel()
	e := Event{Name: name, Op: OpSize, Inv: now(), Arg: int64(delta), DL: dl, Bound: w.lateBound()}
	size, err := w.sems[name].AddPermits(ctx, delta)
	e.Ret, e.Res, e.Err, e.Size = now(), classify(err), errText(err), int64(size)
	w.rec.Add(e)
	delete(w.sizes.known, name)
	if err != nil {
		w.sizes.quiet[name] = time.Now().Add(w.sizeQuiet())
		return
	}
	w.sizes.known[name] = size
}

// sizeChanged lists the names whose kept size a call changed or read.
func sizeChanged(h []Event) map[string]bool {
	m := map[string]bool{}
	for _, e := range h {
		if e.Op == OpSize {
			m[e.Name] = true
		}
	}
	return m
}

// checkSizes is (p): every size a change returned is N or N+1 (see the top
// of this file).
func checkSizes(h []Event, p Params, r *Report) {
	for _, e := range h {
		if e.Op != OpSize || e.Res != "ok" {
			continue
		}
		r.Checked["p"]++
		if e.Size != int64(p.Permits) && e.Size != int64(p.Permits)+1 {
			r.fail("p", e.Name, e.Ret, "%s: AddPermits(%d) returned a size of %d, where one sizer kept it at %d or %d",
				e.W, e.Arg, e.Size, p.Permits, p.Permits+1)
		}
	}
}
