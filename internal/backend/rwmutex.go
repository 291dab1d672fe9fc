package backend

import (
	"context"
	"time"

	"github.com/dlockio/dlock/internal/script"
)

// A read-write lock (see lib.lua) is a sorted set at the lock key, as a
// semaphore is: one member per hold, "r:<token>" for a read and
// "w:<token>" for a write, scored by its deadline. Each hold is a lease
// like a plain lock's, with its own token and marker key; its waiters
// queue as a fair lock's do. Extend and Fence serve holds through the
// semaphore's and the lock's scripts, given the hold's member; Release and
// Undo through rw_release.lua.

// acquireRW runs the read-write lock's acquire script once (see Acquire).
func (n Node) acquireRW(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	q := 0
	if queue {
		q = 1
	}
	cmd, acks := n.acked(ctx, script.RWAcquire, []string{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev},
		c.Token, c.RW, ttl.Milliseconds(), q, QueueTTL(ttl).Milliseconds(), c.Channel, n.pub, n.fenceMS)
	return n.queuedGrant(cmd, acks)
}

// rwHolds reports whether the members of a sorted set (as permitsOf read
// them) are a read-write lock's holds, and if so turns each into its
// token, marking the write. A semaphore's tokens never have ':' as their
// second character; a read-write lock's members always do.
func rwHolds(hs []Hold) bool {
	if len(hs) == 0 || len(hs[0].Token) < 2 || hs[0].Token[1] != ':' {
		return false
	}
	for i, h := range hs {
		hs[i].Write = h.Token[0] == 'w'
		hs[i].Token = h.Token[2:]
	}
	return true
}
