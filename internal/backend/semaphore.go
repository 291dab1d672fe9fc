package backend

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/script"
	"github.com/redis/go-redis/v9"
)

// A semaphore (see lib.lua) is a sorted set at the lock key: one member per
// permit, scored by its deadline. A permit is a lease like a plain lock's:
// its own token, marker key, extensions and release; its waiters queue as a
// fair lock's do. Extend, Release, Fence and Undo serve permits through the
// same methods as locks, by the claim's Permits.

// acquirePermit runs the semaphore's acquire script once (see Acquire).
func (n Node) acquirePermit(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	q := 0
	if queue {
		q = 1
	}
	cmd, acks := n.acked(ctx, script.SemAcquire, []string{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev},
		c.Token, ttl.Milliseconds(), q, QueueTTL(ttl).Milliseconds(), c.Channel, n.pub, n.fenceMS, c.Permits)
	return n.queuedGrant(cmd, acks)
}

// queuedGrant reads the reply of sem_acquire.lua or rw_acquire.lua, sent
// with acks replicas' acknowledgements (-1 without replica ack): >= 0
// granted, else -2 - the PTTL of the hold that keeps it out.
func (n Node) queuedGrant(cmd *redis.Cmd, acks int64) (Grant, error) {
	v, err := cmd.Int64()
	if err != nil {
		return Grant{}, RedisErr(err)
	}
	if v >= 0 {
		if acks >= 0 && acks < int64(n.replicas) {
			return Grant{Undo: true}, n.ackUndone(acks)
		}
		return Grant{Held: true}, nil
	}
	return Grant{PTTL: pttlOf(-2 - v)}, nil
}

// permitsOf reads a semaphore's live permits from a flat ZRANGE … WITHSCORES
// reply: tokens and deadlines (ms on the server's clock, now). Its holding,
// which force_release.lua compares, is their tokens.
func permitsOf(reply any, now int64) ([]Hold, string) {
	pairs, _ := reply.([]any)
	var ps []Hold
	for i := 0; i+1 < len(pairs); i += 2 {
		token, _ := pairs[i].(string)
		score, _ := pairs[i+1].(string)
		deadline, _ := strconv.ParseFloat(score, 64)
		if left := int64(deadline) - now; left > 0 {
			ps = append(ps, Hold{Token: token, Left: time.Duration(left) * time.Millisecond})
		}
	}
	tokens := make([]string, len(ps))
	for i, p := range ps {
		tokens[i] = p.Token
	}
	return ps, strings.Join(tokens, " ")
}
