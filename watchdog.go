package dlock

import (
	"context"
	"errors"
	"time"
)

// minRetry is the shortest pause between extension attempts after an error.
const minRetry = 10 * time.Millisecond

// tick is the watchdog: a timer armed by activate runs it every TTL/3 to
// extend the lease, until the Lock is released or lost. It holds no
// goroutine between runs, so a held Lock costs a timer, not a stack. A
// failed extension is retried until the validity deadline; the expiry timer
// (or the next read of the state), not the watchdog, declares the loss at
// that deadline, so a call that hangs on a frozen server cannot delay it.
func (l *Lock) tick() {
	l.expire()
	l.mu.Lock()
	if l.ticking { // one run at a time: the one under way runs again soon
		l.early = true
		l.mu.Unlock()
		return
	}
	validUntil, closed, atCap := l.validUntil, l.c.closed.Load(), l.atCap()
	early := l.early // this run was asked for by a nudge
	if l.err != nil || atCap || closed {
		l.mu.Unlock()
		if closed && !atCap {
			// Extended no more, the lease ends at its validity: at risk.
			l.jeopardize(opError("extend", l.name, ErrClosed), false)
		}
		return // (at the max hold, the expiry timer ends the lease there; after Close, its validity)
	}
	l.ticking, l.early, l.checked, l.inFlight = true, false, time.Now(), true
	if l.jeopT != nil {
		l.jeopT.Reset(time.Until(validUntil) / 2)
	} else if l.jeopAsked || l.c.obs.anyJeopardy.Load() {
		l.jeopT = time.AfterFunc(time.Until(validUntil)/2, l.unanswered)
	}
	l.mu.Unlock()

	// go-redis honours this deadline only with ContextTimeoutEnabled;
	// either way the expiry is declared on time.
	ctx, cancel := context.WithDeadline(context.Background(), validUntil)
	defer cancel()
	e, start := Event{Op: OpExtend, Name: l.name, Auto: true}, time.Now()
	ctx = l.c.start(ctx, l.k, &e)
	err := l.extend(ctx, 0) // the lease time of the latest extension
	l.mu.Lock()
	next, jt := l.ttl/3, l.jeopT
	soon := max(time.Until(l.checked.Add(l.ttl/checkRate)), 0) // the earliest a nudge may make it run
	l.inFlight, l.ticking = false, false
	if l.early { // nudged while it ran: once more, as nudge would (the next run is early too)
		next, early = min(next, soon), true
	}
	l.mu.Unlock()
	if jt != nil {
		l.tellMu.Lock() // (a jeopardy being told is told before this extension's end)
		jt.Stop()
		l.tellMu.Unlock()
	}
	capped := errors.Is(err, ErrMaxHold) && !errors.Is(err, ErrNotHeld)
	if capped {
		err = nil // an extension cut at the max hold, as the watchdog asks: no failure
	}
	l.c.end(ctx, &e, start, err)
	if capped || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrReleased) {
		return // (capped: its last extension; the expiry timer ends the lease at the cap)
	}
	if err != nil {
		// Redis did not answer: the lease is at risk; try again a few
		// times before the validity runs out.
		l.jeopardize(err, false)
		next = max(time.Until(validUntil)/4, minRetry)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.quick = 0
	} else if early && l.quick < quickRetries {
		// A check a message asked for (the pub/sub connection back
		// after a restart) may meet connections the same break left
		// broken: again soon (10, 40, 160, 640ms), not a quarter of
		// the validity later.
		next, l.early = min(next, minRetry<<(2*l.quick)), true
		l.quick++
	}
	if l.err == nil {
		l.arm(next)
	}
}

// arm sets the watchdog to run in d; l.mu must be held.
func (l *Lock) arm(d time.Duration) {
	l.due = time.Now().Add(d)
	l.dog.Reset(d)
}

// quickRetries is how many times in a row a check a nudge asked for is
// tried again soon after it failed for want of an answer.
const quickRetries = 4

// checkRate bounds the watchdog's runs that a nudge asks for: at most
// checkRate per lease time.
const checkRate = 30

// nudge makes the watchdog run (an extension: it tells a loss, and does
// nothing more if the lease holds) now, or as soon as the last run is
// TTL/checkRate old, unless it runs sooner anyway; if a run is under way,
// it runs once more after it. A held lease's watches call it (WatchLoss)
// when a message says the lease may have ended.
func (l *Lock) nudge() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	switch at := l.checked.Add(l.ttl / checkRate); {
	case l.dog == nil || l.err != nil || l.atCap():
	case l.ticking:
		l.early = true // under way: it runs again after
	case at.Before(l.due) && l.due.After(now): // (not starting: that run checks)
		l.arm(max(at.Sub(now), 0))
		l.early = true
	}
}

// unanswered is the jeopardy timer: the watchdog's extension in flight has
// not been answered within half the validity left when it was sent.
func (l *Lock) unanswered() {
	l.jeopardize(opError("extend", l.name, errors.New("no answer within half the validity left")), true)
}

// jeopardize puts the lease at risk, for err, unless it is already, or is
// settled, or (unanswered) the extension has been answered meanwhile: it
// closes the Jeopardy channel and tells the observers, once.
func (l *Lock) jeopardize(err error, unanswered bool) {
	l.tellMu.Lock()
	defer l.tellMu.Unlock()
	l.mu.Lock()
	if l.err != nil || l.atRisk || (unanswered && !l.inFlight) {
		l.mu.Unlock()
		return
	}
	l.atRisk = true
	if l.jeop != nil {
		close(l.jeop)
	}
	l.mu.Unlock()
	l.c.tell(l, OpJeopardy, err)
}
