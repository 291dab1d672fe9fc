package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// This file is the way to a held lock: one attempt (TryAcquire), the wait
// for a lock that is taken (Acquire: subscribe, sleep, be handed the lock),
// and the undo of an attempt whose outcome is unknown.

// TryAcquire makes one attempt, not jumping a fair queue. If the lock is held,
// the error wraps [ErrNotAcquired], its cause a [*NotAcquiredError]; others:
// [ErrInvalid], [ErrWrongType], ctx's, Redis's.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.acquireAs(ctx, &c.own, name, opts, true)
}

// endedOnly reports whether err, the error of an attempt made under ctx
// once ctx ended, says no more than that: it is ctx's own error, or the
// attempt was not sent or left in flight for it.
func endedOnly(ctx context.Context, err error) bool {
	return err == ctx.Err() || errors.Is(err, backend.ErrNotSent) || errors.Is(err, backend.ErrLeftInFlight)
}

// Acquire waits for the lock name while ctx and [MaxWait] allow; if ctx ends
// first, the error matches [ErrNotAcquired] and ctx.Err(). Others:
// TryAcquire's.
func (c *Client) Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.acquireAs(ctx, &c.own, name, opts, false)
}

// acquireAs is Acquire (try: TryAcquire) of a lease of kind k.
func (c *Client) acquireAs(ctx context.Context, k *kind, name string, opts []LockOption, try bool) (*Lock, error) {
	e, start := Event{Op: OpAcquire, Name: name, Try: try}, time.Now()
	ctx = c.start(ctx, k.mode(), &e)
	l, err := c.acquire(ctx, k, name, opts, try)
	if err == nil {
		l.listen(ctx) // a watched lease hears its channel before it returns
	}
	c.end(ctx, &e, start, err)
	return l, err
}

func (c *Client) acquire(ctx context.Context, k *kind, name string, opts []LockOption, try bool) (*Lock, error) {
	// Counted before prepare reads closed: Close waits for an acquisition under
	// way (a wait's queue entry taken out); one it did not finds it closed.
	c.bg.Enter()
	defer c.bg.Leave()
	pending, err := c.prepare(k, name, opts, try)
	if err != nil {
		return nil, err
	}
	if pending.p.resume != "" {
		return c.resume(ctx, pending)
	}
	wait := pending.p.wait
	if wait == 0 || try { // one attempt
		l, g, err := c.attempt(ctx, pending, nil)
		if l == nil && pending.cl.Astray { // (a refusal after a lost reply: its copy may still land)
			c.undo(ctx, pending.cl)
		}
		switch {
		case l == nil && ctx.Err() != nil: // (an attempt that failed returns no Lock)
			if endedOnly(ctx, err) {
				err = nil
			}
			return nil, gaveUp(ctx, k.acquireOp, name, err)
		case l != nil:
			return l, nil
		case err == nil: // the lock taken, or no permit of a semaphore free: the refusal says which
			err = k.refusal(name, g)
		case !errors.Is(err, errTooSlow):
			return nil, opError(k.acquireOp, name, err)
		}
		return nil, opError(k.acquireOp, name, backend.Because(ErrNotAcquired, err.Error(), err))
	}
	actx := ctx // the wait's context: ctx, or ctx bounded by MaxWait
	if wait > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	a := acquisition{ctx: actx, l: pending, trustHandover: true}
	l, err := a.run(ctx)
	if a.gone && l != nil { // (no Lock after Close: its lease is left to expire, nothing is sent)
		l.mu.Lock()
		l.finish(errClosedWait)
		l.mu.Unlock()
		l, err = nil, errClosedWait
	}
	if err == nil {
		return l, nil
	}
	if c.closed.Load() && !errors.Is(err, ErrClosed) && actx.Err() == nil {
		err = backend.Because(ErrClosed, err.Error(), err) // an attempt cut short by Close
	}
	// However the wait ended, an entry of an earlier attempt may hold
	// a place in the queue (fair mode): it leaves, or it would hold
	// back the waiters behind it and be handed the lock by a release.
	// Only a lease token that Redis answered for can have one (an
	// attempt whose outcome is unknown was undone, and the token
	// renewed): a wait none of whose requests reached Redis leaves
	// nothing to take out, and sends nothing more.
	if (a.entered == pending.cl.Token || pending.cl.Astray) && !a.gone { // (if the lock was handed to it meanwhile, the undo passes it on)
		c.undo(ctx, pending.cl)
	}
	if actx.Err() == nil {
		return nil, opError(k.acquireOp, name, err)
	}
	// The error says the wait ended; an attempt's own error (Redis
	// unreachable) goes with it, after the missing majority and before
	// who held the lock.
	if endedOnly(actx, err) || (ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)) {
		err = nil
	}
	last := []error{a.lastQuorum, err, a.lastRefusal}
	if ctx.Err() != nil {
		return nil, gaveUp(ctx, k.acquireOp, name, last...)
	}
	// Its wait limit (MaxWait) ran out while ctx lives: the error matches
	// the last attempt's, not the context's.
	limit := fmt.Sprintf("waited %v (MaxWait)", wait)
	if all := pending.p.waitAll; all > 0 { // (a part of AcquireAll waits for what is left of its MaxWait)
		limit = fmt.Sprintf("waited %v (MaxWait, for all the names together)", all)
	}
	return nil, unheld(k.acquireOp, name, limit, nil, last)
}

// acquisition is one Acquire's wait for its lock.
type acquisition struct {
	ctx context.Context
	l   *Lock // pending until taken; its Client's
	w   *waiters

	queued        time.Time // no handover to us can precede this
	entered       string    // the token of the last attempt Redis answered without a grant: it may wait in the queue
	trustHandover bool      // false once an attempt came back too late
	lastQuorum    error     // over a quorum: the last missing majority
	lastRefusal   error     // the last attempt that found the lock taken (a *NotAcquiredError)
	gone          bool      // Close went on while a hook ran (see lend): nothing more is sent
}

// lend runs f, which calls the Observers' hooks that has reports they
// have, with the wait's count in Close's tracker lent to it if there are
// any: a hook may call Close, which would otherwise wait for the wait,
// and so for itself. If Close went on meanwhile the wait is gone: it
// sends nothing more (its queue entry and deadlock records are left to
// expire) and returns no Lock.
func (a *acquisition) lend(has func(Observer) bool, f func()) {
	if !slices.ContainsFunc(a.l.c.obs.all(), has) {
		f()
		return
	}
	a.gone = a.gone || !a.l.c.bg.Lend(f)
}

// waits and findsDeadlocks report whether an Observer has a Waiting hook,
// a Deadlock hook.
func waits(o Observer) bool          { return o.Waiting != nil }
func findsDeadlocks(o Observer) bool { return o.Deadlock != nil }

// run attempts, subscribes and sleeps until the lock is taken or the
// context ends; it returns the Lock, or the error that ended the wait. The
// first attempt is made under first: the context without MaxWait's bound,
// so that a MaxWait, however short, makes one attempt.
func (a *acquisition) run(first context.Context) (*Lock, error) {
	// If this Client already listens on the lock's channel, wait there
	// from the start; no release after the first attempt can be missed.
	a.w = a.l.c.join(a.l.cl.Channel, a.l.cl.Token)
	a.queued = time.Now()
	defer func() { a.w.close() }() // (a.w as it is when run returns)
	l, pttl, err := a.try(first)
	if err == nil && l == nil && a.w == nil {
		// Subscribe, then try again at once: a release before the
		// subscription was confirmed is seen by this attempt, one after it
		// by the subscription.
		a.w = a.l.c.watch(a.ctx, a.l.cl.Channel, a.l.cl.Token)
		l, pttl, err = a.try(a.ctx)
	}
	if err != nil || l != nil {
		return l, err
	}
	a.lend(waits, func() { a.l.c.waitingFor(a.ctx, a.l.name, +1) })
	defer a.lend(waits, func() { a.l.c.waitingFor(a.ctx, a.l.name, -1) })
	if a.gone {
		return nil, errClosedWait
	}
	slept := time.After(a.sleep(1, pttl))
	dl, check := a.l.c.deadlockCheck(a.ctx, a.l, a.queued)
	defer func() { // however the wait ends
		if !a.gone {
			dl.end(a.ctx)
		}
	}()
	for attempt := 1; ; attempt++ {
		var handed int64
		select {
		case handed = <-a.w.wake:
		case <-slept:
		case <-check:
			if found := dl.check(a.ctx); found != nil {
				err := opError(a.l.k.acquireOp, a.l.name, found) // (as acquire returns it)
				a.lend(findsDeadlocks, func() { a.l.c.obs.notify(a.ctx, &Event{Op: OpDeadlock, Name: a.l.name, Mode: a.l.k.mode(), Err: err}) })
				return nil, found
			}
			check = time.After(dl.every)
			attempt-- // (a check is no attempt: the backoff stays)
			continue
		case <-a.ctx.Done(): // (checked below)
		case <-a.l.c.stop.Done(): // (checked below)
		}
		if a.ctx.Err() != nil {
			return nil, a.ctx.Err()
		}
		if a.l.c.closed.Load() {
			// Close was called while it waited: no Lock after Close (it
			// would never be extended). A lock handed over meanwhile is
			// passed on by the leave that follows (acquire).
			return nil, errClosedWait
		}
		if l := a.handedOver(handed); l != nil {
			return l, nil
		}
		l, pttl, err = a.try(a.ctx)
		again := a.sleep(attempt+1, pttl)
		if err != nil && handed == pubsub.Recheck && (errors.Is(err, backend.ErrNotSent) || backend.ReplyLost(err)) {
			// Woken by the return of the pub/sub connection, after an attempt
			// whose connection failed (not sent, or its reply lost and the
			// attempt undone): the client may find its other connections
			// broken only now. Once more, soon.
			err, again = nil, DefaultMinBackoff
		}
		if err != nil || l != nil {
			return l, err
		}
		slept = time.After(again)
	}
}

// sleep is how long the wait sleeps after its attempt-th attempt (see
// kind.sleep). Its queue entry lives for (backend.Window of) the lease time
// each attempt asks for, which a max hold may cap below the TTL: the wait
// renews the entry by that, not by the TTL, or the entry would end while
// it waits.
func (a *acquisition) sleep(attempt int, pttl time.Duration) time.Duration {
	ask := a.l.termsFrom(time.Now()).ask
	return a.l.k.waits.sleep(a.l.c.opts.backoff, attempt, pttl, ask, a.entered == a.l.cl.Token)
}

// try makes one attempt under ctx. A missing majority (quorum) and an
// attempt that came back too late are not errors here: the wait goes on.
// After a late attempt, a handover message for the lease just given back
// may still be on its way, so every later handover is confirmed.
func (a *acquisition) try(ctx context.Context) (*Lock, time.Duration, error) {
	l, g, err := a.l.c.attempt(ctx, a.l, a)
	switch _, quorum := errors.AsType[*QuorumError](err); {
	case backend.ClosedOut(err): // (no later attempt can reach a majority)
	case quorum:
		// (Not one cut short by the context's end, if an earlier attempt
		// was answered: it says less, its missing nodes were not waited for.)
		if a.ctx.Err() == nil || (a.lastQuorum == nil && a.lastRefusal == nil) {
			a.lastQuorum = err
		}
		return nil, -1, nil
	case err == nil && l == nil:
		a.lastQuorum = nil // a majority answered: the lock is taken, not unreachable
		if a.l.k.says(g) {
			a.lastRefusal = a.l.k.refusal(a.l.name, g)
		}
	case errors.Is(err, errTooSlow):
		a.trustHandover = false
		return nil, 0, nil
	}
	return l, g.PTTL, err
}

// handedOver returns the Lock a release handed to this fair waiter (wake),
// without a round trip to confirm it, when that is safe: no attempt came
// back too late (trustHandover). The handover happened after the waiter
// joined the queue, so a lease counted from queued is never longer than
// the real one. If more than half of it is already gone, it returns nil
// and the waiter confirms (and renews) the lease with an attempt instead.
func (a *acquisition) handedOver(wake int64) *Lock {
	// The lease the handover gave: the lease time of our queue entry, which
	// every attempt of this wait asked for alike (a max hold counts from
	// queued, as an attempt's counts from its start).
	t := a.l.termsFrom(a.queued)
	if !a.trustHandover || wake < pubsub.HandedOver || time.Since(a.queued) > t.hold/2 || a.l.c.opts.replicas > 0 || a.l.c.opts.durable > 0 {
		return nil // (with replica ack or durable grants, the confirming attempt is what WAITs)
	}
	var fence int64 // the handover's, if it came with one
	if wake > pubsub.HandedOver {
		fence = wake
	}
	a.l.activate(fence, t)
	return a.l
}

// attempt runs the acquire script once for the pending Lock l. It returns l
// when taken, or nil and Redis's answer (the holder's remaining lease, -1
// if unknown, and who it is) when not; after an error the grant says
// nothing. A request whose reply was lost is asked again under the same
// token by the backend (see backend.Node.Acquire). An attempt whose
// outcome is still unknown (no answer, or ctx ended while it
// was in flight) or that came back too late is undone, and l gets a new
// lease token for the next attempt: the undo revoked the old one. A
// waiter's attempt (a not nil) queues if the lock is taken: when Redis
// answered it without a grant, a.entered is set to the place it may hold
// (kind.place) under the token it was answered for; a.w moves to each new
// token before a request under it is sent, as a handover to it may come
// before the reply. Its errors are bare causes: the caller names the
// operation and the lock.
func (c *Client) attempt(ctx context.Context, l *Lock, a *acquisition) (*Lock, backend.Grant, error) {
	queue := a != nil
	renew := func() {
		// A new token, on a copy of the claim: requests of the undone
		// attempt may still be in flight (a quorum node that did not answer
		// in time, a pipeline whose caller gave up) with arguments that
		// point into it. The token carries the holder metadata, as the
		// first did.
		cl := *l.cl
		cl.SetToken(leaseToken(l.p.suffix, l.k.mark))
		l.cl = &cl
		if queue && a.w != nil {
			a.w.retoken(l.cl.Token)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, backend.Grant{}, backend.NotSent(err)
	}
	// The scripts in the servers' caches first, off the clock: the attempt
	// is then one round trip, from a Client's first on. A load that could
	// not connect says the attempt would not either: it is not sent.
	if err := c.b.Prepare(ctx, l.cl); err != nil {
		return nil, backend.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, backend.Grant{}, backend.NotSent(err)
	}
	// (The terms count from the first copy sent: one asked again after a
	// lost reply may find the lease the first took, and not lengthen it.)
	t := l.termsFrom(time.Now())
	g, err := c.b.Acquire(ctx, l.cl, t.ask, queue)
	if err == nil && !g.Once {
		l.cl.Clean = false // a copy of the request may land later: the release marks the lease ended
	}
	l.cl.Astray = l.cl.Astray || g.Astray // (and the acquisition undoes it if it ends without the lease)
	if g.Astray && err == nil && !g.Held && l.k.waits.place(l.cl.Token) == "" {
		// Refused, a waiter that polls keeps no place to lose: its copy
		// that may land is undone now, and it asks under a new token. (Kept,
		// a copy landing on the free lock would be found by a later poll
		// whose validity counts from that poll, while a reentrant hold
		// found again keeps the deadline the copy set.)
		g.Undo = true
	}
	if queue && err == nil && !g.Held && !g.Undo {
		a.entered = l.k.waits.place(l.cl.Token) // answered and refused
	}
	switch {
	case errors.Is(err, backend.ErrNotSent) && !g.Undo: // (a quorum's may be one node's: the others' grants are undone below)
		return nil, backend.Grant{}, err
	case errors.Is(err, backend.ErrRevoked) && !g.Undo:
		// Only a token already ended is refused; take a new one and go on.
		renew()
		return nil, backend.Grant{PTTL: -1}, nil
	case err == nil && g.Held && !time.Now().Before(t.until):
		// The reply came back after the lease could already have expired
		// on the server: someone else may hold it by now.
		g, err = backend.Grant{Undo: true}, errTooSlow
	}
	if g.Undo {
		// The request may have taken effect (its reply lost or still on its
		// way, part of its work written before a write was refused, or too
		// few quorum nodes granted it): make sure no lease or queue entry of
		// ours is left to block others, everywhere.
		c.undo(ctx, l.cl)
		renew()
	}
	if err != nil || !g.Held {
		return nil, g, err
	}
	l.activate(g.Fence, t)
	return l, g, nil
}

// errTooSlow reports an attempt that got the lock too late to use it; the
// lease was given back.
var errTooSlow = errors.New("the reply came after the lease's validity had run out")

// undoTimeout bounds the clean-up of a failed attempt.
const undoTimeout = 2 * time.Second

// undo ends the lease cl may hold, or may come to hold when a request of it
// still in flight lands: it deletes the lock if cl holds it and revokes
// cl's token (in fair mode it also leaves the queue, passing on a lock
// handed over meanwhile). If Redis does not answer, or refuses the write
// (NOREPLICAS, READONLY, OOM), the undo is retried in the background for as
// long as what it ends could block others (backend.RetryFor: a lease lives
// a TTL, a queue entry at most as long), on backend.Retry's schedule. When ctx is done the caller
// waits only up to undoWait: against a healthy Redis that is enough for the
// undo to finish. A process that shuts down calls Close before closing its
// Redis client, so that a slower undo is not cut short.
func (c *Client) undo(ctx context.Context, cl *backend.Claim) {
	deadline := time.Now().Add(backend.RetryFor(cl.TTL))
	c.cleanUp(ctx, deadline, func(ctx context.Context) error { return c.b.Undo(ctx, cl) })
}

// cleanUp runs f, retried in the background until it succeeds or deadline
// (backend.Retry). The caller waits for the first try only, as an undo
// does: up to undoTimeout, or undoWait if ctx is done. After Close nothing
// goes to the background: the caller makes that one try itself, bounded by
// ctx (a Do's release bounds it), and what it leaves ends with its expiry.
func (c *Client) cleanUp(ctx context.Context, deadline time.Time, f func(context.Context) error) {
	first := make(chan struct{}) // closed when the first try is over
	if !c.bg.Go(func() { backend.Retry(deadline, f, func() { close(first) }) }) {
		f(ctx)
		return
	}
	tried := []<-chan struct{}{first}
	backend.Await(ctx, tried, undoTimeout)
	if ctx.Err() != nil {
		// Done from the start, or the caller gave up meanwhile (a
		// client's own timer can fail the call a moment before ctx
		// reports it): wait up to undoWait from now.
		backend.Await(context.Background(), tried, undoWait)
	}
}

// undoWait is how long a caller whose context is done waits for the undo
// of its attempt before leaving it to the background.
const undoWait = 100 * time.Millisecond
