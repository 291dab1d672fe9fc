package dlock

import (
	"fmt"

	"github.com/dlockio/dlock/internal/backend"
)

// Owner is one owner of a reentrant lock.
type Owner struct {
	ID    string   // the Client's instance ID and the owner, "<client>/<owner>"
	Holds int64    // the owner's live holds (each a lease of its own)
	Meta  []string // the distinct holder metadata of those holds that have one, sorted
}

// A reentrant lock shows in Info as its one owner, the one its Extra
// names, whose holds are the lock's leases.
var _ = part(func(info *Info, st backend.State) {
	if o, _ := told("", st.Extra); o != "" {
		info.Owners = []Owner{{ID: o, Holds: int64(len(st.Leases)), Meta: metasOf(st.Leases, nil)}}
	}
})

// reentrantLocks is the kind of a reentrant Client's own locks
// (WithReentrant): its claims and refusals all name its owner.
var reentrantLocks = kind{slot: newMode("reentrant"), lease: backend.ReentrantLock, waits: polls{}, acquireOp: "acquire", releaseOp: "release",
	holders: owners{}, by: "held by another owner"}

// owners is the holders of a reentrant lock: its leases belong to owners,
// not to tokens, which its claims name, Lock.Token gives, and the deadlock
// records key by the owner's hold of the name (see ownerHold). Its leases
// cannot be resumed, and its Client carries its own locks alone.
type owners struct{}

// ownerOf is c's owner (see Owner) or, if c has none, a new one: the
// acquisition is then its own.
func (owners) ownerOf(c *Client) string {
	if c.owner == "" {
		return c.id + "/" + newToken()
	}
	return c.id + "/" + c.owner
}

func (owners) tokenOf(cl *backend.Claim) string { return cl.Holder }

func (owners) recordOf(cl *backend.Claim, name string) string { return ownerHold(cl.Holder, name) }

func (owners) resumes(op, name string) error {
	return fmt.Errorf("%w: %s %q: Resume: a reentrant Client's holds belong to its owners, not to a token", ErrInvalid, op, name)
}

func (owners) carries(call string, w words) error {
	return fmt.Errorf("%w: %s: a reentrant Client (WithReentrant) cannot %s %s", ErrInvalid, call, w.verb, w.one)
}

// Owner returns a Client, sharing c's configuration and Close, whose reentrant
// locks are held by owner; [ErrInvalid] if c is not reentrant or owner is "".
func (c *Client) Owner(owner string) (*Client, error) {
	switch {
	case c.own.holders != owners{}:
		return nil, fmt.Errorf("%w: Owner(%q): the Client's locks are not reentrant (WithReentrant)", ErrInvalid, owner)
	case owner == "":
		return nil, fmt.Errorf("%w: Owner(\"\"): empty owner", ErrInvalid)
	}
	return &Client{engine: c.engine, owner: owner}, nil
}
