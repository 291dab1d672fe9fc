package torture

import (
	"context"
	"time"
)

// This file is the release that races the watchdog: a holder with
// auto-extend releases right as its watchdog runs, a few milliseconds
// before or after, so that the run's extension may be about to be sent,
// in flight, or answered as the release goes out.

// raceNote marks a racing release in the history.
const raceNote = "watchdog"

// raceSlack is how far from the watchdog's run a racing release goes out,
// either way at most.
const raceSlack = 5 * time.Millisecond

// raceWatchdog sleeps until about h's watchdog's next run and releases h.
// Release must succeed or report a real loss ((g)), and no extension may
// land after it: Redis must not carry the lease once Release returned nil,
// nor a moment later, when an extension sent before it would have landed
// (each a leftover, (e)); one landing later still and re-creating the key
// would show in the scans after the run (e) or keep waiters from a free
// lock (d).
func (w *Worker) raceWatchdog(h *handle) {
	if h.l.Err() == nil {
		at := w.watchdogAt(h).Add(w.dur(0, 2*raceSlack) - raceSlack)
		time.Sleep(min(time.Until(at), h.ttl/3+raceSlack))
	}
	if w.release(h, raceNote) != nil {
		return
	}
	w.gone(h, "right after a release that raced the watchdog: ")
	time.Sleep(2 * w.opts.readTimeout)
	w.gone(h, "after a release that raced the watchdog, two read timeouts later: ")
}

// watchdogAt returns when h's watchdog is next due to run, as the worker
// can tell from outside: a third of the lease time after the last
// extension was sent (the acquisition's, a run's, or an Extend's to a
// shorter lease), which is two thirds of it, less the drift margin, before
// the validity that send gave ends; or, after an Extend to no shorter a
// lease (which leaves the run where it was), h.next until then. A run that
// failed is retried sooner, and one at the max hold not at all: neither
// is foreseen.
func (w *Worker) watchdogAt(h *handle) time.Time {
	if h.next > now() {
		return time.Unix(0, h.next)
	}
	return h.l.ValidUntil().Add(h.ttl/100 + 2*time.Millisecond - 2*h.ttl/3)
}

// extended notes an Extend of h to ttl, called when the watchdog's run was
// due at due.
func (w *Worker) extended(h *handle, ttl time.Duration, due time.Time) {
	h.next = 0 // a shorter lease: the watchdog is armed again, a third of it from the answer
	if ttl >= h.ttl {
		h.next = due.UnixNano()
	}
	h.ttl = ttl
}

// gone records a leftover if Redis still carries h's lease, released.
func (w *Worker) gone(h *handle, note string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	inv := now()
	if held, what, err := w.carries(ctx, h.l.Name(), h.l.Token(), h.own); err == nil && held {
		w.rec.Add(Event{Name: h.l.Name(), Op: OpLeftover, Inv: inv, Ret: now(), CS: h.id, Tok: h.l.Token(),
			Fence: h.fence, Note: note + what})
	}
}
