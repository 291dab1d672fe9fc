package backend

import (
	"context"
	"fmt"
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
// same methods as locks, by the claim's Kind, Permits(N, 1).

// Permits returns the kind of a hold of w permits at once (0 < w ≤
// permits; 1: a permit) of a semaphore whose holder asks with N = permits:
// one lease, w members of the set.
func Permits(permits, w int) Kind { return permit{hold{w: w}, permits} }

// permit is a hold of w permits of a semaphore whose holder asks with N = n.
type permit struct {
	hold
	n int
}

func (p permit) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	return p.take(ctx, n, c, ttl, queue, p.n, c.holdKeys(c.SizeKey()))
}

func (p permit) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	return p.give(ctx, n, c, window, c.holdKeys(c.SizeKey()))
}

func (permit) scripts() (*script.Script, scriptSet) { return holdAcquire, holdScripts }

func (permit) what() string { return "a semaphore's permit" }

// hold is what a semaphore's permits and a read-write lock's holds (see
// rwmutex.go) share: the hold scripts (hold_*.lua), told apart by what the
// acquisition asks for, their keys and the hold's members; w is the
// permits the hold has (a read-write lock's: 1).
type hold struct {
	shared // (a permit's member is its token, which Claim.Member leaves out)
	w      int
}

func (h hold) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.acked(ctx, holdExtend, []any{c.Lock, c.Rev}, withPermits(h.w, c.HolderID(), ttl.Milliseconds(), c.seqArg(seq))...)
}

func (hold) shape() *shape { return &zsetShape }

// holdKeys returns the keys of a hold's acquisition and release, more
// last (a semaphore's size kept in Redis).
func (c *Claim) holdKeys(more ...any) []any {
	return append([]any{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev}, more...)
}

// take runs hold_acquire.lua once for c, the hold h on keys, which asks
// for what (its ARGV[8]: a semaphore's N, or "r" or "w").
func (h hold) take(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool, what any, keys []any) (Grant, error) {
	r, acks, err := n.acked(ctx, holdAcquire, keys,
		withPermits(h.w, c.Token, ttl.Milliseconds(), flag(queue), Window(ttl).Milliseconds(), c.Channel, n.pub, n.fenceMS, what)...)
	v, err := as[int64](r, err) // >= 0 granted, else -2 - the PTTL of the hold that keeps it out
	if err != nil {
		return Grant{}, RedisErr(err)
	}
	if v >= 0 {
		return n.granted(Grant{Held: true}, acks)
	}
	return Grant{PTTL: pttlOf(-2 - v)}, nil
}

// give sends hold_release.lua for c, the hold h on keys.
func (h hold) give(ctx context.Context, n Node, c *Claim, window int64, keys []any) (any, error) {
	a := []any{c.HolderID(), c.Token, c.Channel, n.pub, window, n.fenceMS}
	if h.w > 1 || c.Resumer != "" {
		a = append(a, h.w) // (ARGV[7], before the resumer id)
	}
	return n.run(ctx, holdRelease, keys, c.resumerArg(a)...)
}

// withPermits returns a hold script's arguments a, followed by the hold's
// permits w when more than one (the scripts' last argument, 1 when absent).
func withPermits(w int, a ...any) []any {
	if w > 1 {
		return append(a, w)
	}
	return a
}

// The scripts of a semaphore's permits and of a read-write lock's holds
// (hold_*.lua), and the semaphore's permits.lua.
var (
	holdAcquire = loads("hold_acquire")
	holdRelease = loads("hold_release")
	holdExtend  = loads("hold_extend")
	permits     = loads("permits")

	holdScripts = setOf(holdAcquire, holdRelease, holdExtend, script.Fence)
)

// zsetShape is the key of a semaphore's permits or of a read-write lock's
// holds (whose members are "r:<token>" or "w:<token>": see rwmutex.go).
var zsetShape = shape{typ: "zset",
	holds: func(ctx context.Context, n Node, key string) (string, bool) {
		first, err := as[[]any](n.do(ctx, "zrange", key, 0, 0))
		if err != nil {
			return "", false
		}
		if len(first) == 1 {
			if m, _ := first[0].(string); len(m) > 1 && m[1] == ':' {
				return "a read-write lock (a sorted set)", true
			}
		}
		return "a semaphore (a sorted set), or another program's value", true
	},
	read: func(st *State, members any, now int64) {
		hs, holding := permitsOf(members, now)
		st.Permits, st.RWHolds = rwHolds(hs)
		st.Holding, st.ended = holding, holding == "" // (permits that just ended)
	},
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) redis.Cmder {
		return p.ZRangeWithScores(ctx, key, 0, -1)
	},
}

// Permits runs permits.lua on the semaphore k: op "get", "set" (to v,
// unless a size is stored), "unset" or "add" (v); size is the caller's N,
// the size while none is stored.
func (n Node) Permits(ctx context.Context, k *Keys, op string, v, size int) (PermitSize, error) {
	r, err := ints(n.run(ctx, permits, []any{k.Lock, k.SizeKey(), k.Queue}, op, v, size, k.Channel, n.pub))
	if err != nil {
		return PermitSize{}, RedisErr(err)
	}
	if len(r) != 3 {
		return PermitSize{}, fmt.Errorf("permits.lua: unexpected reply %v", r)
	}
	return PermitSize{Size: int(r[0]), Held: int(r[1]), Changed: r[2] == 1}, nil
}

// PermitSize is a semaphore's size as permits.lua read or left it.
type PermitSize struct {
	Size, Held int  // the size, and the permits held
	Changed    bool // the call changed the stored size
}

// permitsOf reads a semaphore's live permits from a flat ZRANGE … WITHSCORES
// reply: tokens and deadlines (ms on the server's clock, now), a hold of w
// permits at once being its token and "<token> 2" to "<token> w" (Hold.N
// counts them). Its holding, which force_release.lua compares, is the
// holds' tokens.
func permitsOf(reply any, now int64) ([]Hold, string) {
	pairs, _ := reply.([]any)
	var ps []Hold
	extra := map[string]int{}
	for i := 0; i+1 < len(pairs); i += 2 {
		token, _ := pairs[i].(string)
		score, _ := pairs[i+1].(string)
		deadline, _ := strconv.ParseFloat(score, 64)
		if left := int64(deadline) - now; left > 0 {
			if base, _, ok := strings.Cut(token, " "); ok {
				extra[base]++
				continue
			}
			ps = append(ps, Hold{Token: token, Left: time.Duration(left) * time.Millisecond, N: 1})
		}
	}
	tokens := make([]string, len(ps))
	for i := range ps {
		ps[i].N += extra[ps[i].Token]
		tokens[i] = ps[i].Token
	}
	return ps, strings.Join(tokens, " ")
}
