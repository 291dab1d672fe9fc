package dlock

import (
	"errors"
	"fmt"

	"github.com/dlockio/dlock/internal/backend"
)

// mode is what a Client's acquisitions are: the Client's own locks (unfair,
// fair, reentrant or over a quorum), or a kind made from it (a semaphore's
// permits, an election's campaigns, a read-write lock's read or write
// holds). Observers see it as Event.Mode.
type mode uint8

const (
	modeUnfair mode = iota
	modeFair
	modeReentrant
	modeQuorum
	modeSemaphore
	modeElection
	modeRead
	modeWrite
)

var modeNames = [...]string{
	modeUnfair:    "unfair",
	modeFair:      "fair",
	modeReentrant: "reentrant",
	modeQuorum:    "quorum",
	modeSemaphore: "semaphore",
	modeElection:  "election",
	modeRead:      "read",
	modeWrite:     "write",
}

// String is the mode's name in Event.Mode.
func (m mode) String() string { return modeNames[m] }

// kind is what a Client's acquisitions are, seen from this package: the
// Client's own locks (Client.own), or a kind made on top of them by
// Client.Semaphore, Client.RWMutex (reader and writer) or Client.Election,
// which holds its Client and its kind. The backend serves it by lease; its
// role says how its acquisitions speak.
type kind struct {
	mode  mode
	fair  bool         // its waiters queue (fair mode), whatever the Client's own locks do
	lease backend.Kind // what the backend runs (nil: the Client's own locks)
	role  role
}

// tag is the tag of the kind's lease tokens (see tokenTag).
func (k *kind) tag() byte {
	if k.lease == backend.Campaign {
		return tagCampaign
	}
	return tagLock
}

// role is what a kind's acquisitions say of themselves: each kind is a
// type of its own (ownLocks, semaphorePermits, rwHold, campaign).
type role interface {
	// acquireOp and releaseOp name an acquisition and a release in
	// their errors.
	acquireOp() string
	releaseOp() string
	// refused fills in e, the refusal of an attempt, as the kind says it.
	refused(e *NotAcquiredError)
	// namesNoHolder reports whether the kind's refusals name no holder (a
	// semaphore's and a read-write lock's), so that each one is worth
	// keeping, even without a holder.
	namesNoHolder() bool
	// words are how a kind made on top of a Client's locks speaks of
	// itself when a Client cannot carry it (Client.carries).
	words() kindWords
}

// kindWords are how a kind made on top of a Client's locks speaks of
// itself when a Client cannot carry it (Client.carries).
type kindWords struct {
	plural, one, verb string // "semaphores", "a semaphore", "keep"
	overQuorum        string // what follows "not available over a quorum (NewRedlock)"
}

// ownLocks are a Client's own locks.
type ownLocks struct{}

// The kinds of a Client's own locks, one chosen when it is made
// (options.own, NewRedlock).
var (
	unfairLocks    = kind{mode: modeUnfair, lease: backend.PlainLock, role: ownLocks{}}
	fairLocks      = kind{mode: modeFair, fair: true, lease: backend.FairLock, role: ownLocks{}}
	reentrantLocks = kind{mode: modeReentrant, lease: backend.ReentrantLock, role: ownLocks{}}
	quorumLocks    = kind{mode: modeQuorum, lease: backend.PlainLock, role: ownLocks{}}
)

func (ownLocks) acquireOp() string         { return "acquire" }
func (ownLocks) releaseOp() string         { return "release" }
func (ownLocks) refused(*NotAcquiredError) {}
func (ownLocks) namesNoHolder() bool       { return false }
func (ownLocks) words() kindWords          { return kindWords{"locks", "a lock", "keep", ""} }

// semaphorePermits are a semaphore's, N of them.
type semaphorePermits int

func (semaphorePermits) acquireOp() string             { return "acquire" }
func (semaphorePermits) releaseOp() string             { return "release" }
func (n semaphorePermits) refused(e *NotAcquiredError) { e.Permits, e.sem = int(n), true }
func (semaphorePermits) namesNoHolder() bool           { return true }
func (semaphorePermits) words() kindWords              { return kindWords{"semaphores", "a semaphore", "keep", ""} }

// rwHold is a read-write lock's read ("r") or write ("w") hold.
type rwHold string

func (rwHold) acquireOp() string             { return "acquire" }
func (rwHold) releaseOp() string             { return "release" }
func (h rwHold) refused(e *NotAcquiredError) { e.rw = string(h) }
func (rwHold) namesNoHolder() bool           { return true }
func (rwHold) words() kindWords {
	return kindWords{"read-write locks", "a read-write lock", "keep", ""}
}

// campaign is an election's candidate: it campaigns, and its leader
// resigns.
type campaign struct{}

func (campaign) acquireOp() string           { return "campaign" }
func (campaign) releaseOp() string           { return "resign" }
func (campaign) refused(e *NotAcquiredError) { e.leader = true }
func (campaign) namesNoHolder() bool         { return false }
func (campaign) words() kindWords {
	return kindWords{"elections", "an election", "hold", ", whose waiting is not fair"}
}

// carries asks c's backend whether it serves the kind k, which call
// (Semaphore, RWMutex, Election) makes; if not, it returns an error
// wrapping ErrInvalid that says why in the kind's words.
func (c *Client) carries(k *kind, call string) error {
	why := c.b.Carries(k.lease)
	if why == nil && c.own.lease != backend.ReentrantLock {
		return nil
	}
	w := k.role.words()
	var s string
	switch {
	case errors.Is(why, backend.ErrOverQuorum):
		s = w.plural + " are not available over a quorum (NewRedlock)" + w.overQuorum
	case why == nil: // (a reentrant Client's claims all name its owner)
		s = "a reentrant Client (WithReentrant) cannot " + w.verb + " " + w.one
	default:
		s = w.plural + " need scripts; a Client made WithoutScripts() cannot " + w.verb + " one"
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalid, call, s)
}
