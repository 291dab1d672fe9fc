package backend

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is what a lease is, and the one place a Node learns how to serve
// it: the scripts that take, extend and end it, how their replies read,
// and which scripts Prepare loads for it. Each kind is a type in a file of
// its own: a Client's own locks (lock.go: plain, fair, reentrant), a
// semaphore's permits (semaphore.go), a read-write lock's holds
// (rwmutex.go) and leadership campaigns (campaign.go). Every Claim names
// its Kind. Each backend says which kinds it carries (Backend.Carries),
// and still refuses a claim of another on its own.
type Kind interface {
	// acquire runs the kind's acquire script once (see Node.Acquire).
	acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error)
	// extend sends the kind's extension (see Node.Extend), whose reply is
	// 1 if it extended, and the replicas that acknowledged it (-1 without
	// replica ack).
	extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (*redis.Cmd, int64)
	// release sends the kind's release (see Node.Release), whose reply is
	// 1 if the lease held the lock; window is the lease's marker's life
	// in ms.
	release(ctx context.Context, n Node, c *Claim, window int64) *redis.Cmd
	// scripts returns the script the kind's acquisition runs and the set
	// of those its leases run.
	scripts() (first *redis.Script, need scriptSet)
	// member returns the lease's member in the kind's sorted set, given
	// its token ("" if it has none: see Claim.Member).
	member(token string) string
	// shape is the Redis type of the kind's lock key, for the scripts
	// shared by kinds (fence.lua, raise_fence.lua), which so need not
	// probe it.
	shape() string
}

// Why a backend does not carry a Kind (Backend.Carries, Backend.Op).
var (
	ErrOverQuorum   = errors.New("a quorum carries only its nodes' own locks")
	ErrNeedsScripts = errors.New("only plain locks run without scripts")
)

// plainOnly is the Carries of a backend that serves plain locks only: nil
// for PlainLock, else why.
func plainOnly(k Kind, why error) error {
	if k != PlainLock {
		return why
	}
	return nil
}

// Carries serves every Kind (see Backend).
func (Node) Carries(Kind) error { return nil }

// queueFlag is the queue argument of the queued kinds' acquire scripts.
func queueFlag(queue bool) int { return flag(queue) }

// flag is b as a script's argument: 1 or 0.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
