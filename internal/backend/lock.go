package backend

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// The kinds of a Client's own locks, one chosen when the Client is made:
// the plain lock (acquire.lua, a string at the lock key) whose waiters poll
// unfairly, the fair lock whose waiters queue (acquire_fair.lua, the same
// string), and the reentrant lock (acquire_reentrant.lua: a hash of the
// owner and its holds at the lock key).
var (
	PlainLock     Kind = plainLock{}
	FairLock      Kind = fairLock{}
	ReentrantLock Kind = reentrantLock{}
)

type (
	plainLock     struct{ shared }
	fairLock      struct{ plainLock } // (extends, and reads, as a plain lock)
	reentrantLock struct{ shared }
)

// The locks' scripts, and the sets Prepare loads for each kind.
var (
	acquire          = loads("acquire")
	release          = loads("release")
	extend           = loads("extend")
	acquireFair      = loads("acquire_fair")
	releaseFair      = loads("release_fair")
	acquireReentrant = loads("acquire_reentrant")
	releaseReentrant = loads("release_reentrant")
	extendReentrant  = loads("extend_reentrant")

	plainScripts     = setOf(acquire, release, extend, script.Fence)
	fairScripts      = setOf(acquireFair, releaseFair, extend, script.Fence)
	reentrantScripts = setOf(acquireReentrant, releaseReentrant, extendReentrant, script.Fence)
)

func (plainLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	if queue { // (a waiter: the wake key too, see acquire.lua)
		v, acks, err := n.acked(ctx, acquire, ErrNotAcquired, []any{&c.Lock, &c.Rev, &c.Wake}, &c.Token, n.ms(ttl), wakeMS)
		return n.lockGrant(ctx, c, v, acks, err)
	}
	v, acks, err := n.acked(ctx, acquire, ErrNotAcquired, []any{&c.Lock, &c.Rev}, &c.Token, n.ms(ttl))
	return n.lockGrant(ctx, c, v, acks, err)
}

func (plainLock) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.extendLease(ctx, c, ttl, seq, c.Lock, c.Rev)
}

// extendLease runs extend.lua on keys for the lease c; with the clock on,
// its last argument asks for the server's time in the reply (see clock.go).
func (n Node) extendLease(ctx context.Context, c *Claim, ttl time.Duration, seq int64, keys ...any) (any, int64, error) {
	if n.clock.on() {
		return n.acked(ctx, extend, nil, keys, c.Token, ttl.Milliseconds(), c.seqArg(seq), 1)
	}
	return n.acked(ctx, extend, nil, keys, c.Token, ttl.Milliseconds(), c.seqArg(seq))
}

func (plainLock) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	keys := []any{&c.Lock, &c.Wake, &c.Rev}
	if window == 0 { // a clean lease: two arguments (release.lua)
		return n.run(ctx, release, keys, &c.Token, n.pub)
	}
	return n.run(ctx, release, keys, c.resumerArg([]any{&c.Token, n.pub, window})...)
}

func (plainLock) scripts() (*script.Script, scriptSet) { return acquire, plainScripts }

func (plainLock) what() string { return "a plain lock" }

func (plainLock) shape() *shape { return &stringShape }

// stringShape is the lock key of a plain, fair or campaign lease: the
// holder's token (inspect.lua's holder, which stateOf reads), whose lease
// is the key's TTL.
var stringShape = shape{typ: "string", holds: holding("a lock (a string), or another program's value"),
	read: func(st *State, _ any, _ int64) {
		if st.Token != "" { // (an empty string is another program's: no lease)
			st.Plain = []Hold{{Token: st.Token, Left: st.TTL}}
		}
	},
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) redis.Cmder {
		return p.Do(ctx, "GET", key)
	},
}

func (fairLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	conf := n.acqConf // (built once for the Client's TTL)
	if ttl != n.ttl {
		conf = n.fairConf(ttl, false)
	}
	v, acks, err := n.acked(ctx, acquireFair, ErrNotAcquired, []any{&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev, &c.Wake},
		&c.Token, n.ms(ttl), flag(queue), conf)
	return n.lockGrant(ctx, c, v, acks, err)
}

func (fairLock) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	return n.run(ctx, releaseFair, []any{&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev},
		c.resumerArg([]any{&c.Token, window, n.relConf})...)
}

func (fairLock) scripts() (*script.Script, scriptSet) { return acquireFair, fairScripts }

func (reentrantLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, _ bool) (Grant, error) {
	r, acks, err := n.acked(ctx, acquireReentrant, ErrNotAcquired, []any{c.Lock, c.Fence, c.Rev}, c.Owner, c.Token, ttl.Milliseconds(), n.fenceMS)
	v, err := as[[]any](r, err)
	if err != nil {
		return Grant{}, n.wrongKind(ctx, c.Lock, c.Kind, RedisErr(err))
	}
	switch {
	case len(v) == 3 && v[0] == int64(1): // {1, fence, holds}
		fence, _ := v[1].(int64)
		holds, _ := v[2].(int64)
		return n.granted(Grant{Held: true, Fence: fence, Holds: holds}, acks)
	case len(v) == 5 && v[0] == int64(0): // {0, pttl, 0, owner, hold}
		pttl, _ := v[1].(int64)
		owner, _ := v[3].(string)
		holder, _ := v[4].(string)
		return Grant{PTTL: pttlOf(pttl), Owner: owner, Holder: holder}, nil
	}
	return Grant{}, fmt.Errorf("unexpected reply %v", v)
}

func (reentrantLock) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.acked(ctx, extendReentrant, nil, []any{c.Lock, c.Rev}, c.Owner, c.Token, ttl.Milliseconds(), c.seqArg(seq))
}

func (reentrantLock) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	return n.run(ctx, releaseReentrant, []any{c.Lock, c.Rev}, c.Owner, c.Token, c.Channel, n.pub, window)
}

func (reentrantLock) scripts() (*script.Script, scriptSet) {
	return acquireReentrant, reentrantScripts
}

func (reentrantLock) holder(c *Claim) string { return c.Owner }

func (reentrantLock) what() string { return "a reentrant lock" }

func (reentrantLock) shape() *shape { return &hashShape }

// hashShape is a reentrant lock's key: its owner and the owner's holds.
var hashShape = shape{typ: "hash", holds: holding("a reentrant lock (a hash), or another program's value"),
	read: func(st *State, fields any, now int64) { st.Owners, st.Holding = reentrantOwners(fields, now) },
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) redis.Cmder {
		return p.HGetAll(ctx, key)
	},
}

// reentrantOwners reads a reentrant lock's hash (see acquire_reentrant.lua)
// from a flat HGETALL reply: its owner and the owner's live holds (their
// deadlines are on the server's clock, now), and the holding that
// force_release.lua names.
func reentrantOwners(reply any, now int64) ([]Owner, string) {
	pairs, _ := reply.([]any)
	var (
		o     Owner
		fence string
	)
	for i := 0; i+1 < len(pairs); i += 2 {
		field, _ := pairs[i].(string)
		value, _ := pairs[i+1].(string)
		switch {
		case field == "owner":
			o.ID = value
		case field == "fence":
			fence = value
		case strings.HasPrefix(field, "h:"):
			deadline, _ := strconv.ParseInt(value, 10, 64)
			if left := deadline - now; left > 0 {
				o.Holds = append(o.Holds, Hold{Token: field[2:], Left: time.Duration(left) * time.Millisecond})
			}
		}
	}
	if o.ID == "" {
		return nil, ""
	}
	return []Owner{o}, o.ID + " " + fence
}
