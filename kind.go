package dlock

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// kind is what a Client's acquisitions are, seen from this package, and how
// they speak: the Client's own locks (Client.own, chosen when the Client
// is made: client.go's ownOn; reentrant.go, redlock.go), or a kind made on
// top of them, each described in its own file (semaphore.go, rwmutex.go,
// election.go). This file lists no kind.
type kind struct {
	slot  int          // its mode (modes[slot], its name in Event.Mode), and its place in the Client's held counts
	lease backend.Kind // what the backend runs
	waits waiting      // how its waiters wait: they poll, or queue
	mark  string       // what its lease tokens begin with (see marks), "" for most
	// needs is what its waiter needs of the name's holders, as its
	// deadlock records say it (see waitCheck): "all" gone (a writer);
	// "" for one, which the records say as "one".
	needs string

	acquireOp, releaseOp string // an acquisition and a release, as its errors name them
	// How its refusals speak (see refusal): by whom the lock is held
	// ("": "held by another holder"), or, for a kind whose refusals name
	// no holder (so that each one is worth keeping anyway), their text.
	by, why string
	permits int     // a semaphore's N as asked: its refusals say it
	holders holders // whom its leases belong to: their tokens, or a reentrant lock's owners
}

// holders is whom a kind's leases belong to, and what follows from it:
// the owner its claims name (for an acquisition by c), the name Lock.Token
// gives the lease cl, and the identity the deadlock records key it by when
// held under name; and, if a lease cannot be resumed from its token
// (Resume) or a Client of the kind cannot carry other kinds (carries),
// the refusal of op or call, else nil.
type holders interface {
	ownerOf(c *Client) string
	tokenOf(cl *backend.Claim) string
	recordOf(cl *backend.Claim, name string) string
	resumes(op, name string) error
	carries(call string, w words) error
}

// tokens is the holders of a kind whose leases belong to their tokens: its
// claims name no owner, and nothing is refused. (A reentrant lock's leases
// belong to owners: see reentrant.go.)
type tokens struct{}

func (tokens) ownerOf(*Client) string                      { return "" }
func (tokens) tokenOf(cl *backend.Claim) string            { return cl.Token }
func (tokens) recordOf(cl *backend.Claim, _ string) string { return cl.Token }
func (tokens) resumes(string, string) error                { return nil }
func (tokens) carries(string, words) error                 { return nil }

// words are how a kind made on top of a Client's locks, or a call that
// needs what a backend may not carry, speaks of itself when a Client
// cannot carry it (see carries, unserved): "semaphores", "a semaphore",
// "keep", and what follows "not available over a quorum (NewRedlock)".
type words struct{ plural, one, verb, overQuorum string }

// modes names the modes a lease is held in, as Event.Mode does, by their
// place in a Client's held counts (Held): each kind registers its own
// where it is declared (newMode).
var modes []string

// newMode registers the mode name, and returns its place (a kind's slot).
func newMode(name string) int {
	modes = append(modes, name)
	return len(modes) - 1
}

// mode is k's name in Event.Mode.
func (k *kind) mode() string { return modes[k.slot] }

// says reports whether a refusal g of an attempt of kind k says something
// worth keeping (see refusal): it names a holder, or k's refusals name none.
func (k *kind) says(g backend.Grant) bool {
	return g.Holder != "" || g.Extra != nil || k.why != ""
}

// refusal is the NotAcquiredError of an attempt of name that Redis refused
// with g.
func (k *kind) refusal(name string, g backend.Grant) *NotAcquiredError {
	// (A leader is named by the value it proclaimed last, as Leader does;
	// a reentrant lock by its owner, which only its refusals name.)
	owner, meta := told(g.Holder, g.Extra)
	return &NotAcquiredError{Name: name, Holder: cmp.Or(owner, g.Holder), Meta: meta, TTL: g.PTTL,
		Permits: k.permits, says: cmp.Or(k.why, k.by)}
}

// resumes checks that a lease of kind k held under name can be resumed
// from token (Resume): an error wrapping ErrInvalid if k's leases belong
// to owners, not to tokens (see holders), or ErrNotHeld if token is
// another kind's.
func (k *kind) resumes(name, token string) error {
	if err := k.holders.resumes(k.acquireOp, name); err != nil {
		return err
	}
	if tokenMark(token) != k.mark {
		return fmt.Errorf("%w: %q: Resume: the token is another kind's lease", ErrNotHeld, name)
	}
	return nil
}

// waiting is how a kind's waiters wait: they poll (polls), trying again
// after a backoff, or queue in Redis (queues) and are handed the lease.
type waiting interface {
	// place is the place in the queue of an attempt with token that Redis
	// answered and refused: token if the waiters queue, else "".
	place(token string) string
	// sleep is how long a waiter for a lease of ttl sleeps after its
	// attempt-th attempt unless woken: never past the end of the holder's
	// lease (pttl, see untilEnd), as the holder may have died without
	// releasing; queued says whether its last attempt left it in the queue.
	sleep(backoff Backoff, attempt int, pttl, ttl time.Duration, queued bool) time.Duration
}

type (
	polls  struct{}
	queues struct{}
)

func (polls) place(string) string        { return "" }
func (queues) place(token string) string { return token }

// sleep: the backoff, no longer than the wake key the waiter set lives.
func (polls) sleep(backoff Backoff, attempt int, pttl, _ time.Duration, _ bool) time.Duration {
	return untilEnd(min(backoffAt(backoff, attempt), backend.WakeWindow), pttl)
}

// sleep: a third of the queue entry's life, to renew it, and the backoff
// too while the waiter is not queued (its last attempt was undone, refused
// as revoked, came back too late or missed a quorum): it hears of no
// release, as nothing is announced when nobody queues, so it tries again
// soon, and so queues.
func (queues) sleep(backoff Backoff, attempt int, pttl, ttl time.Duration, queued bool) time.Duration {
	d := untilEnd(backend.Window(ttl)/3, pttl)
	if !queued {
		d = min(d, backoffAt(backoff, attempt))
	}
	return d
}

// untilEnd is d, or, if the holder's lease ends sooner (pttl > 0), a
// moment after it ends.
func untilEnd(d, pttl time.Duration) time.Duration {
	if pttl > 0 && pttl < d {
		return pttl + time.Millisecond
	}
	return d
}

// backoffAt is backoff(attempt) if it is positive, else DefaultMinBackoff.
func backoffAt(backoff Backoff, attempt int) time.Duration {
	return cmp.Or(max(backoff(attempt), 0), DefaultMinBackoff)
}

// carries asks c's backend whether it serves the kind k, which call
// (Semaphore, RWMutex, Election) makes; if not, it returns an error
// wrapping ErrInvalid that says why in the kind's words w (as c's own
// kind's holders do if they refuse).
func (c *Client) carries(k *kind, call string, w words) error {
	if err := c.own.holders.carries(call, w); err != nil {
		return err
	}
	return unserved(call, w, c.b.Carries(k.lease))
}

// unserved is the refusal of call, which asks for what w names from a
// backend that said why it does not carry it (Backend.Carries,
// Backend.Op): an error wrapping ErrInvalid that says why in w's words;
// nil if why is nil or no such refusal.
func unserved(call string, w words, why error) error {
	var s string
	switch {
	case errors.Is(why, backend.ErrOverQuorum):
		s = w.plural + " are not available over a quorum (NewRedlock)" + w.overQuorum
	case errors.Is(why, backend.ErrNeedsScripts):
		s = w.plural + " need scripts; a Client made WithoutScripts() cannot " + w.verb + " one"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalid, call, s)
}
