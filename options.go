package dlock

import (
	"fmt"
	"strings"
	"time"
)

// DefaultTTL is the lease time used when WithTTL is not given. The watchdog
// extends a held lease every TTL/3, so the TTL bounds only how long a holder
// that died keeps others waiting, and how long a stalled holder (GC pause,
// slow network) may go without reaching Redis before it loses the lock. Ten
// seconds tolerates two missed extensions of multi-second hiccups while a
// crashed holder blocks others for at most ten seconds.
const DefaultTTL = 10 * time.Second

// DefaultPrefix is put before every key when WithPrefix is not given.
const DefaultPrefix = "dlock:"

// MaxNameLen is the longest lock name accepted, in bytes. Redis would take
// far longer keys, but a name this long is a bug (a payload used as a key),
// and every key and message of the lock repeats it.
const MaxNameLen = 1024

// Backoff bounds used when WithBackoff is not given. Waiters are normally
// woken by a release message; the backoff only covers a holder that died
// without releasing, or a lost message.
const (
	DefaultMinBackoff = 10 * time.Millisecond
	DefaultMaxBackoff = time.Second
)

// Option configures a Client.
type Option func(*options)

type options struct {
	ttl         time.Duration
	autoExtend  bool
	prefix      string
	backoff     Backoff
	drift       time.Duration // < 0: derived from the TTL
	hooks       Hooks
	observers   []Observer
	fair        bool
	pipelining  bool
	reentrant   bool
	nodeTimeout time.Duration // quorum only; 0: derived from the TTL
	replicas    int
	ackTimeout  time.Duration
	sharded     int // 0: auto (a Cluster client uses sharded pub/sub), 1 on, -1 off
	meta        string
	maxHold     time.Duration // 0: no cap
	noScripts   bool          // WithoutScripts: transactions instead of scripts (noscript.go)

	lease lease // what an acquisition asks for without LockOptions: the above, applied

	// Which options were given, for those that apply only with others.
	fairSet, backoffSet, pipeliningSet, nodeTimeoutSet bool

	err error // the first invalid option: New and NewRedlock return it
}

func defaultOptions() options {
	return options{
		ttl:        DefaultTTL,
		autoExtend: true,
		prefix:     DefaultPrefix,
		backoff:    ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff),
		drift:      -1,
		pipelining: true,
		fair:       true,
		meta:       defaultMeta(),
	}
}

// invalid records an invalid option, unless one was recorded before. The
// message starts with the option, as the caller wrote it.
func (o *options) invalid(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
}

// apply returns the defaults with opts applied, in order.
func apply(opts []Option) options {
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			o.invalid("option %d is nil", i+1)
			continue
		}
		opt(&o)
	}
	o.scriptFree()
	if d := o.driftFor(o.ttl); d >= o.ttl {
		o.invalid("WithDrift(%v): the drift must be below the TTL (%v)", d, o.ttl)
	}
	o.lease = lease{ttl: o.ttl, wait: -1, maxHold: o.maxHold, meta: o.meta, suffix: metaSuffix(o.meta)}
	return o
}

// WithTTL sets the lease time of each acquisition; the default is
// DefaultTTL (10s). A TTL below MinTTL leaves too little room for a round
// trip: New and NewRedlock refuse it (ErrInvalid).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) {
		if ttl < MinTTL {
			o.invalid("WithTTL(%v): the TTL must be at least %v", ttl, MinTTL)
			return
		}
		o.ttl = ttl
	}
}

// MinTTL is the shortest lease time accepted, by WithTTL and Lock.Extend.
const MinTTL = 30 * time.Millisecond

// WithAutoExtend turns the watchdog on or off. When on (the default), every
// held Lock extends its lease every TTL/3 until it is released or lost. When
// off, a lease ends at its TTL unless Lock.Extend is called; Done still
// closes when the validity runs out.
func WithAutoExtend(on bool) Option {
	return func(o *options) { o.autoExtend = on }
}

// WithPrefix sets the prefix of every key dlock writes; the default is
// DefaultPrefix ("dlock:"). A name N is stored at prefix + "{N}", so all keys
// of one lock share a Redis Cluster hash slot; the prefix must therefore not
// contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if strings.ContainsAny(prefix, "{}") {
			o.invalid("WithPrefix(%q): the prefix must not contain '{' or '}'", prefix)
			return
		}
		o.prefix = prefix
	}
}

// WithBackoff sets how long Acquire sleeps between attempts when no release
// message wakes it. The default is ExponentialBackoff(10ms, 1s). A sleep is
// also cut short when the holder's lease is due to run out. A duration of
// zero or less from b is taken as DefaultMinBackoff, so that a waiter never
// polls Redis in a tight loop.
//
// Only unfair waiters back off: those of WithFair(false), of a reentrant
// Client (WithReentrant) and of a quorum (NewRedlock). Fair waiters, the
// default, are woken by the release that hands them the lock and never
// back off, so New refuses WithBackoff (ErrInvalid) unless the Client waits
// unfairly: with fair waiting on, whether by default or by WithFair(true),
// pass WithFair(false) to wait with a backoff.
func WithBackoff(b Backoff) Option {
	return func(o *options) {
		if b == nil {
			o.invalid("WithBackoff(nil): the backoff must not be nil")
			return
		}
		o.backoff, o.backoffSet = b, true
	}
}

// WithDrift sets the margin taken off every lease's validity for the
// difference between the client's and the server's clock rates and the
// server's expiry precision: a lease acquired at t is treated as valid until
// t + TTL − drift. The default is TTL/100 + 2ms. It must be non-negative and
// below the TTL (ErrInvalid from New and NewRedlock).
func WithDrift(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.invalid("WithDrift(%v): the drift must not be negative", d)
			return
		}
		o.drift = d
	}
}

// WithFair turns first-come, first-served waiting on or off. When on,
// waiters queue in Redis in arrival order and a release hands the lock
// straight to the first live waiter, waking only that one; TryAcquire does
// not take a free lock while others wait. A waiter that dies is skipped
// after max(TTL, 1s). All clients of one lock name must use the same mode.
//
// The default is on. Off, a released lock goes to whichever waiter asks
// first: slightly cheaper when uncontended (a simpler script), but under
// contention one goroutine can take the lock again and again while others
// starve, and waiters poll on their backoff. The README shows the figures.
//
// Reentrant locks (WithReentrant) and a quorum (NewRedlock) always wait
// unfairly: WithFair(true) with either is refused (ErrInvalid), while the
// default needs no WithFair(false).
func WithFair(on bool) Option {
	return func(o *options) { o.fair, o.fairSet = on, true }
}

// WithPipelining turns on or off the sharing of round trips: lock
// operations that goroutines of one Client issue while another is in flight
// are sent together as one pipeline. It is on by default: a lone call is sent
// at once, so it costs nothing when there is no concurrency. A quorum
// (NewRedlock) pipelines each node's calls.
func WithPipelining(on bool) Option {
	return func(o *options) { o.pipelining, o.pipeliningSet = on, true }
}

// WithReentrant makes the Client's locks reentrant: an owner that already
// holds a lock takes it again at once, and the lock is free when the owner
// has released every hold. The owner is given explicitly, with
// Client.Owner, which returns the Client to acquire through for it; it is
// the Client's random instance ID together with the owner string. Without
// an owner, every acquisition is its own owner and the lock behaves like a
// plain one.
//
// A reentrant lock is a hash at "dlock:{N}" holding its owner and one field
// per hold (each hold a lease of its own); a plain lock is a string. Use one kind per name: the other kind fails with
// ErrWrongType. Reentrant locks wait as in unfair mode: New refuses
// WithFair(true) with WithReentrant(true) (ErrInvalid), and NewRedlock
// refuses WithReentrant(true). The default is off.
func WithReentrant(on bool) Option {
	return func(o *options) { o.reentrant = on }
}

// WithReplicaAck makes every acquisition and extension wait, with WAIT,
// until n replicas have acknowledged it, for at most timeout. An
// acquisition they do not acknowledge in time is undone and fails with an
// error matching ErrReplicaAck and ErrNotAcquired; an extension they do not
// acknowledge is retried by the watchdog until the lease's validity runs out.
//
// It narrows the window in which a failover to a replica loses a lock that
// was just granted: a lock acknowledged by n replicas survives the loss of
// the master as long as one of them is promoted. It does not close it:
// WAIT is not consensus, a replica that acknowledged may not be the one
// promoted, and an acknowledged write can still be lost if the promoted
// replica restarts without persistence. Keep timeout well under the
// client's read timeout (go-redis's default: 5s since v9.22, 3s before).
// On a Cluster client the script and WAIT go to the master that owns the
// lock's slot (a MOVED reply reloads the slot map and tries again; an ASK,
// during a slot migration, fails the call). Not available over a quorum:
// NewRedlock refuses it (ErrInvalid), for n > 0. The default is no
// acknowledgement (n = 0).
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(o *options) {
		if n < 0 || (n > 0 && timeout <= 0) {
			o.invalid("WithReplicaAck(%d, %v): need n ≥ 0 and a positive timeout", n, timeout)
			return
		}
		o.replicas, o.ackTimeout = n, timeout
	}
}

// WithShardedPubSub chooses how releases are announced: with sharded pub/sub
// (SPUBLISH/SSUBSCRIBE, Redis 7 and later), which keeps a lock's messages on
// the cluster node that owns its keys, or with plain PUBLISH, which a
// Cluster broadcasts to every node. The default is sharded for a
// *redis.ClusterClient and plain otherwise; over a quorum (NewRedlock) it
// applies to every node.
func WithShardedPubSub(on bool) Option {
	return func(o *options) {
		o.sharded = -1
		if on {
			o.sharded = 1
		}
	}
}

// WithHolderMeta sets the holder metadata of the Client's leases: a short
// text that says who holds a lock, such as a host and process, a job or a
// request ID. The default is "hostname:pid" of the process; "" gives leases
// none. HolderMeta sets it for one acquisition.
//
// It shows wherever the holder is named: Info.Meta (Client.Inspect, List,
// and `dlock inspect`), Lock.Meta, and the *NotAcquiredError of an
// acquisition that found the lock taken (TryAcquire, or an Acquire that
// gave up waiting). It costs Redis no command and no key: the lease's token
// carries it (see Lock.Token), escaped, so every key, queue entry and
// message that names the lease names its holder too, and a lock handed to
// a fair waiter shows the waiter's. Anyone who can read the Redis
// keyspace can read it: put no secret there.
//
// It must be valid UTF-8, at most MaxMetaLen (128) bytes, without control
// characters; New refuses other text (ErrInvalid).
func WithHolderMeta(meta string) Option {
	return func(o *options) {
		if why := badMeta(meta); why != "" {
			o.invalid("WithHolderMeta(%q): %s", meta, why)
			return
		}
		o.meta = meta
	}
}

// WithMaxHold caps how long each lease of the Client may be held: d after
// the lease was taken — counted, as its validity is, from before the
// request that took it was sent (for a lock handed to a fair waiter, from
// when the waiter queued) — the lease ends, however the watchdog or Extend
// would have gone on. MaxHold sets the cap for one acquisition.
//
// The watchdog's last extension is cut so that the lease's validity ends
// exactly at the cap (Redis's expiry, as for every lease, the drift margin
// after it), and Lock.Extend never goes past it: an Extend that would is
// cut to the cap and returns an error wrapping ErrMaxHold (the lease is
// still held, until the cap). At the cap the lease ends as a loss does:
// Done closes, Err returns an error wrapping both ErrNotHeld and ErrMaxHold,
// the Lost hook is called, Do cancels its function's context with that
// cause — and the lock is released at once, so that a waiter takes it (a
// fair waiter by handover) without waiting for the expiry. Lock.Release
// after that returns the same error.
//
// A cap below the TTL gives every lease a lease time of the cap. d must be
// 0 (no cap, the default) or at least MinTTL; New and NewRedlock refuse
// other values (ErrInvalid).
func WithMaxHold(d time.Duration) Option {
	return func(o *options) {
		if why := badMaxHold(d); why != "" {
			o.invalid("WithMaxHold(%v): %s", d, why)
			return
		}
		o.maxHold = d
	}
}

// WithHooks sets functions called on lock events, for metrics and tracing.
func WithHooks(h Hooks) Option {
	return func(o *options) { o.hooks = h }
}

// leaseFor returns the shortest lease time, in whole milliseconds (as Redis
// takes it), whose validity (the lease time less its drift margin) is at
// least validity.
func (o *options) leaseFor(validity time.Duration) time.Duration {
	var ttl time.Duration
	if o.drift >= 0 {
		ttl = validity + o.drift
	} else {
		// ttl − (ttl/100 + 2ms) ≥ validity
		ttl = (validity + 2*time.Millisecond) * 100 / 99
	}
	ttl = (ttl + time.Millisecond - 1).Truncate(time.Millisecond)
	for ttl-o.driftFor(ttl) < validity { // integer division's rounding
		ttl += time.Millisecond
	}
	return ttl
}

// driftFor returns the drift margin for a lease of ttl.
func (o *options) driftFor(ttl time.Duration) time.Duration {
	if o.drift >= 0 {
		return o.drift
	}
	return ttl/100 + 2*time.Millisecond
}

// Hooks are called on lock events. Any field may be nil. Calls may come from
// several goroutines at once and must not block: they run on the path of
// the operation that triggered them.
type Hooks struct {
	// Acquired is called when a lock is taken, with the time spent waiting.
	Acquired func(name string, waited time.Duration)
	// Released is called when a held lock is released, with the time it was held.
	Released func(name string, held time.Duration)
	// Lost is called when a lock is lost before Release; err wraps ErrNotHeld.
	Lost func(name string, err error)
}
