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
// same methods as locks, by the claim's Kind, Permits(N).

// Permits returns the kind of a permit of a semaphore whose holder asks
// with N = permits (> 0).
func Permits(permits int) Kind { return holdKind{n: permits, w: 1} }

// PermitsAtOnce returns the kind of a hold of w permits at once (0 < w ≤
// permits) of a semaphore whose holder asks with N = permits: one lease, w
// members of the set.
func PermitsAtOnce(permits, w int) Kind { return holdKind{n: permits, w: w} }

// holdKind is a hold of a sorted-set kind, served by hold_*.lua: a
// read-write lock's read or write (rw "r", "w" or "?", see rwmutex.go,
// and w 1), or else a permit of a semaphore whose holder asks with N = n,
// w permits at once.
type holdKind struct {
	rw   string
	n, w int
}

func (h holdKind) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	what := any(h.rw) // (hold_acquire.lua's ARGV[8]: what is asked for)
	if h.rw == "" {
		what = h.n
	}
	cmd, acks := n.acked(ctx, holdAcquire, h.keys(c),
		h.args(c.Token, ttl.Milliseconds(), flag(queue), Window(ttl).Milliseconds(), c.Channel, n.pub, n.fenceMS, what)...)
	return n.queuedGrant(cmd, acks)
}

func (h holdKind) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (*redis.Cmd, int64) {
	return n.acked(ctx, holdExtend, []string{c.Lock, c.Rev}, h.args(c.HolderID(), ttl.Milliseconds(), c.seqArg(seq))...)
}

func (h holdKind) release(ctx context.Context, n Node, c *Claim, window int64) *redis.Cmd {
	a := h.args(c.HolderID(), c.Token, c.Channel, n.pub, window, n.fenceMS)
	if c.Resumer != "" && h.w == 1 {
		a = append(a, 1) // (ARGV[7], before the resumer id)
	}
	return n.run(ctx, holdRelease, h.keys(c), c.resumerArg(a)...)
}

// keys returns the keys of the hold's acquisition and release: a
// semaphore's last is its size kept in Redis.
func (h holdKind) keys(c *Claim) []string {
	if h.rw != "" {
		return []string{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev}
	}
	return []string{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev, c.SizeKey()}
}

// args returns a script's arguments, followed by the hold's permits when
// it has more than one (the scripts' last argument, 1 when absent).
func (h holdKind) args(a ...any) []any {
	if h.w > 1 {
		return append(a, h.w)
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

// scripts: a read-write lock's holds run hold_downgrade.lua too.
func (h holdKind) scripts() (*script.Script, scriptSet) {
	if h.rw != "" {
		return holdAcquire, rwScripts
	}
	return holdAcquire, holdScripts
}

// member is a read-write lock's hold's member of the set, "<rw>:<token>";
// a permit's is its token, which Claim.Member leaves out ("").
func (h holdKind) member(token string) string {
	if h.rw == "" {
		return ""
	}
	return h.rw + ":" + token
}

func (h holdKind) what() string {
	if h.rw == "" {
		return "a semaphore's permit"
	}
	return "a read-write lock's hold"
}

func (holdKind) fenceWindow(n Node, _ time.Duration) any { return n.fenceMS }

func (holdKind) shape() *shape { return &zsetShape }

// zsetShape is the key of a semaphore's permits or of a read-write lock's
// holds (whose members are "r:<token>" or "w:<token>": see rwmutex.go).
var zsetShape = shape{typ: "zset",
	holds: func(ctx context.Context, n Node, key string) (string, bool) {
		first, err := n.rdb.Do(ctx, "zrange", key, 0, 0).StringSlice()
		switch {
		case err != nil:
			return "", false
		case len(first) == 1 && len(first[0]) > 1 && first[0][1] == ':':
			return "a read-write lock (a sorted set)", true
		}
		return "a semaphore (a sorted set), or another program's value", true
	},
	slot: 4,
	read: func(st *State, members any, now int64) {
		st.Permits, st.Holding = permitsOf(members, now)
		st.RW = rwHolds(st.Permits)
		st.ended = st.Holding == "" // (permits that just ended)
	},
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) func() (any, error) {
		z := p.ZRangeWithScores(ctx, key, 0, -1)
		return func() (any, error) { return flatZset(z) }
	},
}

// Permits runs permits.lua on the semaphore k: op "get", "set" (to v,
// unless a size is stored), "unset" or "add" (v); size is the caller's N,
// the size while none is stored.
func (n Node) Permits(ctx context.Context, k *Keys, op string, v, size int) (PermitSize, error) {
	r, err := n.run(ctx, permits, []string{k.Lock, k.SizeKey(), k.Queue}, op, v, size, k.Channel, n.pub).Int64Slice()
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

// queuedGrant reads the reply of hold_acquire.lua, sent
// with acks replicas' acknowledgements (-1 without replica ack): >= 0
// granted, else -2 - the PTTL of the hold that keeps it out.
func (n Node) queuedGrant(cmd *redis.Cmd, acks int64) (Grant, error) {
	v, err := cmd.Int64()
	if err != nil {
		return Grant{}, RedisErr(err)
	}
	if v >= 0 {
		return n.granted(Grant{Held: true}, acks)
	}
	return Grant{PTTL: pttlOf(-2 - v)}, nil
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
