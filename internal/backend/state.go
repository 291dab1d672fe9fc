package backend

import "time"

// State is the state of one lock as Inspect reads it: what the root
// package's Info reports, and what Force and a Lock's TTL need besides.
type State struct {
	Key   string        // the Redis key of the lock
	Held  bool          // whether the key exists
	Type  string        // the key's Redis type: "string" for a plain lock, "none" when free
	Token string        // the holder's owner token (plain locks)
	TTL   time.Duration // the holder's remaining lease; -1 if the key has no expiry
	Fence int64         // the last fencing token issued for the name, 0 if none

	Holding string // what force_release.lua compares: the token, or "<owner> <fence>"
	// Queued is the number of live waiters in the queue: those whose
	// entry has not lapsed (a waiter that died stops counting then).
	Queued int64
	// Leases are the live leases that hold the lock, as the reader of its
	// key's shape read them: a plain lock's holder's (the key's TTL), a
	// semaphore's permits or a read-write lock's holds (the soonest to end
	// first), a reentrant lock's owner's holds.
	Leases []Hold
	// Extra is what the key's kind reads beside its leases; nil if none.
	Extra Extra
	ended bool // the key holds only leases that ended: nothing to force
}

// Extra is what a kind reads beside a lock's leases (State.Extra) or a
// refused holder (Grant.Extra), of a type the kind's file declares: a
// reentrant lock's Owner, a leader's Proclaimed value.
type Extra interface {
	// Holder says what the lock names as its holder: the owner that holds
	// it ("" if none), and what the holder whose metadata is meta shows
	// of itself.
	Holder(meta string) (owner, shows string)
}

// Hold is one live lease that holds a lock: its token and remaining lease,
// the kind its key's reader tells it is (Read, Write, Permit,
// ReentrantLock; nil for a string's holder, which any of a Client's own
// locks or a leader may be), and the members it counts for (a
// semaphore's permits).
type Hold struct {
	Token string
	Left  time.Duration
	Kind  Kind
	N     int
}

// forced reports whether Force has a holding to delete in the lock s
// (Holding), or why it may not.
func (s State) forced() (bool, error) {
	switch {
	case !s.Held || s.ended:
		return false, nil
	case s.Holding == "":
		return false, Because(ErrWrongType, "a "+s.Type)
	}
	return true, nil
}

// forcedKeys returns the lock key of k, then the markers of the leases of
// s, which Force sets ended, as a release sets a marker, for the lock
// key's TTL (its longest lease's) and a minute beyond: a copy of a forced
// lease's request still in flight, for as long as the lease could have
// lived, is refused when it lands, and cannot give the lease back to a
// holder that would never learn it was forced out.
func (s State) forcedKeys(k *Keys) []any {
	keys := []any{k.Lock}
	for _, h := range s.Leases {
		keys = append(keys, markerKey(k.Lock, h.Token))
	}
	return keys
}

// HeldAs names the kinds that keep a key of the lock's type, in words ("a
// reentrant lock"); for a type no kind keeps, "a " and its name.
func (s State) HeldAs() string { return shapeOf(s.Type).heldAs }

// LeaseLeft returns how long the lease with token has left, and whether it
// holds the lock (as one of its Leases).
func (s State) LeaseLeft(token string) (time.Duration, bool) {
	for _, h := range s.Leases {
		if h.Token == token {
			return h.Left, true
		}
	}
	return 0, false
}
