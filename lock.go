package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// Lock is a held lease on one name (or a permit, a hold, a leadership) until
// Release or loss, which Done and Err report by ValidUntil. An open Done does
// NOT mean it is still held when you act: use Fence. Safe for concurrent use.
type Lock struct {
	c     *Client
	k     *kind // what it is: the Client's own lock, or a kind made on top of them
	name  string
	p     lease          // what the acquisition asked for: the Client's options and the call's
	cl    *backend.Claim // the keys and the lease token; script arguments point into it
	base  backend.Claim  // where cl points, unless an attempt was undone (see renew)
	start time.Time
	capAt time.Time // the max hold's deadline (zero: none), set by activate; validUntil never passes it
	slot  int       // the mode it is counted in (Held): its kind's, unless a Downgrade moved it; mu guards it

	fence int64 // the lease's fence once issued; fenceTurn guards it

	extSeq     int64         // the last ordered extension's sequence number (0: none yet); extTurn guards it and maxAsk
	maxAsk     time.Duration // the longest lease time a request of this lease asked for
	mu         sync.Mutex    // guards the fields below
	turns      uint8         // the turns taken (see take)
	waits      []turnWait    // the calls waiting for a taken turn, in the order they came
	ttl        time.Duration
	validUntil time.Time
	err        error // nil while held; ErrReleased, or the loss
	untold     error // the loss, declared under a turn and not yet told (see tellUntold)
	released   bool  // the release script ran
	handedOff  bool  // another Lock resumed the lease: Release sends nothing (see Resume)
	// The expiry timer, which declares the loss at validUntil, is made when
	// someone first watches the Lock (Done, Context, Do, an Observer with
	// Lost); until then a loss is found when the state is read (Err,
	// Extend, Release), and a Lock that nobody watches costs no timer.
	expiry *time.Timer
	dog    *time.Timer // the watchdog (auto-extend): runs extend every TTL/3
	// The watchdog's schedule (see arm): its timer fires at due, the next
	// run, or while one is under way (running), the time its extension is
	// left unanswered (inFlight) for half the validity left when it was
	// sent. checked is when the last run began; check is set when a watch
	// asks for a check (nudge, WatchLoss) until a run makes it; quick counts
	// the checks in a row that failed for want of an answer and were tried
	// again soon.
	watches                  []*pubsub.Watch
	requests                 chan string // the reasons of release requests heard (ReleaseRequests)
	heard                    []string    // the ids of the latest requests told, for a quorum's copies (requested)
	due, checked             time.Time
	running, check, inFlight bool
	quick                    int
	// jeop (made by Jeopardy) is closed when the lease is put at risk, or
	// settled; a later successful extension ends the risk, and Jeopardy
	// then makes a new one.
	jeop   chan struct{}
	atRisk bool
	tellMu sync.Mutex // held while a jeopardy is told: the watchdog waits for it to end the extension

	settled []func(error)   // called with the error when the Lock is settled (Do's cancel, Context's)
	ctx     context.Context // Context's, made at its first call (Done is its Done)
}

// activate makes the pending Lock l, made by Client.prepare, a held lease
// with the given fence and terms (validity, max hold) of its TTL, and
// starts its watchdog. With a max hold, the expiry timer is armed at once:
// it ends the lease at the cap, and releases it, whether or not anyone
// watches the Lock.
func (l *Lock) activate(fence int64, t terms) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start, l.ttl, l.validUntil = time.Now(), l.p.ttl, t.until
	l.slot = l.k.slot
	l.c.held[l.slot].began.Add(1)
	l.cl.Began = t.sent // (no later than the server granted it: see Node.release)
	l.maxAsk = t.ask
	l.capAt = t.capAt
	l.fence = fence // (0: none yet; no Fence runs before the Lock is returned)
	if slices.ContainsFunc(l.c.obs.all(), func(o Observer) bool { return o.Lost != nil }) || !t.capAt.IsZero() {
		l.watchLocked() // an Observer with Lost hears of an expiry when it happens
	}
	if l.c.opts.autoExtend {
		// The first run a third of the lease after the request that gave
		// it was sent, as every later one after the last run's send: the
		// validity counts from there, not from the answer.
		l.due = t.sent.Add(l.ttl / 3)
		l.dog = time.AfterFunc(time.Until(l.due), l.tick)
		if l.p.watch {
			l.requests = make(chan string, 1)
			for _, h := range l.c.hubs {
				l.watches = append(l.watches, h.Watch(l.cl.Channel, l.cl.Lock, l.nudge, l.requested))
			}
		}
	}
}

// listenWait bounds how long an acquisition waits for its watch's
// subscription (see listen): a broken pub/sub connection delays a held
// lease's return no longer than that, or TTL/3 if shorter.
const listenWait = time.Second

// listen waits until every hub's watch of a watched lease (WatchLoss)
// listens on the lock's channel, so that a request or a ForceRelease sent
// once the acquisition returns is heard; for as long as ctx allows and
// min(TTL/3, listenWait) at most. Past that the lease is returned all the
// same: its watch comes up later, and its confirmation (a reconnect's)
// nudges a check. The keyspace channel is not waited for.
func (l *Lock) listen(ctx context.Context) {
	if !l.p.watch {
		return // (nothing to wait for, nor to lock)
	}
	l.mu.Lock()
	ready := make([]<-chan struct{}, 0, len(l.watches))
	for _, w := range l.watches {
		ready = append(ready, w.Ready())
	}
	l.mu.Unlock()
	backend.Await(ctx, ready, min(l.p.ttl/3, listenWait)) // (no Extend can have changed it before the Lock is returned)
}

// terms are what one request for the lease asks for: the lease time to
// ask Redis for, the validity it gives, and the max hold's deadline.
type terms struct {
	sent  time.Time // when the request that gave the lease was sent (a handover: when its waiter queued)
	ask   time.Duration
	hold  time.Duration // the lease time the validity counts: ask less the lock-delay
	until time.Time
	capAt time.Time
}

// termsFrom returns the terms of a request for the lease the acquisition
// asked for, sent at sent: its TTL, and its max hold counted from sent.
func (l *Lock) termsFrom(sent time.Time) terms {
	var capAt time.Time
	if l.p.maxHold > 0 {
		capAt = sent.Add(l.p.maxHold)
	}
	return l.terms(sent, l.p.ttl, capAt)
}

// terms returns the terms of a request sent at sent for a lease of ttl,
// under the max hold's deadline capAt (zero: none): ttl, and a validity of
// sent + ttl − drift; or, if capAt comes first, a validity that ends there
// and the shortest lease time that gives it (Redis's expiry then comes the
// drift margin of that shorter lease after the cap, as every lease's comes
// after its validity). With a lock-delay, Redis is asked for that much
// more: the lease outlives the validity by the delay, and every ask of the
// lease by the same amount, so their order (maxAsk) is kept.
func (l *Lock) terms(sent time.Time, ttl time.Duration, capAt time.Time) terms {
	t := terms{sent: sent, hold: ttl, until: sent.Add(ttl - l.c.opts.driftFor(ttl)), capAt: capAt}
	if !capAt.IsZero() && !t.until.Before(capAt) {
		t.hold = min(l.c.opts.leaseFor(capAt.Sub(sent)), ttl)
		t.until = capAt
	}
	t.ask = l.p.asked(t.hold)
	return t
}

// atCap reports whether the validity ends at the max hold's deadline: the
// lease ends there, unextended.
func (t terms) atCap() bool { return !t.capAt.IsZero() && t.until.Equal(t.capAt) }

// atCap reports whether the validity ends at the max hold's deadline (not
// for a pending Lock, which has neither); l.mu must be held.
func (l *Lock) atCap() bool { return terms{until: l.validUntil, capAt: l.capAt}.atCap() }

// watchLocked arms the expiry timer, which declares the loss at the
// validity deadline, unless it is armed already or the Lock is settled;
// l.mu must be held.
func (l *Lock) watchLocked() {
	if l.expiry == nil && l.err == nil {
		l.expiry = time.AfterFunc(time.Until(l.validUntil), func() { l.expire() })
	}
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// mode is the mode l is held in, as its events and Held name it: its
// kind's, or a read's once a Downgrade made it one.
func (l *Lock) mode() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return modes[l.slot]
}

// Key returns the Redis key that holds the lock.
func (l *Lock) Key() string {
	if l.cl == nil { // (a zero Lock)
		return ""
	}
	return l.cl.Lock
}

// Token returns the lease's opaque token: no spaces, holder metadata included.
func (l *Lock) Token() string {
	if l.k == nil { // (a zero Lock)
		return ""
	}
	return l.k.holders.tokenOf(l.cl)
}

// Meta returns the lease's holder metadata ([HolderMeta]).
func (l *Lock) Meta() string { return l.p.meta }

// Deadline returns the lease's max hold deadline ([MaxHold]), if it has one.
func (l *Lock) Deadline() (time.Time, bool) { return l.capAt, !l.capAt.IsZero() }

// Fence returns the lease's fencing token, issued at the first call
// ([ErrNotHeld] if lost or resumed by then): an int64 above every earlier fence
// of the name unless Redis's clock steps back a minute (a day over a quorum).
func (l *Lock) Fence(ctx context.Context) (int64, error) {
	if !l.take(ctx, fenceTurn) { // a Downgrade under way outlasted ctx
		return 0, opError("fence", l.name, backend.NotSent(ctx.Err()))
	}
	defer l.tellUntold() // (once the turn is given back: see lapse)
	defer l.give(fenceTurn)
	l.mu.Lock()
	superseded := l.handedOff
	l.mu.Unlock()
	// A fence issued is returned without reading the state: it is the
	// lease's, whatever became of the lease since.
	if l.fence > 0 && !superseded { // (a Lock known superseded by a resume has no fence to give)
		return l.fence, nil
	}
	switch err := l.lapse(); {
	case err == ErrReleased:
		return 0, lost(l.name, "the lock was released before a fence was asked for")
	case err != nil:
		return 0, err
	}
	f, err := l.c.b.Fence(ctx, l.cl)
	if err := l.answered("fence", "the lock no longer holds our lease", f > 0, err); err != nil {
		return 0, err
	}
	l.fence = f
	return f, nil
}

// ValidUntil returns the deadline until which no other client holds the lock.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done returns a channel that is closed when the Lock is released or lost.
func (l *Lock) Done() <-chan struct{} {
	return l.Context().Done() // (past the deadline, it comes back closed: see heldContext)
}

// Jeopardy returns a channel closed when an extension fails or lags, Close
// stops the watchdog, or the lease ends; a new one once extended again.
func (l *Lock) Jeopardy() <-chan struct{} {
	l.expire()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jeop == nil {
		l.jeop = make(chan struct{})
		if l.atRisk || l.err != nil {
			close(l.jeop)
		}
	}
	return l.jeop
}

// Err returns nil while held, then [ErrReleased] or the loss (wraps
// [ErrNotHeld]).
func (l *Lock) Err() error {
	if l == nil || l.c == nil { // (nil, or a zero Lock: never acquired)
		return errNil
	}
	return l.expire()
}

// TTL asks Redis how long the lease has left; [ErrNotHeld] if lost,
// [ErrReleased].
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	defer l.tellUntold() // (a hand-off found below)
	switch err := l.Err(); {
	case err == ErrReleased:
		return 0, opError("ttl", l.name, err)
	case err != nil:
		return 0, err // lost: what Redis still keeps (a lock-delay, the drift margin) is not the holder's
	}
	st, err := l.c.b.Inspect(ctx, &l.cl.Keys)
	if err != nil {
		return 0, opError("ttl", l.name, err)
	}
	left, ok := st.LeaseLeft(l.cl.Token)
	if !ok {
		return 0, lost(l.name, "the lock no longer holds our lease")
	}
	if _, drives, err := l.c.b.Seq(ctx, l.cl); err != nil {
		return 0, opError("ttl", l.name, err)
	} else if !drives {
		return 0, l.handOff()
	}
	return left, nil
}

// Extend resets the lease to ttl from now, shorter or longer, for the watchdog
// too, cut at the max hold ([ErrMaxHold], still held). It retries Redis errors
// while ctx and the validity last; if it fails the earlier validity stands.
// Others: [ErrNotHeld], [ErrInvalid] (ttl < [MinTTL]), [ErrReleased].
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.extendable(ttl, l, func() string { return fmt.Sprintf("%q", l.name) }); err != nil {
		return err
	}
	e, start := Event{Op: OpExtend, Name: l.name}, time.Now()
	ctx = l.c.start(ctx, l.mode(), &e)
	// Nothing is gained past the validity (an extension sent later finds
	// the lease lost), so no attempt or wait outlasts it.
	vctx, cancel := context.WithDeadline(ctx, l.ValidUntil())
	defer cancel()
	var err error
	for wait := minRetry; ; wait *= 2 {
		sent := time.Now()
		err = l.extend(vctx, ttl)
		l.tellUntold() // (once the turn is given back: see lapse)
		// It tries again after a Redis error that may pass (the outcome
		// unknown, each extension safe to repeat; not a definite refusal
		// such as WRONGTYPE), with ctx alive and the lease valid
		// for longer than the wait before the next try and twice what the
		// last one took: a retry never spends the time the caller needs to
		// act on its failure (an extension of its own, a release).
		switch {
		case err == nil, vctx.Err() != nil, l.c.closed.Load(),
			errors.Is(err, ErrNotHeld), errors.Is(err, ErrReleased), errors.Is(err, ErrMaxHold), errors.Is(err, ErrInvalid),
			!backend.Transient(err):
		case time.Now().Add(wait+2*time.Since(sent)).Before(l.ValidUntil()) && backend.SleepCtx(vctx, wait) && vctx.Err() == nil:
			continue
		}
		break
	}
	if lerr := l.Err(); err != nil && errors.Is(lerr, ErrNotHeld) {
		err = lerr // the validity ran out meanwhile: the loss, not the Redis error that outlasted it
	}
	l.c.end(ctx, &e, start, err)
	return err
}

// extendable is the error with which an Extend to ttl of held (l, or a
// MultiLock whose first part is l) ends before it sends anything:
// ErrInvalid if ttl is below MinTTL or l's drift, else held's error. of
// names what was to be extended, for the refusal only.
func (l *Lock) extendable(ttl time.Duration, held interface{ Err() error }, of func() string) error {
	if l.c == nil { // (a zero Lock)
		return errNil
	}
	if ttl < MinTTL {
		return fmt.Errorf("%w: Extend(%v) of %s: the TTL must be at least %v", ErrInvalid, ttl, of(), MinTTL)
	}
	if d := l.c.opts.driftFor(ttl); ttl <= d {
		return fmt.Errorf("%w: Extend(%v) of %s: the TTL must be above the drift (%v)", ErrInvalid, ttl, of(), d)
	}
	return held.Err()
}

// extend extends the lease to ttl (0: the lease time of the latest
// extension, as the watchdog does), cut at the max hold. A loss it finds
// is left untold: its caller tells it once the turn is given back (see
// lapse).
func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	if !l.take(ctx, extTurn) { // another extension under way outlasted ctx
		return opError("extend", l.name, backend.NotSent(ctx.Err()))
	}
	defer l.give(extTurn)
	l.mu.Lock()
	ttl = cmp.Or(ttl, l.ttl)
	atCap, ended := l.atCap(), l.err
	l.mu.Unlock()
	if ended != nil {
		return ended // released or lost while this call waited (a watchdog run decided before a Release)
	}
	l.c.b.Prepare(ctx, l.cl) // (nothing to do unless a server lost its scripts; its error, the extension's too)
	start := time.Now()
	t := l.terms(start, ttl, l.capAt)
	if t.atCap() && (atCap || !start.Before(l.capAt)) {
		return l.capped() // it ends at the cap already: nothing to gain
	}
	// An extension asking for no less than any request before it cannot
	// shorten the lease: Redis applies it only if it lengthens (seq 0), so
	// copies of it need no order. One that may shorten is numbered, and so
	// is every later one (extSeq > 0), so that a late copy of it cannot
	// undo them.
	var seq int64
	if l.extSeq > 0 || t.ask < l.maxAsk {
		l.extSeq++
		seq = l.extSeq
	}
	l.maxAsk = max(l.maxAsk, t.ask)
	ok, err := l.c.b.Extend(ctx, l.cl, t.ask, seq)
	switch {
	case errors.Is(err, backend.ErrSuperseded):
		return l.handOff()
	case err == nil && !ok:
		return l.lose(lost(l.name, "the lock key no longer holds our token"), false)
	}
	// After an error it is unknown whether it took effect: assume the
	// earlier deadline. (Redis applies no extension older than one it
	// applied, so a later successful extension counts from its own start.)
	l.setValidity(ttl, t, err != nil)
	lapsed := l.lapse() // a validity that ran out while the call was in flight stays lost
	switch {
	case err != nil:
		return opError("extend", l.name, err)
	case lapsed != nil || !t.atCap():
		return lapsed
	}
	return l.capped()
}

// handOff ends the Lock as lost to another Lock that resumed its lease
// (see Resume): its Release then sends nothing. It returns the Lock's error.
func (l *Lock) handOff() error {
	return l.lose(lost(l.name, backend.ErrSuperseded.Error()), true)
}

// capped is the error of an extension cut at the max hold.
func (l *Lock) capped() error {
	left := time.Until(l.capAt).Round(time.Millisecond)
	return opError("extend", l.name, backend.Because(ErrMaxHold,
		fmt.Sprintf("extended only to its max hold of %v, %v from now", l.p.maxHold, left)))
}

// setValidity records an extension to ttl on terms t; with onlyEarlier (the
// extension's outcome is unknown), it moves the deadline back but never
// forward. The expiry timer and the watchdog follow the new deadline and
// lease time; a watchdog idle at the cap starts again when an extension
// to a shorter lease moves the deadline off it.
func (l *Lock) setValidity(ttl time.Duration, t terms, onlyEarlier bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return // lost or released while the call was in flight
	}
	applied := !onlyEarlier || t.until.Before(l.validUntil)
	if l.dog != nil && (ttl < l.ttl || (applied && l.atCap() && !t.atCap())) {
		d := ttl / 3 // a shorter lease needs the next extension sooner
		if !applied {
			d = min(d, time.Until(l.due)) // the validity stands: so does a retry due within it
		}
		l.arm(d)
	}
	l.ttl = ttl // the lease time asked for, whether or not this call took effect
	if !applied {
		return
	}
	if !onlyEarlier {
		l.inFlight = false // (answered: its jeopardy timer, if running, finds nothing)
		if l.atRisk {
			l.atRisk, l.jeop = false, nil // the lease recovered
		}
	}
	l.validUntil = t.until
	if l.expiry != nil {
		l.expiry.Reset(time.Until(t.until))
	}
}

// Release gives the lock up; a repeat returns nil. [ErrNotHeld] if lost, resumed
// elsewhere first, or nil. After a Redis error, retry or let it expire.
func (l *Lock) Release(ctx context.Context) (err error) {
	if l == nil || l.c == nil {
		return errNil
	}
	// A loss due is told before the turn is taken: a Lost hook may call
	// Release. With none under way, a done ctx still takes its turn: the
	// release stops the watchdog. Waiting for one under way, nothing is sent.
	l.expire()
	took := l.take(ctx, relTurn)
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	switch {
	case released:
		if took {
			l.give(relTurn)
		}
		return nil // a repeated Release (no operation, no event), or the one under way released the lock meanwhile
	case !took:
		return opError(l.k.releaseOp, l.name, backend.NotSent(ctx.Err()))
	}
	e, start := Event{Op: OpRelease, Name: l.name}, time.Now()
	ctx = l.c.start(ctx, l.mode(), &e)
	// A loss due meanwhile is told once the turn is given back (see
	// lapse), before the release ends; the end is told on the caller's
	// ctx, not the clean-up's below.
	defer func() {
		l.give(relTurn)
		l.tellUntold()
		l.c.end(ctx, &e, start, err)
	}()
	l.lapse()
	l.mu.Lock()
	l.finish(ErrReleased) // stop the watchdog before the delete
	lostErr, handedOff := l.err, l.handedOff
	l.mu.Unlock()
	if handedOff {
		return lostErr // the lease is the resuming Lock's now: not ours to end
	}
	rctx := ctx
	if ctx.Err() != nil && ctx.Value(heldKey{}) != nil {
		// ctx is a lock's own (Context, Do's, DoAll's, or one derived from
		// them), ended by the release or the loss: the release still goes
		// out (the lease may still be in Redis), bounded as a clean-up is.
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), backend.RetryCall)
		defer cancel()
	}

	ok, err := l.c.b.Release(rctx, l.cl)
	superseded := errors.Is(err, backend.ErrSuperseded) // another Lock resumed the lease: Redis left it to that one
	l.mu.Lock()
	l.released = err == nil || superseded // (false until now: the one Release under way sets it)
	l.handedOff = l.handedOff || superseded
	if err != nil && !superseded { // (the claim is copied under l.mu: see expire)
		l.cl.ReleaseSent = l.cl.ReleaseSent || backend.ReplyLost(err)
	}
	l.mu.Unlock()
	switch {
	case superseded:
		return lost(l.name, err.Error())
	case lostErr != ErrReleased:
		// A lease found lost already is reported lost whatever Redis says:
		// it is gone there, or going (a max hold's undo runs on its own).
		return lostErr
	case err != nil:
		return opError(l.k.releaseOp, l.name, err)
	case !ok:
		return lost(l.name, "the lease had expired or was taken over before Release")
	}
	e.Held = time.Since(l.start)
	return nil
}

// The turns of a Lock's calls that send its claim: one Release, one
// extension (the last one sets the lease), one Fence and one operation of
// its kind's own (a leader's Proclaim) at a time; a Downgrade takes the
// first three. A call waiting its turn honours its context, and the turn
// goes to the calls waiting for it in the order they came.
const (
	relTurn uint8 = 1 << iota
	extTurn
	fenceTurn
	opTurn
)

// turnWait is a call waiting for turn t: given is closed once it is
// handed the turn.
type turnWait struct {
	t     uint8
	given chan struct{}
}

// take takes turn t: at once if it is free, else once it is handed over by
// give, after the calls that waited for it before, unless ctx ends first
// (false).
func (l *Lock) take(ctx context.Context, t uint8) bool {
	l.mu.Lock()
	if l.turns&t == 0 {
		l.turns |= t
		l.mu.Unlock()
		return true
	}
	given := make(chan struct{})
	l.waits = append(l.waits, turnWait{t, given})
	l.mu.Unlock()
	select {
	case <-given:
		return true
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.waits)
	l.waits = slices.DeleteFunc(l.waits, func(w turnWait) bool { return w.given == given })
	return len(l.waits) == n // not waiting any more: handed over as ctx ended, the turn is this call's
}

// give gives turn t back: it hands it to the call that has waited for it
// longest, if any, else frees it.
func (l *Lock) give(t uint8) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.IndexFunc(l.waits, func(w turnWait) bool { return w.t == t })
	if i < 0 {
		l.turns &^= t
		return
	}
	close(l.waits[i].given) // (the turn stays taken, by that call now)
	l.waits = slices.Delete(l.waits, i, i+1)
}

// expire marks the Lock lost if its validity deadline has passed without an
// extension, tells the loss, and returns the Lock's error. The expiry timer
// runs it at the deadline; reading the state runs it too, for a Lock that
// nobody watches. A deadline that was the max hold's ends the lease with
// ErrMaxHold, and releases the lock (unless it has a lock-delay), in the
// background, so that waiters need not wait for its expiry.
func (l *Lock) expire() error { return l.declare(true) }

// lapse is expire for a call that holds a turn of the Lock: the loss it
// declares is left untold, and the call tells it (tellUntold) once it has
// given its turns back. A Lost hook may call the Lock (Release, Fence, a
// Downgrade): told under the turn, it would wait for the turn its own
// caller holds until its context ended, and hold that call as long. Only
// that call tells it: an expire meanwhile (a read of the state as Done
// closes) does not, so that the loss is told before that call ends.
func (l *Lock) lapse() error { return l.declare(false) }

// declare is expire, with tell, else lapse.
func (l *Lock) declare(tell bool) error {
	l.mu.Lock()
	if l.c == nil { // (a zero Lock: never acquired, it is settled as such)
		defer l.mu.Unlock()
		l.err = cmp.Or(l.err, errNil)
		return l.err
	}
	if err := l.err; err != nil || time.Now().Before(l.validUntil) { // settled, or extended meanwhile
		l.mu.Unlock()
		return err
	}
	err, undo := lost(l.name, "the lease's validity ran out before it was extended"), false
	if l.atCap() {
		// With a lock-delay the lease is left to expire: the holder's work
		// may still run past the cap, as after any end it did not make
		// itself. The undo is the release, retried while Redis does not
		// answer; Release, if called, runs it again (Redis answers a
		// repeated release as the first) and reports the cap.
		err, undo = lost(l.name, fmt.Sprintf("held for its max hold of %v", l.p.maxHold), ErrMaxHold), l.p.delay == 0
	}
	l.finish(err)
	if !tell {
		l.untold = err
	}
	cl := *l.cl // (a Downgrade in flight changes l.cl)
	l.mu.Unlock()
	if tell {
		l.c.tell(l, OpLost, err)
	}
	if undo && !l.c.closed.Load() { // (after Close none starts, though Close left work under way: the lease expires by its TTL)
		l.c.bg.Go(func() { l.c.undo(context.Background(), &cl) })
	}
	return err
}

// lose marks the Lock lost with err, unless it is already released or
// lost, and returns the Lock's error. With left, the Lock ends without
// ending its lease, which stays for another Lock to resume, or until it
// expires: its Release sends nothing. The loss is left untold, as lapse
// leaves it: the caller tells it (tellUntold), once it has given back
// any turn it holds.
func (l *Lock) lose(err error, left bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handedOff = l.handedOff || left
	if l.finish(err) {
		l.untold = err
	}
	return l.err
}

// tellUntold tells the observers of a loss declared but not yet told, if
// any (see lapse): each loss is told once.
func (l *Lock) tellUntold() {
	l.mu.Lock()
	err := l.untold
	l.untold = nil
	l.mu.Unlock()
	if err != nil {
		l.c.tell(l, OpLost, err)
	}
}

// onSettled makes f be called with the Lock's error once it is settled
// (released or lost), or at once if it already is; it also arms the
// expiry timer, so that a loss is declared when it is due. f must not
// block or call back into the Lock.
func (l *Lock) onSettled(f func(error)) {
	l.expire()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onSettledLocked(f)
}

// onSettledLocked is onSettled, once a loss that was due is declared; l.mu
// must be held.
func (l *Lock) onSettledLocked(f func(error)) {
	if l.err != nil {
		f(l.err)
		return
	}
	l.watchLocked()
	l.settled = append(l.settled, f)
}

// Context returns a context without deadline, cancelled (cause [ErrReleased] or
// the loss) once [Lock.Err] reports either; waits under it can find deadlocks.
func (l *Lock) Context() context.Context {
	l.expire() // (a loss is told, to the observers, outside l.mu)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		l.ctx = &heldContext{Context: ctx, held: l, cancel: cancel}
		l.onSettledLocked(cancel)
	}
	return l.ctx
}

// finish settles the Lock's state with err, unless it is settled already,
// and reports whether it did; l.mu must be held.
func (l *Lock) finish(err error) bool {
	if l.err != nil {
		return false
	}
	l.err = err
	if !l.start.IsZero() {
		l.c.held[l.slot].ended.Add(1)
	}
	for _, f := range l.settled {
		f(err)
	}
	l.settled = nil
	for _, t := range []*time.Timer{l.dog, l.expiry} {
		if t != nil {
			t.Stop()
		}
	}
	for _, w := range l.watches {
		w.Close()
	}
	l.watches = nil
	if l.jeop != nil && !l.atRisk {
		close(l.jeop)
	}
	return true
}
