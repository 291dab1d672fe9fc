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
//
// Close waits for the run's extension: it is counted in Close's tracker
// from before it reads closed (none starts after Close) until its call
// ends, and lends the count to the Start hook; the hooks after it (Lost,
// End, Jeopardy, and Clock, which end tells) are told once it ended. Any
// of them may call Close.
func (l *Lock) tick() {
	l.expire()
	l.c.bg.Enter()
	l.mu.Lock()
	validUntil, closed, atCap := l.validUntil, l.c.closed.Load(), l.atCap()
	if early, running := time.Now().Before(l.due), l.running; early || running || l.err != nil || atCap || closed {
		l.mu.Unlock()
		l.c.bg.Leave()
		switch {
		case early: // fired as it was re-armed: it runs at due
		case running: // due is when the extension in flight went unanswered
			l.jeopardize(opError("extend", l.name, errors.New("no answer within half the validity left")), true)
		case closed && !atCap: // extended no more, the lease ends at its validity: at risk
			l.jeopardize(opError("extend", l.name, ErrClosed), false)
		}
		return // (at the max hold, the expiry timer ends the lease there; after Close, its validity)
	}
	check := l.check || l.quick > 0 // a check a nudge asked for, or the quick retry of one
	l.running, l.check, l.checked, l.inFlight = true, false, time.Now(), true
	l.due = l.checked.Add(validUntil.Sub(l.checked) / 2)
	l.dog.Reset(time.Until(l.due))
	l.mu.Unlock()

	// go-redis honours this deadline only with ContextTimeoutEnabled;
	// either way the expiry is declared on time.
	ctx, cancel := context.WithDeadline(context.Background(), validUntil)
	defer cancel()
	e, start := Event{Op: OpExtend, Name: l.name, Auto: true}, time.Now()
	err := opError("extend", l.name, ErrClosed) // (if Close went on as the Start hook ran: nothing is sent)
	if l.c.bg.Lend(func() { ctx = l.c.start(ctx, l.mode(), &e) }) {
		err = l.extend(ctx, 0) // the lease time of the latest extension
	}
	l.c.bg.Leave()
	l.tellUntold()
	l.tellMu.Lock() // (a jeopardy being told is told before this extension's end)
	l.mu.Lock()
	l.inFlight = false // (its jeopardy timer, if it fires now, finds nothing)
	l.mu.Unlock()
	l.tellMu.Unlock()
	if errors.Is(err, ErrMaxHold) && !errors.Is(err, ErrNotHeld) {
		err = nil // an extension cut at the max hold, as the watchdog asks: no failure
	}
	l.c.end(ctx, &e, start, err)
	if err != nil {
		// Redis did not answer: the lease is at risk; try again a few
		// times before the validity runs out. (A lease that ended is
		// settled: neither jeopardized nor extended again.)
		l.jeopardize(err, false)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running = false
	retry := max(time.Until(l.validUntil)/4, minRetry) // (an Extend during the run may have moved it)
	switch {
	case err == nil: // (cut at the max hold: the next run finds the lease at its cap, and leaves it to the expiry timer)
		l.quick = 0
		// A third of the lease after this run was sent, not after its answer:
		// the validity it gave counts from the send.
		l.arm(time.Until(l.checked.Add(l.ttl / 3)))
	case check && l.quick < quickRetries:
		// A check a message asked for (the pub/sub connection back
		// after a restart) may meet connections the same break left
		// broken: again soon (10, 40, 160, 640ms), not a quarter of
		// the validity later.
		l.arm(min(retry, minRetry<<(2*l.quick)))
		l.quick++
	default:
		l.arm(retry)
	}
}

// arm sets the watchdog to run in d, or sooner if a nudge asked for a
// check (as soon as the last run is TTL/checkRate old), unless the Lock is
// settled or a run is under way: that run arms the next when it ends. It
// is where every next run is decided; l.mu must be held.
func (l *Lock) arm(d time.Duration) {
	if l.err != nil || l.running {
		return
	}
	l.due = time.Now().Add(d)
	if at := l.checked.Add(l.ttl / checkRate); l.check && at.Before(l.due) {
		l.due = at
	}
	l.dog.Reset(time.Until(l.due))
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
	if l.dog == nil || l.err != nil || l.atCap() {
		return
	}
	l.check = true
	if l.due.After(time.Now()) { // (else a run is starting: that run checks)
		l.arm(time.Until(l.due))
	}
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
