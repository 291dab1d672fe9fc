package dlock

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// DefaultTTL is the default LeaseTTL: how long a dead holder blocks others.
const DefaultTTL = 10 * time.Second

// DefaultPrefix is put before every key when WithPrefix is not given.
const DefaultPrefix = "dlock:"

// MaxNameLen is the longest lock name accepted, in bytes.
const MaxNameLen = 1024

// DefaultMinBackoff and DefaultMaxBackoff bound [WithUnfair]'s default backoff.
const (
	DefaultMinBackoff = 10 * time.Millisecond
	DefaultMaxBackoff = time.Second
)

// Option configures a Client, for [New] and [NewRedlock].
type Option interface {
	applyOption(*options)
}

// option is an Option that sets what its function sets.
type option func(*options)

func (f option) applyOption(o *options) { f(o) }

type options struct {
	autoExtend          bool
	prefix              string
	backoff             Backoff
	drift               time.Duration // < 0: derived from the TTL
	observers           []Observer
	clock               *backend.ClockHook // shared by the Client's Nodes; its functions are set by build (see clock.go)
	unfair              bool               // WithUnfair: waiters poll
	pipelining          bool               // concurrent calls share pipelines; off WithoutScripts, and for tests (internal/testopt)
	reentrant           bool
	nodeTimeout         time.Duration // quorum only: NewRedlock's
	replicas            int
	ackTimeout          time.Duration
	sharded, shardedSet bool // WithShardedPubSub(sharded) was given (shardedSet); else a Cluster client uses sharded pub/sub
	noScripts           bool // WithoutScripts: transactions instead of scripts (noscript.go)
	durable             time.Duration

	lease lease // what an acquisition asks for without LockOptions: the lease options given to New

	firstInvalid // New and NewRedlock return it, wrapping ErrInvalid
}

// firstInvalid is the first invalid option of a set, as the caller wrote
// it: "" while there is none.
type firstInvalid string

// invalid records an invalid option, unless one was recorded before. The
// message starts with the option, as the caller wrote it.
func (f *firstInvalid) invalid(format string, args ...any) {
	f.invalidIf(true, format, args...)
}

// invalidIf records an invalid option, as invalid does, if bad: a list of
// them records the first that is.
func (f *firstInvalid) invalidIf(bad bool, format string, args ...any) {
	if bad && *f == "" {
		*f = firstInvalid(fmt.Sprintf(format, args...))
	}
}

// apply returns the defaults with opts applied, in order.
func apply(opts []Option) options {
	o := options{
		lease:      lease{ttl: DefaultTTL, wait: -1, meta: defaultMeta(), suffix: metaSuffix(defaultMeta()), dlCheck: DefaultDeadlockCheck},
		autoExtend: true,
		prefix:     DefaultPrefix,
		backoff:    ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff),
		drift:      -1,
		pipelining: true,
		clock:      new(backend.ClockHook),
	}
	for i, opt := range opts {
		switch opt := opt.(type) {
		case nil:
			o.invalid("option %d is nil", i+1)
		case interface{ Pipelining() bool }: // internal/testopt's
			o.pipelining = opt.Pipelining()
		default:
			opt.applyOption(&o)
		}
	}
	o.invalidIf(o.lease.watch && !o.autoExtend, "%s", watchNeedsDog)
	d := o.driftFor(o.lease.ttl)
	o.invalidIf(d >= o.lease.ttl, "WithDrift(%v): the drift must be below the TTL (%v)", d, o.lease.ttl)
	o.lease.waitSet, o.lease.metaSet = false, false // the Client's defaults: per-call checks apply to per-call options
	return o
}

// MinTTL is the shortest lease time accepted, by LeaseTTL and Lock.Extend.
const MinTTL = 30 * time.Millisecond

// WithAutoExtend(false) stops the watchdog extending each Lock every TTL/3.
func WithAutoExtend(on bool) Option {
	return option(func(o *options) { o.autoExtend = on })
}

// WithPrefix sets every key's prefix (default [DefaultPrefix]); no '{' or '}'.
func WithPrefix(prefix string) Option {
	return option(func(o *options) {
		o.invalidIf(strings.ContainsAny(prefix, "{}"), "WithPrefix(%q): the prefix must not contain '{' or '}'", prefix)
		o.prefix = prefix
	})
}

// WithDrift sets the margin d for clock-rate differences: a lease taken at t is
// valid until t + TTL − d (default TTL/100 + 2ms; 0 ≤ d < TTL).
func WithDrift(d time.Duration) Option {
	return option(func(o *options) {
		o.invalidIf(d < 0, "WithDrift(%v): the drift must not be negative", d)
		o.drift = d
	})
}

// WithUnfair makes waiters poll on b (nil: the default backoff) instead of
// queueing, as reentrant, quorum and script-free Clients do.
func WithUnfair(b Backoff) Option {
	return option(func(o *options) {
		o.unfair = true
		if b != nil {
			o.backoff = b
		}
	})
}

// WithReentrant(true) makes locks reentrant per [Client.Owner]; NewRedlock and
// WithoutScripts refuse it.
func WithReentrant(on bool) Option {
	return option(func(o *options) { o.reentrant = on })
}

// WithReplicaAck makes grants and extensions wait up to timeout (1ms to
// ReadTimeout) for n replicas; one not acknowledged is undone ([ErrReplicaAck],
// [ErrNotAcquired]). It narrows, but does NOT close, a failover's window.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return option(func(o *options) {
		// (WAIT counts whole milliseconds, and waits for ever given 0.)
		o.invalidIf(n < 0 || (n > 0 && timeout < time.Millisecond), "WithReplicaAck(%d, %v): need n ≥ 0 and a timeout of at least 1ms", n, timeout)
		o.replicas, o.ackTimeout = n, timeout
	})
}

// WithDurableGrants makes grants and extensions wait up to timeout (1ms to
// ReadTimeout) for the append-only file (WAITAOF, Redis 7.2+), else undone:
// [ErrNotDurable], [ErrNotAcquired]. [ErrInvalid]: no WAITAOF or appendonly.
func WithDurableGrants(timeout time.Duration) Option {
	return option(func(o *options) {
		o.invalidIf(timeout < time.Millisecond, "WithDurableGrants(%v): need a timeout of at least 1ms", timeout)
		o.durable = timeout
	})
}

// WithShardedPubSub announces releases with SPUBLISH (on) or PUBLISH (off); on
// is the default for a Cluster.
func WithShardedPubSub(on bool) Option {
	return option(func(o *options) { o.sharded, o.shardedSet = on, true })
}

// leaseFor returns the shortest lease time, in whole milliseconds (as Redis
// takes it), whose validity (the lease time less its drift margin) is at
// least validity.
func (o *options) leaseFor(validity time.Duration) time.Duration {
	const longest = time.Duration(math.MaxInt64)
	if validity > longest/2 || o.drift > longest/2 { // (the sums below would overflow: the caller's TTL, at most this, is the lease)
		return longest
	}
	// ttl − (ttl/100 + 2ms) ≥ validity: (validity + 2ms) * 100/99, summed so as not to overflow
	ttl := validity + 2*time.Millisecond + (validity+2*time.Millisecond)/99
	if o.drift >= 0 {
		ttl = validity + o.drift
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
