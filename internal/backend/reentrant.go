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

// ReentrantLock is the kind of a Client's locks made WithReentrant: a hash
// at the lock key (acquire_reentrant.lua) of the owner (Claim.Holder, what
// the lock names as its holder) and one field per hold, each a lease of
// its own. A refusal names the holding owner (its Extra, an Owner).
var ReentrantLock Kind = reentrantLock{}

type reentrantLock struct{ shared }

var (
	acquireReentrant = loads("acquire_reentrant")
	releaseReentrant = loads("release_reentrant")
	extendReentrant  = loads("extend_reentrant")

	reentrantScripts = setOf(acquireReentrant, releaseReentrant, extendReentrant, script.Fence)
)

func (reentrantLock) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, _ bool) (Grant, error) {
	r, acks, err := n.acked(ctx, acquireReentrant, ErrNotAcquired, []any{c.Lock, c.Fence, c.Rev}, c.Holder, c.Token, ttl.Milliseconds(), n.fenceMS)
	v, err := as[[]any](r, err)
	if err != nil {
		return Grant{}, n.wrongKind(ctx, c.Lock, c.Kind, RedisErr(err))
	}
	switch {
	case len(v) == 3 && v[0] == int64(1): // {1, fence, holds}
		fence, _ := v[1].(int64)
		return n.granted(Grant{Held: true, Fence: fence}, acks)
	case len(v) == 5 && v[0] == int64(0): // {0, pttl, 0, owner, hold}
		pttl, _ := v[1].(int64)
		owner, _ := v[3].(string)
		holder, _ := v[4].(string)
		g := Grant{PTTL: pttlOf(pttl), Holder: holder}
		if owner != "" { // (another program's hash may name none: the refusal then names no owner)
			g.Extra = Owner(owner)
		}
		return g, nil
	}
	return Grant{}, fmt.Errorf("unexpected reply %v", v)
}

func (reentrantLock) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.acked(ctx, extendReentrant, nil, []any{c.Lock, c.Rev}, c.Holder, c.Token, ttl.Milliseconds(), c.seqArg(seq))
}

func (reentrantLock) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	return n.run(ctx, releaseReentrant, []any{c.Lock, c.Rev}, c.Holder, c.Token, c.Channel, n.pub, window)
}

func (reentrantLock) scripts() (*script.Script, scriptSet) { return acquireReentrant, reentrantScripts }

// holder: a hold is named by its owner, which its Claim's maker sets as
// its Holder, and which stays.
func (reentrantLock) holder(c *Claim) string { return c.Holder }

func (reentrantLock) what() string { return "a reentrant lock" }

func (reentrantLock) shape() *shape { return hashShape }

// Owner is the owner of a reentrant lock, "<client>/<owner>": the Extra of
// its State (whose Leases are its live holds), and of a refusal.
type Owner string

// Holder: the owner holds the lock; each hold shows its own metadata.
func (o Owner) Holder(meta string) (string, string) { return string(o), meta }

// hashShape is a reentrant lock's key: its owner and the owner's holds.
var hashShape = shaped(shape{typ: "hash", heldAs: "a reentrant lock", holds: holding("a reentrant lock (a hash), or another program's value"),
	// read reads the hash (see acquire_reentrant.lua) from a flat HGETALL
	// reply: its owner and the owner's live holds (their deadlines are on
	// the server's clock, now), and the holding that force_release.lua
	// names.
	read: func(st *State, fields any, now int64, _ string) {
		pairs, _ := fields.([]any)
		var (
			owner, fence string
			holds        []Hold
		)
		for i := 0; i+1 < len(pairs); i += 2 {
			field, _ := pairs[i].(string)
			value, _ := pairs[i+1].(string)
			switch {
			case field == "owner":
				owner = value
			case field == "fence":
				fence = value
			case strings.HasPrefix(field, "h:"):
				deadline, _ := strconv.ParseInt(value, 10, 64)
				if left := deadline - now; left > 0 {
					holds = append(holds, Hold{Token: field[2:], Left: time.Duration(left) * time.Millisecond, Kind: ReentrantLock})
				}
			}
		}
		if owner != "" { // (else no owner: st holds none, inspect.lua's holder of a hash being "")
			st.Leases, st.Extra, st.Holding = holds, Owner(owner), owner+" "+fence
		}
	},
	fetch: func(ctx context.Context, p redis.Pipeliner, key string) func() (any, error) {
		all := p.HGetAll(ctx, key)
		return func() (any, error) {
			var v []any
			for field, value := range all.Val() {
				v = append(v, field, value)
			}
			return v, all.Err()
		}
	},
})
