package torture

import (
	"math"
	"time"
)

// In a semaphore round without node restarts, one goroutine worker, the
// sizer, changes the names' kept sizes (Semaphore.AddPermits), a change
// every TTL/20 on average, while the others hold and wait, through the
// same faults. It keeps each size at N (the round's, one of SemPermits) or N+1: it adds a
// permit to a size it knows is N or less, and takes one from a larger
// size. A change whose call failed may
// have been applied, or be applied later by a copy still on its way (a
// request a delay fault or a paused server holds): the sizer leaves that
// name alone for sizeQuiet, until every copy has landed, and then reads
// its size (AddPermits(0)) before it changes it again.
//
// So, if each change is applied once, every size a call returns is N or
// N+1, and at most N+1 permits are held at once, at most N when the last
// of the holders was granted its permit while the size was known to be N
// (see permitsAt): (p) checks the first, and (a) the others
// (checkOverlaps). A change applied twice (a re-sent or asked-again
// request counted again), or a grant above a size that shrank, shows
// there.

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
		if n > w.cfg.Permits {
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

// sizeSpan is a stretch [from, to] in which the kept size of a name was
// known to be size: from a change's return to the sizer's next call on
// the name (a failed change's copies have landed by then: see sizeQuiet),
// and, before the sizer's first call, when none was kept, N. After a
// failed change it is 0: unknown.
type sizeSpan struct {
	from, to int64
	size     int
}

// sizeSpans returns the stretches of each name the sizer changed.
func sizeSpans(h []Event, n int) map[string][]sizeSpan {
	out := map[string][]sizeSpan{}
	open := map[string]sizeSpan{}
	for _, e := range h { // (by Inv: the sizer's calls on a name follow each other)
		if e.Op != OpSize {
			continue
		}
		s, ok := open[e.Name]
		if !ok {
			s = sizeSpan{from: math.MinInt64, size: n}
		}
		s.to = e.Inv
		out[e.Name] = append(out[e.Name], s)
		open[e.Name] = sizeSpan{from: e.Ret, size: int(e.Size)} // (0 after a failure)
	}
	for name, s := range open {
		s.to = math.MaxInt64
		out[name] = append(out[name], s)
	}
	return out
}

// permitsAt is how many holders of the semaphore name of N = n may hold it
// at once when the last of them was granted its permit within [from, to]:
// n if no sizer changed its size, or its size was known to be n all that
// while; else n+1 (holders above a size that shrank keep their permits,
// but none is granted above the size in force).
func permitsAt(spans map[string][]sizeSpan, name string, from, to int64, n int) int {
	ss, sized := spans[name]
	if !sized {
		return n
	}
	for _, s := range ss {
		if s.from <= from && to <= s.to && s.size == n {
			return n
		}
	}
	return n + 1
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
