package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// The kinds of a Client's own locks, one chosen when the Client is made:
// the plain lock (acquire.lua, a string at the lock key) whose waiters poll
// unfairly, and the fair lock whose waiters queue (acquire_fair.lua, the
// same string); the reentrant lock is reentrant.go's.
var (
	PlainLock Kind = plainLock{}
	FairLock  Kind = fairLock{}
)

type (
	plainLock struct{ shared }
	fairLock  struct{ plainLock } // (extends, and reads, as a plain lock)
)

// The locks' scripts, and the sets Prepare loads for each kind.
var (
	acquire     = loads("acquire")
	release     = loads("release")
	extend      = loads("extend")
	acquireFair = loads("acquire_fair")
	releaseFair = loads("release_fair")

	plainScripts = setOf(acquire, release, extend, script.Fence)
	fairScripts  = setOf(acquireFair, releaseFair, extend, script.Fence)
)

func (plainLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	// (a waiter: the wake key too, see acquire.lua)
	return n.takeLock(ctx, c, acquire, appendIf(queue, &c.Wake, &c.Lock, &c.Rev), &c.Token, n.ms(ttl))
}

// takeLock runs s, acquire.lua or acquire_fair.lua, once for the lease c
// on keys with args (see Node.acked), and reads its reply: 0 when the lock
// is ours (a campaign's fence, > 0, see campaign.go), {pttl, holder} when
// another lease holds it.
func (n Node) takeLock(ctx context.Context, c *Claim, s *script.Script, keys []any, args ...any) (Grant, error) {
	v, acks, err := n.acked(ctx, s, ErrNotAcquired, keys, args...)
	if err != nil {
		return Grant{}, n.wrongKind(ctx, c.Lock, c.Kind, RedisErr(err))
	}
	if fence, ok := v.(int64); ok && fence >= 0 {
		return n.granted(Grant{Held: true, Fence: fence}, acks)
	}
	if r, ok := v.([]any); ok && len(r) == 2 {
		pttl, ok := r[0].(int64)
		holder, ok2 := r[1].(string)
		if ok && ok2 {
			return Grant{PTTL: pttlOf(pttl), Holder: holder}, nil
		}
	}
	return Grant{}, fmt.Errorf("unexpected reply %v", v)
}

func (plainLock) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.extendLease(ctx, extend, c, ttl, seq, c.Lock, c.Rev)
}

// extendLease runs s, extend.lua or campaign_extend.lua, on keys for the
// lease c; with the clock on, its last argument asks for the server's time
// in the reply (see clock.go).
func (n Node) extendLease(ctx context.Context, s *script.Script, c *Claim, ttl time.Duration, seq int64, keys ...any) (any, int64, error) {
	return n.acked(ctx, s, nil, keys, appendIf(n.clock.on(), 1, c.Token, ttl.Milliseconds(), c.seqArg(seq))...)
}

func (plainLock) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	keys := []any{&c.Lock, &c.Wake, &c.Rev}
	if window == 0 && n.pub == "PUBLISH" { // a clean lease: the token alone (release.lua)
		return n.run(ctx, release, keys, &c.Token)
	}
	return n.run(ctx, release, keys, c.markedArgs(window, &c.Token, n.pub)...)
}

func (plainLock) scripts() (*script.Script, scriptSet) { return acquire, plainScripts }

func (plainLock) what() string { return "a plain lock" }

func (plainLock) shape() *shape { return stringShape }

// stringShape is the lock key of a plain, fair or campaign lease: the
// holder's token (inspect.lua's holder, which stateOf reads), whose lease
// is the key's TTL.
var stringShape = shaped(shape{typ: "string", heldAs: "a lock", holds: holding("a lock (a string), or another program's value"),
	read: func(st *State, _ any, _ int64, extra string) {
		if st.Token != "" { // (an empty string is another program's: no lease)
			st.Leases, st.Extra = []Hold{{Token: st.Token, Left: st.TTL}}, proclaimed(extra, st.Token)
		}
	},
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) func() (any, error) {
		get := p.Get(ctx, key)
		return func() (any, error) {
			if s, err := get.Result(); err != redis.Nil {
				return s, err
			}
			return "", nil
		}
	},
})

// fairArgs are the fair scripts' last argument, what only a contended call
// reads, packed in one string and built once per Node (see
// setFenceWindow): acquire_fair.lua's for a fair lock of the Client's TTL,
// release_fair.lua's (and a campaign's release's).
type fairArgs struct{ acquire, release any }

// fairConf builds acquire_fair.lua's ARGV[3] (and a campaign's acquire's):
// "<qttl> <publish> <fence_ms>".
func (n Node) fairConf(ttl time.Duration) any {
	return fmt.Sprintf("%d %s %v", Window(ttl).Milliseconds(), n.pub, n.fenceMS)
}

func (fairLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	conf := n.fair.acquire
	if ttl != n.ttl {
		conf = n.fairConf(ttl)
	}
	return n.takeLock(ctx, c, acquireFair, []any{&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev, &c.Wake},
		appendIf(queue, 1, &c.Token, n.ms(ttl), conf)...) // (a waiter's 1: it queues up if the lock is taken)
}

func (fairLock) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	return n.run(ctx, releaseFair, []any{&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev},
		c.markedArgs(window, &c.Token, n.fair.release)...)
}

func (fairLock) scripts() (*script.Script, scriptSet) { return acquireFair, fairScripts }

// anyBackend: a plain lock's commands are plain enough for a quorum, and
// for a backend without scripts; a fair lock's queue needs its scripts.
func (plainLock) anyBackend() bool { return true }

func (fairLock) anyBackend() bool { return false }
