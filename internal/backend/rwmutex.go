package backend

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// A read-write lock (see lib.lua) is a sorted set at the lock key, as a
// semaphore is: one member per hold, "r:<token>" for a read and
// "w:<token>" for a write, scored by its deadline. Each hold is a lease
// like a plain lock's, with its own token and marker key; its waiters
// queue as a fair lock's do. The semaphore's permits and these holds run
// one family of scripts (hold_*.lua; see hold.go), told apart by what is
// asked for.

// Read and Write are the kinds of a read and a write hold of a read-write
// lock; Downgrading is a write hold whose downgrade has an unknown outcome
// (its reply lost, or its context ended in flight): its scripts act on
// whichever of the hold's read and write the lock has (hold_member in
// lib_hold.lua), so that its release or extension misses neither.
var (
	Read        Kind = rwHold{hold{w: 1, ask: "r"}}
	Write       Kind = rwHold{hold{w: 1, ask: "w"}}
	Downgrading Kind = rwHold{hold{w: 1, ask: "?"}}
)

// rwHold is a read-write lock's hold: what its acquisition asks for, "r",
// "w" or "?" (Downgrading), is its member's prefix.
type rwHold struct{ hold }

// scripts: a read-write lock's holds run hold_downgrade.lua too.
func (rwHold) scripts() (*script.Script, scriptSet) { return holdAcquire, rwScripts }

// holder: a hold is named by its member of the set, "<ask>:<token>".
func (h rwHold) holder(c *Claim) string { return h.ask.(string) + ":" + c.Token }

func (rwHold) what() string { return "a read-write lock" }

// holdDowngrade turns a write hold into a read (Downgrade); a read-write
// lock's holds load it with the semaphore's scripts, so that Downgrade
// finds it before it is timed.
var (
	holdDowngrade = loads("hold_downgrade")
	rwScripts     = holdScripts | setOf(holdDowngrade)
)

// Downgrade turns the write hold c into a read hold, in one step (see
// hold_downgrade.lua), and c into a read's claim (a Downgrading one when
// the outcome is unknown); false if c no longer holds the lock. The caller
// keeps every other use of c out meanwhile. ErrSuperseded: another Lock
// resumed the lease.
func (n Node) Downgrade(ctx context.Context, c *Claim) (bool, error) {
	v, err := as[int64](n.run(ctx, holdDowngrade, hold{}.keys(c), c.Token, c.Channel, n.pub, n.fenceMS, c.Resumer))
	if err != nil && !neverSent(err) && !errors.As(err, new(redis.Error)) && !closed(err) {
		c.SetKind(Downgrading) // sent, and no reply of Redis's (nor a closed client's refusal): either outcome
	}
	if v, err = leaseReply(v, err); v == 1 {
		c.SetKind(Read)
	}
	return v == 1, err
}
