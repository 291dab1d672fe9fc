// Package backend is the only road to Redis: the lock operations (acquire,
// extend, release, fence, inspect, undo, force, scan) against one
// deployment (Node, through the batcher) or a quorum of independent ones
// (Quorum, the Redlock algorithm). The root package's Client, Lock and
// waiting are written against the Backend interface.
package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/script"
)

// Keys are the Redis keys and channel of one lock. They share the hash tag
// {name}, so on Redis Cluster they live in one slot and one script can touch
// them all.
type Keys struct {
	Lock    string // the lock: the lease's token, with PX expiry
	Fence   string // the last fencing token issued, for the fence window
	Channel string // where a release is announced
	Queue   string // fair mode: waiter tokens in arrival order
	Waiters string // fair mode: token -> "deadline_ms:ttl_ms" of each queued waiter
	Wake    string // unfair mode: exists while a waiter listens on Channel (see release.lua)
}

// KeysFor returns the keys of the lock name under prefix.
func KeysFor(prefix, name string) Keys {
	// One allocation for all six names: "<base>:fence<base>:qw<base>:ch<base>:w".
	all := prefix + "{" + name + "}:fence" + prefix + "{" + name + "}:qw" + prefix + "{" + name + "}:ch" + prefix + "{" + name + "}:w"
	n := (len(all) - len(":fence:qw:ch:w")) / 4 // len(base)
	return Keys{
		Lock: all[:n], Fence: all[:n+6],
		Queue: all[n+6 : 2*n+8], Waiters: all[n+6 : 2*n+9],
		Channel: all[2*n+9 : 3*n+12], Wake: all[3*n+12:],
	}
}

// Claim is one acquisition's keys and lease. It lives in the Lock, which is
// allocated when Acquire starts, and the scripts' arguments point into it
// (go-redis accepts *string): no string is copied into an interface on the
// way to Redis (7 allocations fewer per fair pair: docs/performance.md).
type Claim struct {
	Keys
	Token string // the lease's token: the plain lock's value, or a reentrant hold's field
	// Holder is what the lock names as the lease's holder, if not its
	// token: its kind's (see Kind.holder); "" otherwise.
	Holder string
	Rev    string // the lease's marker key (see lib.lua), "<lock>:r:<token>"
	// Kind is what the lease is (see kind.go): a Client's own lock (plain,
	// fair or reentrant), a semaphore's permit, a read-write lock's hold, a
	// leadership campaign. Never nil.
	Kind Kind
	// TTL is the lease time the acquisition asks for, its lock-delay
	// included (0: the Client's): the marker of the ended lease lives for
	// its revocation window, and its clean-up is retried while it lives.
	TTL time.Duration
	// Resumer tells this Lock's numbered extensions from those of another
	// Lock that resumed the same lease and picked the same numbers ("":
	// the Lock that took the lease; see lib.lua's superseded); it starts
	// with its resume's number, "<n>:", which outranks the extensions of
	// the Locks that drove the lease before it (lib.lua's drives).
	Resumer string
	// Clean reports that no request that could make the lease (an acquire
	// attempt of its token) can land after its release: each was sent once
	// and answered (Grant.Once). Its release then leaves no marker. A new
	// token is clean; the caller clears it for any other lease.
	Clean bool
	// Began is no later than when the lease was granted (or resumed): when
	// the request that gave it was sent. A server up for less time than has
	// passed since may have lost it (see Node.release).
	Began time.Time
	// ReleaseSent reports that a release of the lease was sent before and
	// its reply lost: it may have run. The caller sets it.
	ReleaseSent bool
	// Astray reports that an acquire of the token whose reply was lost
	// may still land (Grant.Astray): an acquisition that ends without the
	// lease undoes it. The caller sets it; SetToken clears it.
	Astray bool
	// tried is, per quorum node, the call of the lease's last failed
	// acquire attempt there (see Quorum.Undo); nil if none. SetToken
	// clears it.
	tried []nodeAcquire
}

// seqArg is the sequence number seq of an extension as its script takes it
// (see lib.lua's superseded): 0 for an unnumbered one, else "<seq>", or
// "<seq>.<Resumer>" for a resumed Lock.
func (c *Claim) seqArg(seq int64) any {
	if seq == 0 || c.Resumer == "" {
		return seq
	}
	return strconv.FormatInt(seq, 10) + "." + c.Resumer
}

// markedArgs appends to a release script's arguments args what only a
// marked lease's release passes (window > 0; a resumed lease is always
// marked): the marker's window, then the Resumer if the Lock resumed the
// lease.
func (c *Claim) markedArgs(window int64, args ...any) []any {
	if window == 0 {
		return args
	} else if c.Resumer == "" {
		return append(args, window)
	}
	return append(args, window, &c.Resumer)
}

// SetToken gives the claim a lease token, and with it a marker key. A token
// whose lease was ended (released, or undone after an attempt with an
// unknown outcome) is refused by Redis from then on, so an attempt after an
// undo needs a new one.
func (c *Claim) SetToken(token string) {
	c.Token, c.Clean, c.Astray, c.tried = token, true, false, nil
	c.Rev = markerKey(c.Lock, token)
	c.Holder = c.Kind.holder(c)
}

// markerKey is the key of the marker of the lease with token on lock (see
// lib.lua).
func markerKey(lock, token string) string { return lock + ":r:" + token }

// SetKind makes the claim's lease of kind k, with its Holder.
func (c *Claim) SetKind(k Kind) {
	c.Kind = k
	c.Holder = k.holder(c)
}

// HolderID is what the lock names as its holder: its Holder, else the
// lease's token.
func (c *Claim) HolderID() string { return cmp.Or(c.Holder, c.Token) }

// do sends one command, a script's EVALSHA or EVAL or another, once (see
// Node.conn), unless ctx is done. Its reply and error are the client's
// own: a driver's (see driver.Conn.Do), or go-redis's as it returns them,
// a nil reply as redis.Nil; as reads either.
func (n Node) do(ctx context.Context, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, NotSent(err)
	}
	return n.conn.Do(ctx, args...)
}

// as reads a reply v, err (see do) as a T: int64, string or []any; a nil
// reply as redis.Nil.
func as[T any](v any, err error) (T, error) {
	t, ok := v.(T)
	switch {
	case err != nil || ok:
	case v == nil:
		err = redis.Nil
	default:
		err = fmt.Errorf("unexpected reply %v", v)
	}
	return t, err
}

// ints reads a reply (see do) as a list of integers.
func ints(v any, err error) ([]int64, error) {
	vs, err := as[[]any](v, err)
	out := make([]int64, len(vs))
	for i, x := range vs {
		var ok bool
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("unexpected reply %v", v)
		}
	}
	return out, err
}

// ms returns d in milliseconds as a command argument, reusing the
// conversion for the Client's own TTL.
func (n Node) ms(d time.Duration) any {
	if d == n.ttl {
		return n.ttlA
	}
	return d.Milliseconds()
}

// ErrRevoked reports a lease token that Redis refuses: its lease was
// already ended. The caller takes a new token and goes on.
var ErrRevoked = errors.New("the lease was already ended")

// Grant is the outcome of one acquire script call.
type Grant struct {
	Held  bool
	Fence int64         // when held: reentrant, the fence of the owner's first hold; a campaign, its fence (0: not issued)
	PTTL  time.Duration // when not held: the holder's remaining lease, or -1 if unknown
	// When not held: the holder's lease token ("" if unknown; a reentrant
	// lock's: one of its holds' tokens).
	Holder string
	// Extra is what a refusal says beside (see Extra); nil if nothing.
	Extra Extra
	// Undo reports that what the attempt was granted must be given back
	// (too few replicas or quorum nodes said yes): the caller undoes it,
	// retrying until every node has answered.
	Undo bool
	// Once reports that the request was sent once and answered: no copy of
	// it can land later. Without it the lease's Claim is not Clean.
	Once bool
	// Astray reports that a copy of the request whose reply was lost may
	// still land, though a later copy was answered (see Node.Acquire).
	Astray bool
}

// Backend runs lock operations against one Redis deployment. The Lock
// handle, waiting and the watchdog are written against it, so a quorum of
// independent nodes can stand behind the same handle.
type Backend interface {
	// Acquire takes the lock if it is free or already ours; with queue set
	// (a waiter of a queued kind) it also joins, or renews its place in, the waiters' queue.
	Acquire(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error)
	// Extend resets the lease to ttl from now, unless an extension with a
	// higher sequence number seq was applied already (a late copy of an
	// older one must not cut short what a newer one set).
	Extend(ctx context.Context, c *Claim, ttl time.Duration, seq int64) (bool, error)
	// Release deletes the lock if it is ours (handing it to the next waiter
	// in fair mode) and reports whether it was; a waiter's token leaves the queue.
	// ErrSuperseded: another Lock resumed the lease, which is left to it.
	Release(ctx context.Context, c *Claim) (bool, error)
	// Fence issues the fencing token of the lease c, if it holds the lock:
	// greater than every fence issued for the name before (0: not held;
	// ErrSuperseded: another Lock resumed the lease, and c gets none).
	Fence(ctx context.Context, c *Claim) (int64, error)
	// Seq returns the sequence number of the last ordered extension
	// applied to the lease c (0: none), or -1 if c's lease was ended; a
	// Lock that resumes the lease numbers its extensions above it. drives
	// is false once a Lock other than c's resumed the lease.
	Seq(ctx context.Context, c *Claim) (seq int64, drives bool, err error)
	Inspect(ctx context.Context, k *Keys) (State, error)
	// Undo ends the lease c may hold, or come to hold (see Release), on
	// every node; it fails if a node could not be reached, so that the undo
	// is tried again (a quorum tries such a node again on its own).
	Undo(ctx context.Context, c *Claim) error
	// Force deletes the lock whoever holds it (for operators), naming the
	// holding it read first, so that a re-sent copy cannot delete the next
	// holder's lock; it reports whether a lock was deleted.
	Force(ctx context.Context, k *Keys) (bool, error)
	// Announce publishes msg on the lock's channel (k.Channel), on every
	// node; it fails if no node took it.
	Announce(ctx context.Context, k *Keys, msg string) error
	// Scan returns the keys that match the SCAN pattern match, on every
	// master of a Cluster and every node of a quorum; a key may repeat.
	Scan(ctx context.Context, match string) ([]string, error)
	// Batches reports how many script calls the batcher sent and in how
	// many writes (pipelines, or lone calls), summed over the nodes; both
	// are 0 without pipelining.
	Batches() (calls, writes uint64)
	// Prepare readies the servers for the timed calls of the lease c (its
	// acquire and extensions, whose time counts from when they are sent):
	// it loads the scripts c's calls run into the script cache of each
	// server they go to that is not known to have them, so that each of
	// those calls is one round trip (see scripts.go). The caller calls it
	// before it starts a timed call's clock; it costs a round trip the
	// first time for each server and kind of lease, and nothing after. A
	// call whose script is missing still runs it, so Prepare reports only
	// a load that never left the client (see neverSent): the deployment
	// cannot be reached, and the timed call, which would fail alike, is
	// not sent.
	Prepare(ctx context.Context, c *Claim) error
	// Op runs op, an operation of one kind's own (a read-write lock's
	// downgrade, a leader's proclaim, a semaphore's kept size: a method of
	// Node in the kind's file), on the deployment, and returns its result
	// (read with OpValue). A backend that carries plain locks only refuses
	// every one, unsent, with the error Carries gives.
	Op(ctx context.Context, op KindOp) (any, error)
	// Carries reports whether the backend serves leases of the kind k
	// (plain locks every backend serves): nil if it does, or why not,
	// ErrOverQuorum or ErrNeedsScripts.
	Carries(k Kind) error
}

// Node is the backend for one Redis deployment reached through one
// go-redis client: a single server, a Sentinel-managed master, or a Cluster.
type Node struct {
	// conn is the deployment, on which commands go once (see do): the
	// batcher over go-redis, which loads scripts and scans as
	// goredisdriver.Loader does, or NewNodeFrom's driver.
	conn       driver.Conn
	uc         redis.UniversalClient // the go-redis client (nil through a driver): a Cluster's masters, the script-free transactions
	pub        any                   // PUBLISH, or SPUBLISH on a Redis Cluster (an argument, converted once)
	replicas   int                   // acknowledgements acquire and extend need: WithReplicaAck's replicas, plus the append-only file's with durable grants
	retries    bool                  // a lost reply is asked again (see again), unless the client never sends a command again
	ackTimeout time.Duration
	durable    time.Duration // WithDurableGrants: how long WAITAOF waits for the append-only file (0: off; see durable.go)
	acks       [][]any       // the waits sent after a write (ackCmds), built once

	ttl     time.Duration // the Client's lease time, and as arguments:
	ttlA    any           // it in ms
	fenceMS any           // how long a fence counter lives, in ms (fenceWindow, or quorumFenceWindow)
	fair    *fairArgs     // the fair scripts' packed arguments, which carry it (see lock.go)

	extra  scriptSet    // scripts every lease runs besides its kind's, which Prepare loads (a quorum node's RaiseFence)
	i      int          // its index among a quorum's nodes
	caches *serverCache // what the servers' script caches hold (see scripts.go)
	clock  *clockWatch  // the server's clock as extensions read it (nil: not watched)
}

// Config is what a Node is built from: the Client's options.
type Config struct {
	Sharded    bool          // releases are announced with SPUBLISH (a Redis Cluster)
	Pipelining bool          // concurrent calls share pipelines (the batcher)
	Replicas   int           // replicas that must acknowledge acquire and extend
	AckTimeout time.Duration // how long to wait for them
	Durable    time.Duration // > 0: acquire and extend wait this long for the append-only file
	TTL        time.Duration // the Client's lease time
	Clock      *ClockHook    // whom to tell of the server's clock (nil: nobody)
}

// NewNode returns the backend of one deployment reached through rdb.
func NewNode(rdb redis.UniversalClient, c Config) Node {
	return newNode(c, rdb, &batcher{Conn: goredisdriver.Loader(rdb), rdb: rdb, alone: !c.Pipelining})
}

// newNode returns the Node of c on the deployment conn; uc is the go-redis
// client (nil: a driver's).
func newNode(c Config, uc redis.UniversalClient, conn driver.Conn) Node {
	n := Node{conn: conn, uc: uc, pub: "PUBLISH", retries: !conn.Info().NoRetry,
		replicas:   c.Replicas + flag(c.Durable > 0), // (the append-only file acknowledges first: see acksOf)
		ackTimeout: c.AckTimeout, durable: c.Durable,
		ttl: c.TTL, ttlA: c.TTL.Milliseconds(), caches: new(serverCache)}
	if c.Sharded {
		n.pub = "SPUBLISH"
	}
	if c.Clock != nil {
		n.clock = &clockWatch{hook: c.Clock, rdb: uc, bases: map[string]*clockReading{}}
	}
	if uc == nil { // (a driver sends strings: its TTL converted once too, as for go-redis's int)
		n.ttlA = strconv.FormatInt(c.TTL.Milliseconds(), 10)
	}
	n.acks = n.ackCmds()
	n.setFenceWindow(fenceWindow)
	return n
}

// setFenceWindow sets how long the fence counters n writes live, and the
// fair scripts' arguments that carry it.
func (n *Node) setFenceWindow(d time.Duration) {
	n.fenceMS = d.Milliseconds()
	n.fair = &fairArgs{n.fairConf(n.ttl), fmt.Sprintf("%s %v", n.pub, n.fenceMS)}
}

// Batches reports the batcher's counts (see Backend).
func (n Node) Batches() (calls, writes uint64) {
	if b, ok := n.conn.(*batcher); ok && !b.alone {
		return b.calls.Load(), b.writes.Load()
	}
	return 0, 0
}

// acked runs a script that may write and, with replica acknowledgement or
// durable grants on, WAIT or WAITAOF on the same connection, so that they
// cover the script's write. It returns the reply and the acknowledgements
// (see acksOf; -1 when both are off). A server that refuses WAITAOF makes
// the reply that refusal (see notDurable), which also matches refused (an
// acquisition's ErrNotAcquired; nil for an extension).
//
// On a Cluster both go to the master that owns the keys' slot, on one of
// its connections (WAIT counts the writes of its own connection). A MOVED
// reply (the slot moved since the client last looked) reloads the slot map
// and tries again, a few times, after a pause; so do ASK and TRYAGAIN (the
// slot is being migrated, and the script's keys are not all on one of its
// masters: Redis runs it nowhere until the move ends). A context that ends
// during a pause is the error, as a call not sent: no try ran the script.
//
// A NOSCRIPT reply (the server's script cache was emptied) sends the
// script again with the scripts the Node had loaded there (see
// Node.rerun), in the same pipeline, or with EVAL if the server refuses
// SCRIPT LOAD or still lacks it.
func (n Node) acked(ctx context.Context, s *script.Script, refused error, keys []any, args ...any) (any, int64, error) {
	if n.replicas <= 0 {
		v, err := n.run(ctx, s, keys, args...)
		return v, -1, err
	}
	cc, cluster := n.uc.(*redis.ClusterClient)
	cmd := evalsha(s, keys, args)
	var reload scriptSet // after a NOSCRIPT: load these with the script
	// The NOSCRIPT cure (a reload, then EVAL) and the redirects are counted
	// apart: a move that ends at the last redirect may land the next try on
	// a master without the script, which is cured there as anywhere.
	for cures, moves := 0, 0; ; { // (the default case returns)
		srv, m, err := n.server(ctx, firstKey(cmd))
		if err != nil {
			return nil, 0, err
		}
		cmds := append([][]any{cmd}, n.acks...)
		rs, err := leftWith(ctx, func() ([]driver.Result, error) { return srv.pipelined(ctx, n.loader(m), reload, cmds...), nil })
		if err != nil {
			rs = slices.Repeat([]driver.Result{{Err: err}}, len(cmds))
		}
		switch err := rs[0].Err; {
		case noScript(err) && cmd[0] == "evalsha" && cures < 5:
			cures++
			if reload == 0 && !srv.refused.Load() {
				reload = scriptSet(srv.loaded.Swap(0)) | setOf(s) // then a second time, with them
			} else {
				reload, cmd = 0, asEval(s, cmd) // then with EVAL: loading was refused, or did not cure it
			}
		case cluster && err != nil && slices.ContainsFunc([]string{"MOVED ", "ASK ", "TRYAGAIN"}, func(p string) bool { return strings.HasPrefix(err.Error(), p) }) && moves < 5:
			moves++
			cc.ReloadState(ctx)
			if !SleepCtx(ctx, time.Duration(moves)*50*time.Millisecond) {
				// Every try so far was refused unrun (a redirect, a
				// NOSCRIPT): the caller is told its context ended, and
				// that nothing ran.
				return nil, 0, NotSent(ctx.Err())
			}
		default:
			acks, err := n.acksOf(rs[1:], refused)
			return rs[0].Val, acks, cmp.Or(rs[0].Err, err)
		}
	}
}

// leftWith runs f, a call that may not watch ctx while it waits (an
// acknowledged call's script and WAIT, or a script-free transaction, on a
// go-redis connection of its own, which reads for up to its read timeout
// or WAIT's ack timeout; a guarded driver's call), on a goroutine of its
// own: the caller leaves at ctx's end, the call left in flight
// (ErrLeftInFlight: ReplyLost), as a batched call is. f then ends on its
// own. A ctx already done runs nothing: the call is not sent (ErrNotSent).
func leftWith[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	if err := ctx.Err(); err != nil { // (nothing left: not in flight)
		var zero T
		return zero, NotSent(err)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // (in as well)
			return r.v, r.err
		default:
		}
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrLeftInFlight, ctx.Err())
	}
}

// SleepCtx sleeps for d, or until ctx ends: it reports whether d passed.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// Await waits until every channel in ready is closed, for as long as ctx
// allows and d at most: it reports whether they all were.
func Await(ctx context.Context, ready []<-chan struct{}, d time.Duration) bool {
	bound := time.After(d)
	for _, r := range ready {
		select {
		case <-r:
		case <-bound:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// ackError reports a write that the append-only file (durable grants) or
// too few replicas acknowledged.
func (n Node) ackError(acks int64) error {
	if n.durable > 0 && acks <= 0 {
		return Because(ErrNotDurable, fmt.Sprintf("the append-only file did not have it within %v", n.durable))
	}
	return Because(ErrReplicaAck, fmt.Sprintf("%d of %d replicas acknowledged within %v", max(acks-n.aofAck(), 0), n.replicaAcks(), n.ackTimeout))
}

// ackUndone reports an acquisition that too few replicas (or not the
// append-only file) acknowledged, undone: it matches ErrNotAcquired and
// ackError's sentinel.
func (n Node) ackUndone(acks int64) error {
	err := n.ackError(acks)
	return Because(ErrNotAcquired, err.Error()+" (undone)", err)
}

// Acquire runs the acquire script, asked again under the same token while
// its reply is lost (see again): every acquire script answers a repeat as
// it did the first (it confirms the lease, renews a queue entry in place,
// or finds the lock handed to it), so a waiter keeps its place in line.
// Then a copy may still land (Grant.Astray). After an error the attempt
// must be undone (Grant.Undo) unless no request surely reached Redis: the
// script may have run with its reply lost, or written part of its work
// before a write was refused (Lua does not roll back).
func (n Node) Acquire(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	var g Grant
	astray, _, err := n.again(ctx, false, func() (any, error) {
		var err error
		g, err = c.Kind.acquire(ctx, n, c, ttl, queue)
		return nil, err
	})
	g.Undo = g.Undo || err != nil && !errors.Is(err, ErrRevoked) && !neverSent(err)
	g.Once = err == nil && !astray && n.replicas == 0 // (WAIT's pipeline is go-redis's own)
	g.Astray = astray
	return g, err
}

// neverSent reports whether err says the request never left the client: a
// batched call abandoned before it was sent, or a connection that could not
// be made.
func neverSent(err error) bool {
	op, ok := errors.AsType[*net.OpError](err) // (errors.As's target would cost an allocation each call, a nil err's too)
	return errors.Is(err, ErrNotSent) || ok && op.Op == "dial"
}

// ReplyLost reports whether err says a request may have reached Redis and
// its reply did not come back: the connection broke or timed out after it
// was sent. The Redis client does not send it again (see batcher); the
// caller may, as a new request, after what the first may have done is
// undone or found.
func ReplyLost(err error) bool {
	_, netErr := errors.AsType[net.Error](err)
	return !neverSent(err) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || netErr || errors.Is(err, ErrLeftInFlight))
}

// wrongKind names what the key holds when a lock's script met Redis's own
// WRONGTYPE reply, which says only that the kind is wrong, for a caller
// that wanted a lease of kind (see Kind.what): a TYPE call, and for a sorted set a ZRANGE, on this error path
// only. It returns err unchanged when it is not ErrWrongType, or when they
// fail.
func (n Node) wrongKind(ctx context.Context, key string, kind Kind, err error) error {
	if !errors.Is(err, ErrWrongType) || strings.Contains(err.Error(), "the fence key") {
		return err // (the fence key's: the script's own reply, the lock key is not the one)
	}
	t, terr := as[string](n.do(ctx, "type", key))
	what, ok := shapeOf(t).holds(ctx, n, key) // (without a type, t is "": a shape that reads nothing)
	if terr != nil || t == "none" || !ok {
		return err
	}
	return Because(ErrWrongType, fmt.Sprintf("the key holds %s, not %s", what, kind.what()), err)
}

// pttlOf converts a PTTL reply in ms (-1: no expiry) to a duration.
func pttlOf(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

func (n Node) Extend(ctx context.Context, c *Claim, ttl time.Duration, seq int64) (bool, error) {
	sent := time.Now()
	// (a reply may come with an error: acked's refusal of WAITAOF after the script ran)
	r, acks, err := c.Kind.extend(ctx, n, c, ttl, seq)
	if pair, ok := r.([]any); ok && len(pair) == 2 { // {reply, server µs}: the clock is on (see extend.lua)
		_, ok := pair[0].(int64)
		us, ok2 := pair[1].(int64)
		if !ok || !ok2 {
			return false, fmt.Errorf("unexpected reply %v", pair)
		}
		r = pair[0]
		n.clock.read(ctx, c.Lock, ttl, us, sent, time.Now())
	}
	v, err := as[int64](r, err)
	switch {
	case err != nil:
		return false, RedisErr(err)
	case v == 1 && acks >= 0 && acks < int64(n.replicas):
		// Extended on the master only: not a loss yet, but not a safe
		// extension either. The watchdog retries until the validity runs out.
		return false, n.ackError(acks)
	case v == 2:
		return false, ErrSuperseded
	}
	return v == 1, nil
}

// Window is how long what a lease of ttl leaves outlives it: the marker
// of the ended lease (see lib.lua), and a fair waiter's queue entry unless
// renewed (a waiter that died is skipped after that; waiters renew every
// third of it). A TTL, but at most a minute: markers cost a key each, and
// a network that holds a request for a minute is rare.
//
// The two are one window so that a request of the lease delayed in the
// network does no more than the docs allow whenever it lands: within the
// window after the lease ended, the marker refuses it; later, it can take
// the lock for nobody for a TTL, or join the queue for nobody, and its
// entry then holds a place in line for one window, no longer than the
// marker would have refused it. (A queue entry that outlived the window,
// max(TTL, 1s) as it was, let a request landing after the marker had gone
// hold the line for a second behind a lease of a few milliseconds.)
func Window(ttl time.Duration) time.Duration { return min(ttl, time.Minute) }

// WakeWindow is the longest a waiter's wake key lives: as long as a marker
// at most, and at least as long as an unfair waiter sleeps between
// attempts, whatever its own lease, so that the key it set is there when
// the release comes. acquire.lua writes it in ms rather than receive it on
// every call (a test checks that the two agree).
const WakeWindow = time.Minute

// fenceWindow is how long a fence counter lives after a fence was issued.
// Fences are floored by the server's clock (new_fence in lib.lua), so the
// counter only has to outlast a step back of that clock, or a failover to
// a server whose clock is behind; after the window the name leaves nothing
// in Redis.
//
// Over a quorum the counter lives quorumFenceWindow: a fence is the highest
// of a majority's, so a node whose clock runs ahead of the others raises it
// above what they would issue after the counter expired. Fences rise as
// long as the nodes' clocks agree to within that window.
const (
	fenceWindow       = time.Minute
	quorumFenceWindow = 24 * time.Hour
)

// Release ends the lease: deletes the lock if it is ours (handing it to the
// next waiter in fair mode) and reports whether it was; a waiter's token
// leaves the queue. Unless the claim is Clean, the lease's token is revoked
// for the revocation window (of the lease's TTL) either way, so a request
// of it still in flight cannot take the lock afterwards, and a re-sent
// release reports what the first one did.
func (n Node) Release(ctx context.Context, c *Claim) (bool, error) {
	return n.release(ctx, c, !c.Clean)
}

// release is Release, revoking the token if mark.
//
// A release whose reply was lost is asked again, after a pause that lets
// the client replace a broken connection (a second copy sent at once can
// meet the same dead connection), a few times while its ctx lasts. A
// marked lease's marker tells what an earlier copy did. A clean lease
// writes none, so a lease found gone after a copy was lost counts as
// deleted by that copy, which the caller sent while the lease was valid,
// unless the server restarted since the lease began: an empty restart
// forgets leases, and the lease may have been gone, and its name taken,
// before the release was sent. (A lease lost otherwise, outside the
// guarantees, to a failover or a forced release, then goes untold.)
func (n Node) release(ctx context.Context, c *Claim, mark bool) (bool, error) {
	var window int64
	if mark {
		window = Window(cmp.Or(c.TTL, n.ttl)).Milliseconds()
	}
	sent, r, err := n.again(ctx, c.ReleaseSent, func() (any, error) { return c.Kind.release(ctx, n, c, window) })
	v, err := leaseReply(as[int64](r, err))
	if v == 0 && err == nil && sent && !mark {
		_, r, err := n.again(ctx, false, func() (any, error) { return n.run(ctx, script.Uptime, []any{c.Lock}) })
		up, err := as[int64](r, err)
		if err != nil {
			return false, RedisErr(err)
		}
		// (INFO counts whole seconds between two truncated clock readings:
		// the server may have been up a second less than it says.)
		if time.Duration(up-1)*time.Second >= time.Since(c.Began) {
			v = 1
		}
	}
	return v == 1, err
}

// again sends a command with f, and, where n asks again (Node.retries),
// sends it again after a pause while its reply is lost, or, once one was
// (or sent was set), while no connection can be made, a few times while
// ctx lasts. The pause lets the client replace broken connections: a copy
// sent at once can meet another dead one. It reports whether a command's
// reply was lost (or sent), and returns the last command's reply; if that
// command was never sent, a lost reply's error before it: the outcome is
// unknown, and the caller's record of a copy sent (Claim.ReleaseSent)
// reads it from the error.
func (n Node) again(ctx context.Context, sent bool, f func() (any, error)) (bool, any, error) {
	v, err := f()
	var lost error // the last lost reply's
	for pause := 10 * time.Millisecond; n.retries && pause <= releasePauseMax && (ReplyLost(err) || sent && neverSent(err)); pause *= 4 {
		if ReplyLost(err) {
			sent, lost = true, err
		}
		if !SleepCtx(ctx, pause) {
			break
		}
		v, err = f()
	}
	if lost != nil && neverSent(err) {
		err = lost
	}
	return sent || ReplyLost(err), v, err
}

// releasePauseMax is the longest pause before a release whose reply was
// lost is asked again: the pauses are 10ms, 40ms, 160ms.
const releasePauseMax = 160 * time.Millisecond

// KindOp is an operation of one kind's own, which Backend.Op runs on a
// Node: it returns the Node method's result and error.
type KindOp func(context.Context, Node) (any, error)

// Op runs op on n (see Backend).
func (n Node) Op(ctx context.Context, op KindOp) (any, error) { return op(ctx, n) }

// OpValue runs op through b.Op and returns its result as the T it is (the
// zero T when b refused op).
func OpValue[T any](ctx context.Context, b Backend, op KindOp) (T, error) {
	v, err := b.Op(ctx, op)
	t, _ := v.(T)
	return t, err
}

// leaseReply reads a script's reply v, err about a lease: err translated
// (see result), or ErrSuperseded for -1, which says that another Lock
// resumed the lease (see lib.lua's drives).
func leaseReply(v int64, err error) (int64, error) {
	if v, err = result(v, err); v == -1 {
		return v, ErrSuperseded
	}
	return v, err
}

func (n Node) Fence(ctx context.Context, c *Claim) (int64, error) {
	f, err := leaseReply(as[int64](n.run(ctx, script.Fence, []any{c.Lock, c.Fence, c.Rev}, c.HolderID(), c.Kind.fenceWindow(n, c.TTL), c.Kind.shape().typ, c.Resumer)))
	return max(f, 0), err
}

func (n Node) Seq(ctx context.Context, c *Claim) (int64, bool, error) {
	mark, err := as[string](n.do(ctx, "get", c.Rev))
	if err != nil && err != redis.Nil { // (no marker: mark "", which seqOf and drives read as 0 and true)
		return 0, false, RedisErr(err)
	}
	return seqOf(mark), drives(mark, c.Resumer), nil
}

// seqOf reads a lease's marker (see lib.lua): "e<n>" or "e<n>.<id>" gives
// n, "1" or "0" (ended) -1, anything else 0.
func seqOf(mark string) int64 {
	switch {
	case mark == "0", mark == "1":
		return -1
	case strings.HasPrefix(mark, "e"):
		num, _, _ := strings.Cut(mark[1:], ".") // (a resumed Lock's: "e<n>.<id>")
		n, _ := strconv.ParseInt(num, 10, 64)
		return max(n, 0)
	}
	return 0
}

// drives reports whether the Lock with resumer id resumer ("": the Lock
// that took the lease) still drives the lease whose marker is mark, as
// lib.lua's drives does: not once another Lock resumed it after this one.
// A marker without an id ("e<n>") is the first Lock's, which every resumer
// outranks, as it outranks a Lock it resumed after.
func drives(mark, resumer string) bool {
	n, id, _ := strings.Cut(strings.TrimPrefix(mark, "e"), ".")
	if !strings.HasPrefix(mark, "e") || id == "" || id == resumer {
		return true
	}
	seq, _ := strconv.ParseInt(n, 10, 64)
	from, _, ok := strings.Cut(resumer, ":")
	base, err := strconv.ParseInt(from, 10, 64)
	return ok && err == nil && seq < base
}

func (n Node) Inspect(ctx context.Context, k *Keys) (State, error) {
	v, err := as[[]any](n.run(ctx, script.Inspect, []any{k.Lock, k.Fence, k.Queue, k.Waiters, valueKey(k)}))
	if err != nil {
		return State{}, RedisErr(err)
	}
	if len(v) != 8 {
		return State{}, fmt.Errorf("unexpected reply %v", v)
	}
	typ, _ := v[0].(string)
	holder, _ := v[1].(string)
	pttl, _ := v[2].(int64)
	fence, _ := v[3].(int64)
	now, _ := v[5].(int64)
	queued, _ := v[6].(int64)
	value, _ := v[7].(string)
	return stateOf(k, typ, holder, v[4], pttl, fence, now, queued, value), nil
}

// stateOf is the state of the lock k as inspect.lua reads it (see there):
// its key's Redis type typ, a plain lock's holder, the key's contents (a
// reentrant lock's or a semaphore's flat list: the owners), its pttl, the
// fence, the server's clock now (ms), the live waiters queued and the
// kinds' extra key's value (see shape.read).
func stateOf(k *Keys, typ, holder string, contents any, pttl, fence, now, queued int64, extra string) State {
	st := State{Key: k.Lock, Type: typ, Held: typ != "none", Token: holder, Holding: holder, Fence: fence, Queued: queued}
	if st.Held {
		st.TTL = pttlOf(pttl)
	}
	shapeOf(typ).read(&st, contents, now, extra)
	return st
}

// scanBatch is the COUNT hint of each SCAN call.
const scanBatch = 256

// Scan runs SCAN on every master: through go-redis, as a read that go-redis
// sends again after a broken connection (see goredisdriver.Loader).
func (n Node) Scan(ctx context.Context, match string) ([]string, error) {
	masters, err := n.conn.Masters(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, m := range masters {
		cursor := "0"
		for {
			v, err := m.Do(ctx, "scan", cursor, "match", match, "count", scanBatch)
			if err != nil {
				return keys, RedisErr(err)
			}
			r, _ := v.([]any)
			if len(r) != 2 {
				return keys, fmt.Errorf("SCAN: unexpected reply %v", v)
			}
			cursor, _ = r[0].(string)
			page, _ := r[1].([]any)
			for _, k := range page {
				if s, ok := k.(string); ok {
					keys = append(keys, s)
				}
			}
			if cursor == "0" || cursor == "" {
				break
			}
		}
	}
	return keys, nil
}

// A server that refuses the connection is down: there is nothing to undo
// on it that will not be gone with it or expire by itself.
func (n Node) Undo(ctx context.Context, c *Claim) error {
	_, err := n.release(ctx, c, true)
	return err
}

// Force reads the lock's holding, then runs force_release.lua naming it;
// a holding that changed in between (a permit or hold taken, a fair lock
// handed over) has the script delete nothing, and is read again, up to
// three times, then reported as an error: the lock was held all along,
// and false would say it was not. A lock freed in between is not held.
func (n Node) Force(ctx context.Context, k *Keys) (bool, error) {
	holding, err := n.force(ctx, k)
	return holding != "", err
}

// force is Force, and returns the holding it ended ("" if none).
func (n Node) force(ctx context.Context, k *Keys) (string, error) {
	for try := 1; ; try++ {
		st, err := n.Inspect(ctx, k)
		if ok, ferr := st.forced(); !ok { // (a failed read's State is empty: no holding)
			return "", cmp.Or(err, ferr)
		}
		ok, err := as[int64](n.run(ctx, script.ForceRelease, st.forcedKeys(k), st.Holding, k.Channel, n.pub, time.Minute.Milliseconds()))
		switch {
		case err != nil:
			return "", RedisErr(err)
		case ok == 1:
			return st.Holding, nil
		case ok == -1: // (freed since the read)
			return "", nil
		case try == 3:
			return "", errors.New("the lock's holders changed between each read of them and the force, three times: try again")
		}
	}
}

func (n Node) Announce(ctx context.Context, k *Keys, msg string) error {
	_, err := n.run(ctx, script.Announce, []any{k.Lock}, k.Channel, n.pub, msg)
	return RedisErr(err)
}

// RedisErr translates the replies from Redis that have a meaning of their
// own here, and makes a closed go-redis client's error match
// driver.ErrClosed, as a driver's does; other errors it returns as they
// are. It adds no prefix: the method that returns the error names the
// operation and the lock.
func RedisErr(err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return MatchClosed(err)
	}
	if errors.Is(err, redis.Nil) {
		return errors.New("unexpected nil reply")
	}
	if denied := scriptingDenied(err); denied != nil {
		return denied
	}
	if !isRedisError(err) {
		return err
	}
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "REVOKED"):
		return ErrRevoked
	case strings.HasPrefix(msg, "DLOCK_"):
		_, detail, _ := strings.Cut(wrongTypeDetail(msg), " ")
		return Because(ErrInvalid, detail, err)
	case strings.Contains(msg, "WRONGTYPE") && !errors.Is(err, ErrWrongType):
		return Because(ErrWrongType, wrongTypeDetail(msg), err)
	case strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, "user_script:"):
		// A Lua error in a script of dlock's: a defect of dlock's, which
		// the caller can do nothing about. Said so, without Lua's words
		// alone; the reply stays in the chain.
		return Detailed("script failed in Redis, a defect of dlock: "+wrongTypeDetail(strings.TrimPrefix(msg, "ERR ")), err)
	}
	return err
}

// result returns v, or, if err is not nil, the zero value and err
// translated (see RedisErr).
func result[T any](v T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, RedisErr(err)
	}
	return v, nil
}

// wrongTypeDetail is what a WRONGTYPE reply says, without the script's
// digest and line that Redis appends ("script: <sha>, on @user_script:N.").
func wrongTypeDetail(msg string) string {
	if i := strings.Index(msg, " script: "); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimPrefix(msg, "WRONGTYPE ")
	return strings.TrimPrefix(msg, "dlock: ")
}
