package backend

import (
	"slices"
	"time"
)

// State is the state of one lock as Inspect reads it: what the root
// package's Info reports, and what Force and a Lock's TTL need besides.
type State struct {
	Key   string        // the Redis key of the lock
	Held  bool          // whether the key exists
	Type  string        // the key's Redis type: "string" for a plain lock, "none" when free
	Token string        // the holder's owner token (plain locks)
	Plain []Hold        // a plain lock's lease: its holder's Token and TTL (a string's read: see stringShape)
	TTL   time.Duration // the holder's remaining lease; -1 if the key has no expiry
	Fence int64         // the last fencing token issued for the name, 0 if none

	Holding string // what force_release.lua compares: the token, or "<owner> <fence>"
	// Queued is the number of live waiters in the queue: those whose
	// entry has not lapsed (a waiter that died stops counting then).
	Queued int64
	// Owners are a reentrant lock's owner (at most one: the one its hash
	// names) and its live holds.
	Owners []Owner
	// Permits are a semaphore's live permits (Type "zset"), the soonest
	// to end first; RWHolds, a read-write lock's live holds, likewise.
	Permits, RWHolds []Hold
	// Value is the value the leader holding the lock proclaimed (see
	// proclaim.lua), when Proclaimed.
	Value      string
	Proclaimed bool
	ended      bool // the key holds only leases that ended: nothing to force
}

// Owner is one owner of a reentrant lock: "<client>/<owner>", and its live
// holds (each a lease of its own).
type Owner struct {
	ID    string
	Holds []Hold
}

// Hold is one live hold of a reentrant lock or of a read-write lock, or
// one live permit of a semaphore: its token and remaining lease.
type Hold struct {
	Token string
	Left  time.Duration
	Write bool // a read-write lock's write hold
	N     int  // a semaphore's: the permits it holds at once
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

// Leases returns the live leases that hold the lock: its plain holder's
// (the key's TTL), a semaphore's permits, a read-write lock's holds, and
// a reentrant lock's holds. A plain lock's is s.Plain itself, not a copy:
// its callers only read it.
func (s State) Leases() []Hold {
	if len(s.Permits)+len(s.RWHolds)+len(s.Owners) == 0 {
		return s.Plain
	}
	hs := slices.Concat(s.Plain, s.Permits, s.RWHolds)
	for _, o := range s.Owners {
		hs = append(hs, o.Holds...)
	}
	return hs
}

// LeaseLeft returns how long the lease with token has left, and whether it
// holds the lock (as one of its Leases).
func (s State) LeaseLeft(token string) (time.Duration, bool) {
	for _, h := range s.Leases() {
		if h.Token == token {
			return h.Left, true
		}
	}
	return 0, false
}
