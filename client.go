package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// Client acquires locks on one Redis deployment (or, from NewRedlock, on a
// quorum of them). It is safe for concurrent use; make one per process and
// share it. A Client owns no connections of its own beyond its pub/sub
// connections — one per node (on a Cluster, one per lock being waited
// for) — which are open only while some Acquire is waiting.
type Client struct {
	b    backend.Backend // the only road to Redis
	hubs []*pubsub.Hub   // one per node: a quorum Client listens to all of them
	opts options
	id   string // this Client's instance ID, part of a reentrant owner's identity

	owner string // reentrant: the owner its acquisitions are made for (Owner)

	bg   *backend.Tracker // clean-up left running in the background (undo); shared with Owner Clients
	obs  *observers       // shared with Owner Clients
	mode string           // for observers: "fair", "unfair", "reentrant", "quorum", "semaphore", "election", "read" or "write"

	permits  int    // > 0: its acquisitions are permits of a semaphore with this N (Client.Semaphore)
	campaign bool   // its acquisitions are leadership campaigns (Client.Election)
	rw       string // "r" or "w": its acquisitions are read or write holds of a read-write lock (Client.RWMutex)
}

// newClient returns the Client of backend b and its hubs.
func newClient(b backend.Backend, hubs []*pubsub.Hub, o options, mode string) *Client {
	c := &Client{b: b, hubs: hubs, opts: o, id: newToken()[:11], bg: new(backend.Tracker), obs: new(observers), mode: mode}
	if h := o.hooks; h.Acquired != nil || h.Released != nil || h.Lost != nil {
		c.obs.add(hooksObserver(o.hooks))
	}
	for _, ob := range o.observers {
		c.obs.add(ob)
	}
	return c
}

// New returns a Client that keeps its locks in rdb: a *redis.Client, a
// Sentinel failover client or a *redis.ClusterClient. dlock never dials
// Redis itself and never closes rdb.
//
// New checks its arguments, and a Client it returns is valid: a nil rdb,
// an invalid option, and an option that does not apply to this Client are
// reported here, with an error that wraps ErrInvalid and names the option.
// Options that do not apply: WithNodeTimeout (NewRedlock only),
// WithFair(true) with WithReentrant(true) (reentrant locks wait unfairly),
// and WithBackoff while waiting is fair (the default; see WithBackoff).
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: New: nil Redis client", ErrInvalid)
	}
	o := apply(opts)
	switch {
	case o.err != nil:
	case o.nodeTimeoutSet:
		o.invalid("WithNodeTimeout(%v): applies to a quorum (NewRedlock) only", o.nodeTimeout)
	case o.reentrant && o.fairSet && o.fair:
		o.invalid("WithFair(true): reentrant locks (WithReentrant(true)) wait unfairly")
	case o.backoffSet && o.fair && !o.reentrant && o.fairSet:
		o.invalid("WithBackoff: fair waiters (WithFair(true)) are woken by handover and never back off")
	case o.backoffSet && o.fair && !o.reentrant:
		o.invalid("WithBackoff: fair waiters, the default, are woken by handover and never back off; add WithFair(false) to wait with a backoff")
	}
	if o.err != nil {
		return nil, o.err
	}
	if o.reentrant {
		o.fair = false
	}
	n, h := newNode(rdb, &o)
	var b backend.Backend = n
	if o.noScripts {
		b = backend.NewNoScripts(n)
	}
	mode := "unfair"
	switch {
	case o.reentrant:
		mode = "reentrant"
	case o.fair:
		mode = "fair"
	}
	return newClient(b, []*pubsub.Hub{h}, o, mode), nil
}

// newNode returns the backend of one deployment reached through rdb, and
// the hub that listens for its releases, as the options say.
func newNode(rdb redis.UniversalClient, o *options) (backend.Node, *pubsub.Hub) {
	_, cluster := rdb.(*redis.ClusterClient)
	sharded := o.sharded > 0 || (o.sharded == 0 && cluster)
	n := backend.NewNode(rdb, backend.Config{Fair: o.fair, Reentrant: o.reentrant, Sharded: sharded,
		Pipelining: o.pipelining, Replicas: o.replicas, AckTimeout: o.ackTimeout, TTL: o.ttl})
	return n, pubsub.New(rdb, sharded)
}

// Drain waits until the clean-up the Client left running in the background
// is over, or ctx ends (it returns ctx's error then): the undo of attempts
// whose outcome was unknown (an Acquire whose context ended while its
// request was in flight, or whose reply came too late), the release of a
// Do whose fn panicked when Redis did not answer, and, over a quorum, the
// node calls that were still going when a majority had decided, and the
// retries of a release that a quorum node missed. That work ends by
// itself: a first call is bounded by go-redis's read timeout, and the
// retries that follow end within max(TTL, 1s) of it (10 seconds at most,
// backend.RetryMax). Drain is
// for shutting down: call it after the last call on the Client (and on its
// Owner Clients) returned and before closing the go-redis clients, which
// would cut it short and leave what it was undoing in Redis until it
// expires. The Client stays usable.
func (c *Client) Drain(ctx context.Context) error {
	if err := c.bg.Wait(ctx); err != nil {
		return err
	}
	return c.b.Drain(ctx)
}

// LeaseTime returns the lease time each acquisition asks for (WithTTL). A
// Lock's own remaining lease is Lock.TTL, which asks Redis.
func (c *Client) LeaseTime() time.Duration { return c.opts.ttl }

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
func (c *Client) prepare(name string, opts []LockOption, try bool) (*Lock, error) {
	k, err := c.check(name)
	if err != nil {
		return nil, err
	}
	p, err := c.leaseFor(name, opts, try)
	if err != nil {
		return nil, err
	}
	l := &Lock{c: c, name: name, p: p, base: backend.Claim{Keys: k, TTL: p.ttl}}
	l.cl = &l.base
	if c.opts.reentrant {
		owner := c.owner
		if owner == "" {
			owner = newToken() // no owner: the acquisition is its own
		}
		l.cl.Owner = c.id + "/" + owner
	}
	l.cl.Permits, l.cl.RW = c.permits, c.rw
	l.cl.Campaign = c.campaign
	l.cl.SetToken(leaseToken(p.suffix))
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

// Owner returns a Client that takes c's reentrant locks (WithReentrant) as
// owner: an acquisition re-enters a lock that the same owner already holds
// through c or another of its Owner Clients, and waits like any other for
// a lock another owner holds. Pick an owner per logical flow of work (a
// request, a job), not per goroutine pool, and pass its Client down the
// calls that may take the lock again. It shares c's connections and
// configuration, and costs one small allocation.
//
// A reentrant Client without an owner makes each acquisition its own owner:
// a nested acquisition then waits for the outer one, as with a plain lock.
// Owner returns an error wrapping ErrInvalid if c is not reentrant or owner
// is empty.
func (c *Client) Owner(owner string) (*Client, error) {
	switch {
	case !c.opts.reentrant:
		return nil, fmt.Errorf("%w: Owner(%q): the Client's locks are not reentrant (WithReentrant)", ErrInvalid, owner)
	case owner == "":
		return nil, fmt.Errorf("%w: Owner(\"\"): empty owner", ErrInvalid)
	}
	v := *c
	v.owner = owner
	return &v, nil
}

// Do takes the lock name (waiting as Acquire does), runs fn, and releases
// the lock when fn returns — or panics: the lock is released and the panic
// goes on. fn's context is cancelled, with a cause wrapping ErrNotHeld, if
// the lock is lost while fn runs; its Err and Done consult the lease's
// validity deadline when called, so right after a pause longer than the
// lease (GC, a stopped process) ctx.Err() already reports the loss, before
// any timer has had a chance to run. fn should stop touching the protected
// resource then. fn gets the Lock too, for its fencing token (Lock.Fence)
// and validity. Calls nested in fn re-enter a reentrant lock when they go
// through the same owner's Client (see Owner).
//
// opts apply to the acquisition and its lease as for Acquire (LeaseTTL,
// MaxWait, HolderMeta, MaxHold). When the lease reaches its max hold
// (MaxHold, WithMaxHold), fn's context is cancelled with a cause that wraps
// ErrNotHeld and ErrMaxHold, and the lock is released at once.
//
// Do returns fn's error, joined with an error wrapping ErrNotHeld if the lock
// was lost before fn returned (the critical section may have overlapped with
// another holder's; with ErrMaxHold, fn ran past its max hold), or with the
// release error.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	l.onSettled(cancel) // a loss cancels fctx as it is declared
	finished := false
	defer func() {
		if !finished { // fn panicked
			cancel(context.Canceled)
			c.release(ctx, l)
		}
	}()
	ferr := fn(&heldContext{Context: fctx, held: l, cancel: cancel}, l)
	finished = true
	cancel(context.Canceled)
	rerr := c.release(ctx, l)
	switch {
	case rerr == nil:
		return ferr
	case ferr == nil:
		return rerr
	}
	return errors.Join(ferr, rerr)
}

// release releases the Lock of a Do. Do's caller has no Lock to call
// Release on again, so a release that fails for want of an answer from
// Redis is retried as an undo is (in the background, bounded) instead of
// leaving the lease to expire.
func (c *Client) release(ctx context.Context, l *Lock) error {
	err := l.Release(context.WithoutCancel(ctx))
	if err != nil && !errors.Is(err, ErrNotHeld) {
		c.undo(context.WithoutCancel(ctx), l.cl)
	}
	return err
}

// heldContext is the context Do and DoAll give fn. Its Err and Done check
// the leases' validity deadlines themselves (held's Err), so a loss is seen
// as soon as it is due, not when the expiry timer's goroutine gets to run.
// (Contexts derived from it learn of the loss from the timer, a moment
// later.)
type heldContext struct {
	context.Context
	held   interface{ Err() error } // the Lock, or the MultiLock
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
