package torture

import (
	"context"
	"errors"
	"sync"

	"github.com/dlockio/dlock"
)

// jeopardies is the Observer by which a worker holding with the watchdog
// records each jeopardy it is told of (OpJeopardy): Res "founded" when an
// automatic extension of the name was in flight (the library tells an
// unanswered one's jeopardy before its end), or one failed that no
// jeopardy has been matched with yet (the library tells a failure's after
// its end), or the Client was closed (its watchdog stops); "unfounded"
// otherwise. (Counts per name: a worker may hold
// two leases of one name, permits of a semaphore.)
type jeopardies struct {
	rec              *Recorder
	mu               sync.Mutex
	inFlight, failed map[string]int
}

func (j *jeopardies) observer() dlock.Observer {
	j.inFlight, j.failed = map[string]int{}, map[string]int{}
	auto := func(e *dlock.Event) bool { return e.Op == dlock.OpExtend && e.Auto }
	return dlock.Observer{
		Start: func(ctx context.Context, e *dlock.Event) context.Context {
			if auto(e) {
				j.mu.Lock()
				j.inFlight[e.Name]++
				j.mu.Unlock()
			}
			return ctx
		},
		End: func(_ context.Context, e *dlock.Event) {
			if auto(e) {
				j.mu.Lock()
				j.inFlight[e.Name]--
				if e.Err != nil {
					j.failed[e.Name]++
				}
				j.mu.Unlock()
			}
		},
		Jeopardy: func(_ context.Context, e *dlock.Event) {
			j.mu.Lock()
			res := "founded"
			switch {
			case j.inFlight[e.Name] > 0, errors.Is(e.Err, dlock.ErrClosed): // (Close stopped the watchdog)
			case j.failed[e.Name] > 0:
				j.failed[e.Name]--
			default:
				res = "unfounded"
			}
			j.mu.Unlock()
			j.rec.Add(Event{Name: e.Name, Op: OpJeopardy, Inv: now(), Res: res, Err: errText(e.Err)})
		},
	}
}

// missedJeopardy records, for a lease held with the watchdog whose holder
// found it lost, a Jeopardy channel still open (Res "missed"): a loss
// must never come without it.
func (w *Worker) missedJeopardy(h *handle) {
	if h.l.Err() == nil {
		return // not lost: its holder's context ended
	}
	select {
	case <-h.l.Jeopardy():
	default:
		w.rec.Add(Event{Name: h.l.Name(), Op: OpJeopardy, Inv: now(), CS: h.id, Tok: h.l.Token(), Res: "missed",
			Err: errText(h.l.Err())})
	}
}

// checkJeopardy is (l): with the watchdog on, a jeopardy is told only for
// a lease whose automatic extension failed or went unanswered, and a loss
// never leaves the lease's Jeopardy channel open.
func checkJeopardy(h []Event, r *Report) {
	for _, e := range h {
		if e.Op != OpJeopardy {
			continue
		}
		r.Checked["l"]++
		switch e.Res {
		case "unfounded":
			r.fail("l", e.Name, e.Inv, "a jeopardy (%s) was told while every automatic extension had succeeded", e.Err)
		case "missed":
			r.failCS("l", e.Name, e.Inv, []string{e.CS}, "%s: lost (%s) with its Jeopardy channel open", e.CS, e.Err)
		}
	}
}
