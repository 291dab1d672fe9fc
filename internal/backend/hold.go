package backend

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// hold is what a semaphore's permits and a read-write lock's holds (see
// rwmutex.go) share: the hold scripts (hold_*.lua), told apart by what the
// acquisition asks for, their keys and the hold's members; w is the
// permits the hold has (a read-write lock's: 1).
type hold struct {
	shared // (a permit's member is its token: no Claim.Holder)
	w      int
	ask    any  // what the acquisition asks for (hold_acquire.lua's ARGV[8]): a semaphore's N, or a read-write hold's "r", "w" or "?"
	sized  bool // a semaphore's: its keys end with its size kept in Redis (sizeKey)
}

func (h hold) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.acked(ctx, holdExtend, nil, []any{c.Lock, c.Rev}, appendIf(h.w > 1, h.w, c.HolderID(), ttl.Milliseconds(), c.seqArg(seq))...)
}

func (hold) shape() *shape { return zsetShape }

// keys returns the keys of the hold h's acquisition and release for c, a
// semaphore's size kept in Redis last.
func (h hold) keys(c *Claim) []any {
	if h.sized {
		return []any{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev, sizeKey(&c.Keys)}
	}
	return []any{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev}
}

// acquire runs hold_acquire.lua once for c, the hold h, which asks for
// h.ask.
func (h hold) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	r, acks, err := n.acked(ctx, holdAcquire, ErrNotAcquired, h.keys(c),
		appendIf(h.w > 1, h.w, c.Token, ttl.Milliseconds(), flag(queue), Window(ttl).Milliseconds(), c.Channel, n.pub, n.fenceMS, h.ask)...)
	v, err := as[int64](r, err) // >= 0 granted, else -2 - the PTTL of the hold that keeps it out
	if err != nil {
		return Grant{}, n.wrongKind(ctx, c.Lock, c.Kind, RedisErr(err))
	}
	if v >= 0 {
		return n.granted(Grant{Held: true}, acks)
	}
	return Grant{PTTL: pttlOf(-2 - v)}, nil
}

// release sends hold_release.lua for c, the hold h.
func (h hold) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	a := appendIf(h.w > 1 || window > 0, h.w, c.HolderID(), c.Channel, n.pub, n.fenceMS) // (ARGV[5], before what a marked lease passes)
	return n.run(ctx, holdRelease, h.keys(c), c.markedArgs(window, a...)...)
}

// The scripts of a semaphore's permits and of a read-write lock's holds
// (hold_*.lua).
var (
	holdAcquire = loads("hold_acquire")
	holdRelease = loads("hold_release")
	holdExtend  = loads("hold_extend")

	holdScripts = setOf(holdAcquire, holdRelease, holdExtend, script.Fence)
)

// zsetShape is the key of a semaphore's permits or of a read-write lock's
// holds (whose members are "r:<token>" or "w:<token>": see rwmutex.go).
var zsetShape = shaped(shape{typ: "zset", heldAs: "a semaphore or a read-write lock",
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
	read: func(st *State, members any, now int64, _ string) {
		hs, holding := permitsOf(members, now)
		st.Leases = rwHolds(hs)
		st.Holding, st.ended = holding, holding == "" // (permits that just ended)
	},
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) func() (any, error) {
		zs := p.ZRangeWithScores(ctx, key, 0, -1) // (lowest score first)
		return func() (any, error) {
			var v []any
			for _, z := range zs.Val() {
				v = append(v, fmt.Sprint(z.Member), strconv.FormatFloat(z.Score, 'f', -1, 64))
			}
			return v, zs.Err()
		}
	},
})

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
			ps = append(ps, Hold{Token: token, Left: time.Duration(left) * time.Millisecond, Kind: Permit, N: 1})
		}
	}
	tokens := make([]string, len(ps))
	for i := range ps {
		ps[i].N += extra[ps[i].Token]
		tokens[i] = ps[i].Token
	}
	return ps, strings.Join(tokens, " ")
}

// rwHolds returns the members of a sorted set (as permitsOf read them) as
// a semaphore's permits, or as a read-write lock's holds: each turned into
// its token, its Kind Write if its member is "w:<token>", else Read. A
// semaphore's tokens never have ':' as their second character; a
// read-write lock's members always do, so a set with any member that does
// not (another program's) is read as permits.
func rwHolds(hs []Hold) []Hold {
	if slices.ContainsFunc(hs, func(h Hold) bool { return len(h.Token) < 2 || h.Token[1] != ':' }) {
		return hs
	}
	for i, h := range hs {
		hs[i].Kind, hs[i].Token = Read, h.Token[2:]
		if h.Token[0] == 'w' {
			hs[i].Kind = Write
		}
	}
	return hs
}
