package dlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/pubsub"
)

// Client acquires locks on one Redis deployment, or a quorum ([NewRedlock]);
// make one per process, share it, and Close it before its Redis clients.
type Client struct {
	*engine        // shared with its Owner Clients
	owner   string // reentrant: the owner its acquisitions are made for (Owner)
}

// engine is what a Client and its Owner Clients share: the backend, the
// configuration, and the state of Close.
type engine struct {
	b    backend.Backend // the only road to Redis
	hubs []*pubsub.Hub   // one per node: a quorum Client listens to all of them
	opts options
	id   string // this Client's instance ID, part of a reentrant owner's identity

	bg          *backend.Tracker   // work left running in the background: clean-up (undo), a quorum node's late call
	closed      atomic.Bool        // Close was called
	stop        context.Context    // done at the first Close: wakes waiting acquisitions, cuts Observe's reads
	halt        context.CancelFunc // ends stop
	hubsClosing sync.Once          // starts closing the hubs, at the first Close
	obs         observers
	clockMu     sync.Mutex
	clocks      []*Event // the clocks to tell (see watchClock)
	held        holds    // the leases held now, by mode (Held)
	own         kind     // what its own acquisitions are (Semaphore, RWMutex and Election have theirs)
}

// New returns a Client that keeps its locks in rdb, never closed by it. A nil
// rdb, or an option invalid or not applying, is an error wrapping [ErrInvalid].
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("%w: New: nil Redis client", ErrInvalid)
	}
	o := apply(opts)
	_, rt := goredisdriver.Limits(rdb)
	// (The waits go in the write's pipeline, under the read timeout.)
	by := fmt.Sprintf("WithDurableGrants(%v)", o.durable)
	if o.durable == 0 {
		by = fmt.Sprintf("WithReplicaAck(%d, %v)", o.replicas, o.ackTimeout)
	}
	wait := o.durable + o.ackTimeout*time.Duration(min(o.replicas, 1))
	o.invalidIf(rt > 0 && (wait >= rt || wait < o.durable), // (a sum past the longest Duration wraps)
		"%s: the wait must end before the Redis client's read timeout (%v), which would cut it off as a lost reply", by, rt)
	return build([]redis.UniversalClient{rdb}, newNode, o)
}

// build returns the Client of the options o, or their first invalid one, over
// nodes, each made by node: a quorum if o has a node timeout (NewRedlock),
// else the one node.
func build[N any](nodes []N, node func(N, *options) (backend.Node, *pubsub.Hub), o options) (*Client, error) {
	if o.firstInvalid != "" {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, o.firstInvalid)
	}
	ns, hubs := make([]backend.Node, len(nodes)), make([]*pubsub.Hub, len(nodes))
	for i, n := range nodes {
		ns[i], hubs[i] = node(n, &o)
	}
	var b backend.Backend = ns[0]
	var err error
	bg := new(backend.Tracker)
	switch {
	case o.noScripts:
		b, err = backend.NewNoScripts(ns[0], o.nodeTimeout)
	case o.nodeTimeout > 0:
		b = backend.NewQuorum(ns, o.nodeTimeout, bg)
	}
	if err != nil {
		return nil, err
	}
	own, err := o.ownOn(b)
	if err != nil {
		return nil, err
	}
	e := &engine{b: b, bg: bg, hubs: hubs, opts: o, id: newToken()[:11], own: own, held: make(holds, len(modes))}
	e.stop, e.halt = context.WithCancel(context.Background())
	for _, ob := range o.observers {
		e.obs.add(ob)
	}
	e.watchClock()
	return &Client{engine: e}, nil
}

// config is the configuration, from the options, of a Node on a
// deployment that is a Cluster or not: its pub/sub is sharded as
// WithShardedPubSub says, else if it is a Cluster.
func (o *options) config(cluster bool) backend.Config {
	return backend.Config{Sharded: o.sharded || (!o.shardedSet && cluster),
		Pipelining: o.pipelining, Replicas: o.replicas, AckTimeout: o.ackTimeout, Durable: o.durable, TTL: o.lease.ttl,
		Clock: o.clock}
}

// NewFrom is New through a driver (extra/dlockrueidis, extra/dlockvalkey,
// extra/dlockredigo); options that need go-redis are [ErrInvalid].
func NewFrom(conn driver.Conn, opts ...Option) (*Client, error) {
	if isNil(conn) {
		return nil, fmt.Errorf("%w: NewFrom: nil driver", ErrInvalid)
	}
	o := apply(opts)
	o.invalidIf(o.replicas > 0, "NewFrom: WithReplicaAck needs a go-redis client (New)")
	o.invalidIf(o.durable > 0, "NewFrom: WithDurableGrants needs a go-redis client (New)")
	return build([]driver.Conn{conn}, nodeFrom, o)
}

// isNil reports whether v is nil, or an interface holding a nil pointer (a
// (*redis.Client)(nil)).
func isNil(v any) bool {
	r := reflect.ValueOf(v) // (the zero Value, not valid, if v is nil)
	return !r.IsValid() || r.Kind() == reflect.Pointer && r.IsNil()
}

// newNode returns the backend of one deployment reached through rdb, and
// the hub that listens for its releases, as the options say.
func newNode(rdb redis.UniversalClient, o *options) (backend.Node, *pubsub.Hub) {
	_, cluster := rdb.(*redis.ClusterClient)
	cfg := o.config(cluster)
	return backend.NewNode(rdb, cfg), pubsub.New(goredisdriver.Conn(rdb), cfg.Sharded)
}

// nodeFrom is newNode through a driver.
func nodeFrom(conn driver.Conn, o *options) (backend.Node, *pubsub.Hub) {
	cfg := o.config(conn.Info().Cluster)
	return backend.NewNodeFrom(conn, cfg), pubsub.New(conn, cfg.Sharded)
}

// Close stops the Client and its Owners: acquisitions fail with [ErrClosed],
// Locks stop being extended. It waits for their work under way (save a hook's
// caller) and pub/sub, or returns ctx.Err(); a lease at max hold then expires.
func (c *Client) Close(ctx context.Context) error {
	if c == nil || c.engine == nil {
		return fmt.Errorf("%w: Close of a nil Client", ErrInvalid) // (New failed; a deferred Close ran before its error was checked)
	}
	c.closed.Store(true)
	c.halt()                  // wakes the acquisitions waiting: they end with ErrClosed
	c.bg.Drain(ctx)           // (acquisitions and clean-up first: they use the hubs)
	c.hubsClosing.Do(func() { // (once: a later Close waits for the same closing)
		for _, h := range c.hubs { // (counted though drained: a hub's connection may hang past ctx, a dial, a write)
			c.bg.Enter()
			go func() { defer c.bg.Leave(); h.Close() }()
		}
	})
	return c.bg.Drain(ctx) // (ctx.Err() if it ended with any of them still under way)
}

// LeaseTime returns the Client's default lease time ([LeaseTTL]).
func (c *Client) LeaseTime() time.Duration { return c.opts.lease.ttl }

// check validates a lock name and returns its keys.
func (c *Client) check(name string) (backend.Keys, error) {
	if err := validName(name); err != nil {
		return backend.Keys{}, err
	}
	return backend.KeysFor(c.opts.prefix, name), nil
}

// prepare validates name and the call's options (try: for TryAcquire) and
// returns the Lock that acquiring it will activate, with its keys, what it
// asks for, and a new lease token (and, for a reentrant Client, its owner
// id: the Client's owner, see Owner, or one of its own).
func (c *Client) prepare(k *kind, name string, opts []LockOption, try bool) (*Lock, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%w: %s %q", ErrClosed, k.acquireOp, name)
	}
	keys, err := c.check(name)
	if err != nil {
		return nil, err
	}
	p, err := c.leaseFor(k.acquireOp, name, opts, try)
	if err != nil {
		return nil, err
	}
	l := &Lock{c: c, k: k, name: name, p: p,
		base: backend.Claim{Keys: keys, TTL: p.asked(p.ttl), Holder: k.holders.ownerOf(c), Kind: k.lease}}
	l.cl = &l.base
	token := p.resume
	if token == "" {
		token = leaseToken(p.suffix, k.mark)
	} else if err := k.resumes(name, token); err != nil {
		return nil, err
	}
	l.cl.SetToken(token)
	l.cl.Clean = p.resume == "" // a resumed lease's first holder may have requests in flight
	return l, nil
}

// validName checks a lock name. A name that begins with "}" is refused on
// every deployment: its keys ("<prefix>{<name>}...") would have an empty
// hash tag, so a Redis Cluster would hash each key whole and put a lock's
// keys in different slots, and a name must work the same everywhere.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name", ErrInvalid)
	case name[0] == '}':
		return fmt.Errorf("%w: lock name %q begins with \"}\", which would end its Redis Cluster hash tag empty", ErrInvalid, name)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: lock name is %d bytes, longer than %d", ErrInvalid, len(name), MaxNameLen)
	}
	return nil
}

// Do takes the lock as [Client.Acquire] does, runs fn and releases it, even on
// panic. A loss cancels fn's context (cause [ErrNotHeld], or [ErrMaxHold]). It
// returns fn's error joined with the loss's or the release's.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return c.do(ctx, &c.own, name, fn, opts, false)
}

// TryDo is [Client.Do] if [Client.TryAcquire] takes the lock, else [ErrNotAcquired].
func (c *Client) TryDo(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return c.do(ctx, &c.own, name, fn, opts, true)
}

// do is Do (try: TryDo): the acquisition's error (fn did not run), or
// fn's error joined with the release's (see joinEnded).
func (c *Client) do(ctx context.Context, k *kind, name string, fn func(ctx context.Context, l *Lock) error, opts []LockOption, try bool) error {
	return runHeld(ctx, name, fn, func() (*Lock, error) {
		return c.acquireAs(ctx, k, name, opts, try)
	}, func(l *Lock) error { return release(ctx, l) })
}

// The kinds of a Client's own locks on one deployment, one chosen when it
// is made (ownOn): a reentrant lock's is in reentrant.go, a quorum's in
// redlock.go.
var (
	unfairLocks = kind{slot: newMode("unfair"), lease: backend.PlainLock, waits: polls{}, acquireOp: "acquire", releaseOp: "release", holders: tokens{}}
	fairLocks   = kind{slot: newMode("fair"), lease: backend.FairLock, waits: queues{}, acquireOp: "acquire", releaseOp: "release", holders: tokens{}}
)

// ownOn returns the kind of the Client's own locks that the options ask
// for: over a quorum (a node timeout, NewRedlock), or on one deployment,
// whose waiting is fair where b carries it (not WithoutScripts); if b
// does not carry it, an error wrapping ErrInvalid that says why (only
// reentrant locks can be refused).
func (o *options) ownOn(b backend.Backend) (kind, error) {
	k := unfairLocks
	switch {
	case o.reentrant:
		k = reentrantLocks
	case o.nodeTimeout > 0:
		k = quorumLocks
	case !o.unfair && b.Carries(fairLocks.lease) == nil:
		k = fairLocks
	}
	return k, unserved("WithReentrant(true)", words{plural: "reentrant locks", verb: "keep"}, b.Carries(k.lease))
}

// nilFunc is the refusal of a Do given no function to run under name.
func nilFunc(name string) error {
	return fmt.Errorf("%w: do %q: the function to run is nil", ErrInvalid, name)
}

// runHeld is a Do or a DoAll of what (named name) acquire takes: it runs
// fn under a heldContext of it, which a loss cancels as it is declared,
// and then release, also when fn panics; it returns the acquisition's
// error (fn did not run), or fn's error joined with release's (see
// joinEnded).
func runHeld[H holding](ctx context.Context, name string, fn func(context.Context, H) error, acquire func() (H, error), release func(H) error) (err error) {
	if fn == nil {
		return nilFunc(name)
	}
	held, err := acquire()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	held.onSettled(cancel)
	defer func() { // (also as a panic in fn unwinds: its error is then dropped)
		cancel(context.Canceled)
		err = joinEnded(err, release(held))
	}()
	return fn(&heldContext{Context: fctx, held: held, cancel: cancel}, held)
}

// release releases the Lock of a Do, also when ctx is done, and, unless
// Redis answered that it was no longer held, has its lease undone as an
// undo is (in the background, bounded) instead of left to expire: its
// holder has no Lock to call Release on again. Against a Redis that does
// not answer, it waits no longer than an undo does, and leaves the rest to
// the background: a client that waits for a reply for ever does not hold
// the caller as long.
func release(ctx context.Context, l *Lock) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	err := l.Release(rctx)
	l.mu.Lock()
	left := l.handedOff // (a lease left for a resume, or resumed elsewhere, is not ours to undo)
	l.mu.Unlock()
	if err != nil && !errors.Is(err, ErrNotHeld) && !left {
		l.c.undo(rctx, l.cl) // (its wait ends with rctx too: a release cut at undoTimeout is not waited for twice)
	}
	return err
}

// holding is what a heldContext holds: a Lock, or a MultiLock.
type holding interface {
	Err() error
	onSettled(func(error))
	leases() []*Lock // (see leasesIn)
}

// heldContext is the context Do and DoAll give fn, and Lock.Context. Its
// Err, Done and Value (which context.Cause reads) check the leases'
// validity deadlines themselves (held's Err), so a loss is seen as soon as
// it is due, not when the expiry timer's goroutine gets to run. (Contexts
// derived from it learn of the loss from the timer, a moment later.)
type heldContext struct {
	context.Context
	held   holding
	cancel context.CancelCauseFunc
}

func (h *heldContext) check() {
	if h.Context.Err() == nil {
		if err := h.held.Err(); err != nil {
			h.cancel(err)
		}
	}
}

func (h *heldContext) Done() <-chan struct{} {
	h.check()
	return h.Context.Done()
}

func (h *heldContext) Err() error {
	h.check()
	return h.Context.Err()
}

func (h *heldContext) Value(key any) any {
	if key == (heldKey{}) {
		return h
	}
	h.check()
	return h.Context.Value(key)
}

// heldKey is the key under which a heldContext, and each context derived
// from it, gives the innermost heldContext (see Lock.release): the
// contexts of nested Dos chain, each one's parent the next (see
// leasesIn).
type heldKey struct{}
