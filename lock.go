package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// Lock is a held lease on one lock name, returned by Client.Acquire and
// Client.TryAcquire (or a permit of a Semaphore, returned by its Acquire
// and TryAcquire). Its methods are safe for concurrent use.
//
// A Lock is held until Release, or until it is lost: its token disappeared
// from Redis (it expired, or someone deleted or overwrote the key), or its
// validity ran out before it could be extended. Done and Err report a loss,
// and they do so no later than the validity deadline: by the time Redis
// could let another client in, Done is already closed.
//
// It is NOT safe to assume that the lock is still held just because Done is
// open: a process paused between checking and acting (GC, swap, a stopped
// VM) can act after the lease has expired. Pass Fence to the protected
// resource and let it reject stale writes; see the package documentation.
type Lock struct {
	c     *Client
	name  string
	cl    *backend.Claim // the keys and the lease token; script arguments point into it
	base  backend.Claim  // where cl points, unless an attempt was undone (see renew)
	start time.Time

	fenceMu sync.Mutex // serializes Fence calls
	fence   int64      // the lease's fence once issued; fenceMu guards it

	relMu      sync.Mutex // serializes Release calls
	extMu      sync.Mutex // serializes extensions: the last one sets the lease
	extSeq     int64      // the last extension's sequence number; extMu guards it
	mu         sync.Mutex // guards the fields below
	ttl        time.Duration
	validUntil time.Time
	err        error // nil while held; ErrReleased, or the loss
	released   bool  // the release script ran
	// done and the expiry timer that closes it at validUntil are made when
	// someone first watches the Lock (Done, Do, a Lost hook); until then a
	// loss is found when the state is read (Err, Extend, Release), and a
	// Lock that nobody watches costs no timer.
	done   chan struct{}
	expiry *time.Timer
	dog    *time.Timer // the watchdog (auto-extend): runs extend every TTL/3

	settled func(error) // called with the error when the Lock is settled (Do's cancel)
}

// activate makes the pending Lock l, made by Client.prepare, a held lease
// with the given fence and validity, and starts its watchdog.
func (l *Lock) activate(fence int64, ttl time.Duration, validUntil time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start, l.ttl, l.validUntil = time.Now(), ttl, validUntil
	if fence > 0 {
		l.fenceMu.Lock()
		l.fence = fence
		l.fenceMu.Unlock()
	}
	if l.c.obs.anyLost.Load() {
		l.watchLocked() // an Observer hears of an expiry when it happens
	}
	if l.c.opts.autoExtend {
		l.dog = time.AfterFunc(ttl/3, l.tick)
	}
}

// renew gives the pending Lock a new lease token after its attempt was
// undone. The claim is copied, not changed: requests of the undone attempt
// may still be in flight (a quorum node that did not answer in time, a
// pipeline whose caller gave up) with arguments that point into it.
func (l *Lock) renew() {
	cl := *l.cl
	cl.SetToken(newToken())
	l.cl = &cl
}

// watchLocked makes the done channel, closed at once if the Lock is already
// settled, and otherwise the timer that closes it at the validity deadline;
// l.mu must be held.
func (l *Lock) watchLocked() {
	if l.done != nil {
		return
	}
	l.done = make(chan struct{})
	if l.err != nil {
		close(l.done)
		return
	}
	l.expiry = time.AfterFunc(time.Until(l.validUntil), l.expire)
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Key returns the Redis key that holds the lock.
func (l *Lock) Key() string { return l.cl.Lock }

// Token returns the random token of this lease: the value of the lock key
// while this Lock holds it. For a reentrant lock it is the owner's id,
// shared by the owner's nested holds as they share the fence, so that a
// fenced resource (Guard) takes them for the one holder they are.
func (l *Lock) Token() string {
	if l.cl.Owner != "" {
		return l.cl.Owner
	}
	return l.cl.Token
}

// Fence returns the fencing token of this lease: greater than every fence
// issued before it for the same name, including across expiries and a
// restart of a Redis without persistence (as long as the server's clock
// does not step back by more than a minute; over a quorum, as long as the
// nodes' clocks agree to within a day). Give it to the protected resource
// with every write, and have the resource reject a write whose fence is
// lower than one it has already accepted (see Guard).
//
// The first call asks Redis, which issues the fence only if the lease still
// holds the lock (over a quorum: two rounds, to write it back to a
// majority); later calls return it without a round trip. A lease that never
// asks costs the server nothing for fencing. It returns an error wrapping
// ErrNotHeld if the lock was lost or released before a fence was issued.
func (l *Lock) Fence(ctx context.Context) (int64, error) {
	l.fenceMu.Lock()
	defer l.fenceMu.Unlock()
	if l.fence > 0 {
		return l.fence, nil
	}
	if err := l.Err(); err != nil {
		if err == ErrReleased {
			return 0, lost(l.name, "the lock was released before a fence was asked for")
		}
		return 0, err
	}
	f, err := l.c.b.Fence(ctx, l.cl)
	if err != nil {
		return 0, opError("fence", l.name, public(err))
	}
	if f <= 0 {
		err := lost(l.name, "the lock no longer holds our lease")
		l.lose(err)
		return 0, l.Err()
	}
	l.fence = f
	return f, nil
}

// ValidUntil returns the client-side deadline of the lease: until then no
// other client can hold the lock, as long as the clocks' rates differ by less
// than the drift margin. It moves forward with each extension.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done returns a channel that is closed when the Lock is released or lost.
func (l *Lock) Done() <-chan struct{} {
	l.expire() // past the deadline, the channel comes back closed
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchLocked()
	return l.done
}

// Err returns nil while the Lock is held, ErrReleased after Release, or an
// error wrapping ErrNotHeld that says why the lock was lost.
func (l *Lock) Err() error {
	l.expire()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// TTL asks Redis how long the lease has left (for a reentrant hold, this
// hold's own lease). It returns an error wrapping ErrNotHeld if the lock no
// longer holds this lease.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	st, err := l.c.b.Inspect(ctx, &l.cl.Keys)
	if err != nil {
		return 0, opError("ttl", l.name, err)
	}
	left, ok := st.LeaseLeft(l.cl.Token)
	if !ok {
		return 0, lost(l.name, "the lock no longer holds our lease")
	}
	return left, nil
}

// Extend resets the lease to ttl from now, shorter or longer than before,
// and makes ttl the lease time of later automatic extensions. The validity
// (ValidUntil, and the deadline at which Done closes) follows: an Extend to
// a shorter TTL brings it forward. Extend waits for an extension already in
// flight (the watchdog's), so that the last extension sent is the one that
// counts.
//
// It returns an error wrapping ErrInvalid if ttl is too short, ErrReleased
// after Release, an error wrapping ErrNotHeld if the lock was lost (Done is
// then closed), or the error from Redis. After an error from Redis the
// extension may or may not have reached Redis: the validity is then the
// earlier of the old one and the one ttl would give.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("%w: Extend(%v) of %q: the TTL must be at least %v", ErrInvalid, ttl, l.name, MinTTL)
	}
	if d := l.c.opts.driftFor(ttl); ttl <= d {
		return fmt.Errorf("%w: Extend(%v) of %q: the TTL must be above the drift (%v)", ErrInvalid, ttl, l.name, d)
	}
	if err := l.Err(); err != nil {
		return err
	}
	e, start := Event{Op: OpExtend, Name: l.name}, time.Now()
	ctx = l.c.start(ctx, &e)
	err := l.extend(ctx, ttl)
	l.c.end(ctx, &e, start, err)
	return err
}

// extend extends the lease to ttl (0: the lease time of the latest
// extension, as the watchdog does).
func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	l.extMu.Lock()
	defer l.extMu.Unlock()
	if ttl == 0 {
		l.mu.Lock()
		ttl = l.ttl
		l.mu.Unlock()
	}
	start := time.Now()
	until := start.Add(ttl - l.c.opts.driftFor(ttl))
	l.extSeq++
	ok, err := l.c.b.Extend(ctx, l.cl, ttl, l.extSeq)
	if err != nil {
		err = public(err)
		// Unknown whether it took effect: assume the earlier deadline.
		// (Redis applies no extension older than one it applied, so a
		// later successful extension counts from its own start.)
		l.setValidity(ttl, until, true)
		l.expire()
		return opError("extend", l.name, err)
	}
	if !ok {
		err := lost(l.name, "the lock key no longer holds our token")
		l.lose(err)
		return l.Err()
	}
	l.setValidity(ttl, until, false)
	l.expire() // a validity that ran out while the call was in flight stays lost
	return l.Err()
}

// setValidity records an extension to ttl whose validity runs until until;
// with onlyEarlier (the extension's outcome is unknown), it moves the
// deadline back but never forward. The expiry timer and the watchdog follow
// the new deadline and lease time.
func (l *Lock) setValidity(ttl time.Duration, until time.Time, onlyEarlier bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return // lost or released while the call was in flight
	}
	if ttl < l.ttl && l.dog != nil {
		l.dog.Reset(ttl / 3) // a shorter lease needs the next extension sooner
	}
	l.ttl = ttl // the lease time asked for, whether or not this call took effect
	if onlyEarlier && !until.Before(l.validUntil) {
		return
	}
	l.validUntil = until
	if l.expiry != nil {
		l.expiry.Reset(time.Until(until))
	}
}

// Release gives the lock up, stopping its watchdog. It is idempotent: once
// it has succeeded, further calls return nil. It returns an error wrapping
// ErrNotHeld if the lock was lost before Release (the critical section may
// have overlapped with another holder's), or the error from Redis, in which
// case the lease is no longer extended and expires within its TTL, and
// Release may be called again.
//
// Pass a context that is not already cancelled, e.g.
// context.WithoutCancel(ctx) in a defer.
func (l *Lock) Release(ctx context.Context) error {
	e, start := Event{Op: OpRelease, Name: l.name}, time.Now()
	ctx = l.c.start(ctx, &e)
	err := l.release(ctx, &e)
	l.c.end(ctx, &e, start, err)
	return err
}

func (l *Lock) release(ctx context.Context, e *Event) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.expire()
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.finish(ErrReleased) // stop the watchdog before the delete
	lostErr := l.err
	l.mu.Unlock()

	ok, err := l.c.b.Release(ctx, l.cl)
	if err != nil {
		return opError("release", l.name, public(err))
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	if lostErr != ErrReleased {
		return lostErr
	}
	if !ok {
		return lost(l.name, "the lease had expired or was taken over before Release")
	}
	e.Held = time.Since(l.start)
	return nil
}

// expire marks the Lock lost if its validity deadline has passed without an
// extension. The expiry timer runs it at the deadline; reading the state
// runs it too, for a Lock that nobody watches.
func (l *Lock) expire() {
	l.mu.Lock()
	if l.err != nil || time.Now().Before(l.validUntil) { // settled, or extended meanwhile
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(lost(l.name, "the lease's validity ran out before it was extended"))
}

// lose marks the Lock lost with err, unless it is already released or lost.
func (l *Lock) lose(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.finish(err)
	l.mu.Unlock()
	l.c.lostLease(l, err)
}

// onSettled makes f be called with the Lock's error once it is settled
// (released or lost), or at once if it already is; it also arms the
// expiry timer, so that a loss is declared when it is due. f must not
// block or call back into the Lock.
func (l *Lock) onSettled(f func(error)) {
	l.expire()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchLocked()
	if l.err != nil {
		f(l.err)
		return
	}
	l.settled = f
}

// finish settles the Lock's state with err; l.mu must be held.
func (l *Lock) finish(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	if l.settled != nil {
		l.settled(err)
	}
	if l.dog != nil {
		l.dog.Stop()
	}
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if l.done != nil {
		close(l.done)
	}
}
