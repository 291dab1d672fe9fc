package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// lock is the Node's plain lock (acquire.lua, a string at the lock key),
// or with Node.fair its fair lock, whose waiters queue (acquire_fair.lua).
type lock struct{}

// reentrantLock is the Node's reentrant lock (acquire_reentrant.lua): a
// hash of the owner and its holds at the lock key.
type reentrantLock struct{}

func (lock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	var (
		cmd  *redis.Cmd
		acks int64
	)
	switch q := queueFlag(queue); {
	case n.replicas > 0 && n.fair:
		cmd, acks = n.acked(ctx, script.AcquireFair, []string{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev, c.Wake},
			c.Token, ttl.Milliseconds(), q, n.acquireConf(ttl, false))
	case n.replicas > 0 && queue:
		cmd, acks = n.acked(ctx, script.Acquire, []string{c.Lock, c.Rev, c.Wake}, c.Token, ttl.Milliseconds(), wakeMS)
	case n.replicas > 0:
		cmd, acks = n.acked(ctx, script.Acquire, []string{c.Lock, c.Rev}, c.Token, ttl.Milliseconds())
	case n.fair:
		cmd, acks = n.evalsha(ctx, script.AcquireFair, []any{"evalsha", acquireFairSHA, 6,
			&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev, &c.Wake, &c.Token, n.ms(ttl), q, n.acquireConf(ttl, false)}), -1
	case queue: // (a waiter: the wake key too, see acquire.lua)
		cmd, acks = n.evalsha(ctx, script.Acquire, []any{"evalsha", acquireSHA, 3, &c.Lock, &c.Rev, &c.Wake, &c.Token, n.ms(ttl), wakeMS}), -1
	default:
		cmd, acks = n.evalsha(ctx, script.Acquire, []any{"evalsha", acquireSHA, 2, &c.Lock, &c.Rev, &c.Token, n.ms(ttl)}), -1
	}
	return n.lockGrant(ctx, c, cmd, acks, "a plain lock")
}

func (lock) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (*redis.Cmd, int64) {
	return n.acked(ctx, script.Extend, []string{c.Lock, c.Rev}, c.Token, ttl.Milliseconds(), c.seqArg(seq))
}

func (lock) release(ctx context.Context, n Node, c *Claim, window int64) *redis.Cmd {
	if n.fair {
		return n.evalsha(ctx, script.ReleaseFair, c.resumerArg([]any{"evalsha", releaseFairSHA, 5,
			&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev, &c.Token, window, n.releaseConf(false)}))
	}
	if window == 0 { // a clean lease: two arguments (release.lua)
		return n.evalsha(ctx, script.Release, []any{"evalsha", releaseSHA, 3, &c.Lock, &c.Wake, &c.Rev, &c.Token, n.pubA})
	}
	return n.evalsha(ctx, script.Release, c.resumerArg([]any{"evalsha", releaseSHA, 3, &c.Lock, &c.Wake, &c.Rev, &c.Token, n.pubA, window}))
}

func (lock) scripts(l leaseScripts) (*redis.Script, scriptSet) { return l.lockFirst, l.lock }

func (lock) member(string) string { return "" }

func (lock) shape() string { return "string" }

func (reentrantLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, _ bool) (Grant, error) {
	cmd, acks := n.acked(ctx, script.AcquireReentrant, []string{c.Lock, c.Fence, c.Rev}, c.Owner, c.Token, ttl.Milliseconds(), n.fenceMS)
	v, err := cmd.Slice()
	if err != nil {
		if err = RedisErr(err); errors.Is(err, ErrWrongType) {
			err = n.wrongKind(ctx, c.Lock, "a reentrant lock", err)
		}
		return Grant{}, err
	}
	var n3 [3]int64
	for i := range min(len(v), 3) {
		n3[i], _ = v[i].(int64)
	}
	switch {
	case len(v) == 3 && n3[0] == 1:
		if acks >= 0 && acks < int64(n.replicas) {
			return Grant{Undo: true}, n.ackUndone(acks)
		}
		return Grant{Held: true, Fence: n3[1], Holds: n3[2]}, nil
	case len(v) == 5 && n3[0] == 0:
		owner, _ := v[3].(string)
		holder, _ := v[4].(string)
		return Grant{PTTL: pttlOf(n3[1]), Owner: owner, Holder: holder}, nil
	}
	return Grant{}, fmt.Errorf("unexpected reply %v", v)
}

func (reentrantLock) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (*redis.Cmd, int64) {
	return n.acked(ctx, script.ExtendReentrant, []string{c.Lock, c.Rev}, c.Owner, c.Token, ttl.Milliseconds(), c.seqArg(seq))
}

func (reentrantLock) release(ctx context.Context, n Node, c *Claim, window int64) *redis.Cmd {
	return n.run(ctx, script.ReleaseReentrant, []string{c.Lock, c.Rev}, c.Owner, c.Token, c.Channel, n.pub, window)
}

func (reentrantLock) scripts(l leaseScripts) (*redis.Script, scriptSet) { return l.lockFirst, l.lock }

func (reentrantLock) member(string) string { return "" }

func (reentrantLock) shape() string { return "hash" }
