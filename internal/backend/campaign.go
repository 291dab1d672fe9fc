package backend

import (
	"context"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/script"
)

// Campaign is the kind of a leadership campaign (the root package's
// Election): a lock whose candidates wait in the fair queue whatever the
// Client's mode, and whose lease is fenced, and announced, as it takes the
// lock: its own scripts (campaign_*.lua) share the fair lock's queue
// through lib_queue.lua.
var Campaign Kind = campaign{}

type campaign struct{ plainLock } // (its holder and shape are a plain lock's)

func (campaign) acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	g, err := n.takeLock(ctx, c, campaignAcquire, []any{c.Lock, c.Fence, c.Queue, c.Waiters, c.Rev, c.Wake},
		appendIf(queue, 1, c.Token, ttl.Milliseconds(), n.fairConf(ttl))...)
	if err == nil && !g.Held && g.Holder != "" { // (refused: a GET on this path only)
		value, _ := as[string](n.do(ctx, "get", valueKey(&c.Keys))) // (unread: the token's metadata names it)
		g.Extra = proclaimed(value, g.Holder)
	}
	return g, err
}

// Proclaimed is the value a campaign's leader proclaimed last (see
// proclaim.lua): the Extra of its State, and of a refusal, if it did.
type Proclaimed string

// Holder: a leader names no owner, and shows the value it proclaimed.
func (v Proclaimed) Holder(string) (string, string) { return "", string(v) }

// valueKey is the key of a leader's value (proclaim.lua), made when
// needed: only elections, and Inspect, use it.
func valueKey(k *Keys) string { return k.Lock + ":v" }

// proclaimed reads the value key of a lock held by holder (a leader's
// lease token): the value holder proclaimed, if it did, else nil. The key
// holds "<token>{<seq>} <value>" (see proclaim.lua), or an older "<token>
// <value>".
func proclaimed(key, holder string) Extra {
	t, value, ok := strings.Cut(key, " ")
	t, _, _ = strings.Cut(t, "{")
	if !ok || t != holder || holder == "" {
		return nil
	}
	return Proclaimed(value)
}

func (campaign) what() string { return "a leader's lease" }

func (campaign) extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error) {
	return n.extendLease(ctx, campaignExtend, c, ttl, seq, c.Lock, c.Rev, c.Fence, valueKey(&c.Keys))
}

func (campaign) release(ctx context.Context, n Node, c *Claim, window int64) (any, error) {
	return n.run(ctx, campaignRelease, []any{&c.Lock, &c.Fence, &c.Queue, &c.Waiters, &c.Rev, valueKey(&c.Keys)},
		c.markedArgs(window, &c.Token, n.fair.release)...)
}

var (
	campaignAcquire = loads("campaign_acquire")
	campaignExtend  = loads("campaign_extend")
	campaignRelease = loads("campaign_release")
	proclaim        = loads("proclaim")
	campaignScripts = setOf(campaignAcquire, campaignRelease, campaignExtend, script.Fence, proclaim)
)

func (campaign) scripts() (*script.Script, scriptSet) { return campaignAcquire, campaignScripts }

func (campaign) anyBackend() bool { return false } // (its scripts, on one node)

// fenceWindow: a term's fence lives as long as its lease, if longer than
// the Node's fence window, as campaign_acquire.lua issues it.
func (campaign) fenceWindow(n Node, ttl time.Duration) any {
	return max(ttl.Milliseconds(), n.fenceMS.(int64))
}

// Proclaim sets the value the leader of the campaign lease c shows, within
// its term (see proclaim.lua); false if c no longer holds the lock. seq
// orders the Lock's Proclaims: one numbered below a Proclaim of the Lock
// that Redis applied changes nothing, and reports true (a later value is
// set). ErrSuperseded: another Lock resumed the lease.
func (n Node) Proclaim(ctx context.Context, c *Claim, value string, seq int64) (bool, error) {
	v, err := leaseReply(as[int64](n.run(ctx, proclaim, []any{c.Lock, valueKey(&c.Keys), c.Fence, c.Rev}, c.Token, value, c.Channel, n.pub, c.Resumer, c.seqArg(seq))))
	return v == 1 || v == 2, err
}
