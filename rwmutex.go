package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// RWMutex is a distributed read-write lock: many readers of a name at
// once, or one writer, across every process that uses it. Each read hold
// and each write hold is a lease of its own, returned as a *Lock with
// everything a lock's lease has: a random token, a TTL extended by the
// watchdog, Done and Err, Extend, Release and a fence. A holder that dies
// without releasing frees its hold when its TTL runs out, whether or not
// anyone else is running: Redis drops a hold at its deadline.
//
// Waiting is first come, first served, whatever WithFair says: readers and
// writers queue in Redis in one line in arrival order. A reader that comes
// while a writer waits queues behind it, so a stream of readers cannot
// starve a writer; a release grants the lock straight to the waiters at
// the head of the line that may have it (a run of readers together, or
// one writer) and wakes only those, over pub/sub (a waiter sleeps
// otherwise, waking only to renew its place in the line). TryAcquire does
// not take the lock while others wait, even a read while others read. A
// waiter that dies leaves the line after max(TTL, 1s).
//
// # What it guarantees, and what it does not
//
// What the package documentation says of a lock holds for each hold: a
// hold excludes from its grant until Lock.ValidUntil (a write every other
// hold, a read every write), validity is counted from before the request,
// a request of a hold that lands late or twice (delayed in the network,
// re-sent by go-redis) takes nothing once the hold was given back or its
// attempt undone, and a holder paused past its TTL can act after its hold
// was granted to someone else. Fences order writes after reads: each hold
// gets, from Lock.Fence, a number strictly greater than every fence issued
// before for the name (to any hold, or to a lock of the name), issued
// while it is held; a write is granted only once every read before it has
// ended, so a write's fence is above the fence of every read granted
// before it, and a resource that refuses writes fenced below the highest
// fence it has seen (of a read or a write) refuses a writer that lost its
// hold to later readers or writers. Reads are not ordered among themselves.
//
// # Nesting
//
// A holder that asks for the same name again, through the same Client,
// would wait for itself: a write waits for the holder's own read to end,
// a read for its own write, and a second read waits behind a writer that
// queued after the first (as with sync.RWMutex, recursive read locking is
// a deadlock). Do marks fn's context with its hold, and an Acquire,
// TryAcquire or Do of the same name with that context (or one derived
// from it) through the same Client, or another from the same New, fails
// at once with an error wrapping ErrInvalid instead. A holder that got its
// hold from Acquire must not ask again until it released it; nothing can
// tell it from another goroutine of the process that asks.
//
// An RWMutex is a small value bound to the Client that made it; it is safe
// for concurrent use. A name is one kind of lock: while holds are held, a
// lock or a semaphore of the same name fails with ErrWrongType, and while
// a lock or a semaphore is held, so does the read-write lock.
type RWMutex struct {
	name   string
	c      *Client // the Client that made it, for Holders
	reader RWLocker
	writer RWLocker
}

// RWMutex returns the read-write lock name, kept on c's Redis deployment
// under the same prefix, TTL, watchdog and hooks as c's locks. It is a
// sorted set at "dlock:{name}" (see the package documentation, Keys): one
// member per hold, "r:<token>" for a read and "w:<token>" for a write,
// scored by its deadline.
//
// It returns an error wrapping ErrInvalid for a bad name, and for a Client
// that cannot keep a read-write lock: a reentrant Client (WithReentrant:
// holds are not owned), one made WithoutScripts (its grants and line
// need a script's atomic reads and writes), and a quorum (NewRedlock). A quorum waits
// unfairly, each node keeping its own line: readers could then starve a
// writer, and a line kept on several independent nodes has no one order.
func (c *Client) RWMutex(name string) (*RWMutex, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	switch {
	case c.mode == "quorum":
		return nil, fmt.Errorf("%w: RWMutex(%q): read-write locks are not available over a quorum (NewRedlock)", ErrInvalid, name)
	case c.opts.reentrant:
		return nil, fmt.Errorf("%w: RWMutex(%q): a reentrant Client (WithReentrant) cannot keep a read-write lock", ErrInvalid, name)
	case c.opts.noScripts:
		return nil, fmt.Errorf("%w: RWMutex(%q): read-write locks need scripts; a Client made WithoutScripts() cannot keep one", ErrInvalid, name)
	}
	rw := &RWMutex{name: name, c: c}
	for _, s := range []*RWLocker{&rw.reader, &rw.writer} {
		v := *c
		v.opts.fair = true // holds' waiters queue, whatever WithFair says
		v.rw, v.mode = "r", "read"
		if s == &rw.writer {
			v.rw, v.mode = "w", "write"
		}
		*s = RWLocker{c: &v, name: name, nest: rwNestKey{c.bg, c.opts.prefix + "{" + name + "}"}}
	}
	return rw, nil
}

// Name returns the read-write lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// Reader returns what takes read holds of the lock.
func (rw *RWMutex) Reader() *RWLocker { return &rw.reader }

// Writer returns what takes write holds of the lock.
func (rw *RWMutex) Writer() *RWLocker { return &rw.writer }

// RWHold is one live hold of a read-write lock, as RWMutex.Holders and
// Client.Inspect report it.
type RWHold struct {
	Token string        // the hold's token: its Lock's Token
	TTL   time.Duration // its remaining lease
	Write bool          // a write hold (else a read)
	Meta  string        // its holder metadata (WithHolderMeta, HolderMeta), read from Token; "" if none
}

// Holders returns the holds held now, the soonest to end first: reads, or
// one write. It is for operators and metrics: the answer may be stale by
// the time it arrives. It returns ErrWrongType if the name is held as a
// lock or a semaphore.
func (rw *RWMutex) Holders(ctx context.Context) ([]RWHold, error) {
	info, err := rw.c.Inspect(ctx, rw.name)
	switch {
	case err != nil:
		return nil, err
	case info.Held && info.Type != "zset":
		return nil, opError("inspect", rw.name, backend.Because(ErrWrongType, fmt.Sprintf("the name is held as a lock (a %s), not a read-write lock", info.Type)))
	case info.Permits != nil:
		return nil, opError("inspect", rw.name, backend.Because(ErrWrongType, "the name is held as a semaphore, not a read-write lock"))
	}
	return info.RWHolds, nil
}

// RWLocker takes one kind of hold of a read-write lock: reads
// (RWMutex.Reader) or writes (RWMutex.Writer). Its methods are those of a
// Locker, without the name.
type RWLocker struct {
	c    *Client // a variant of the RWMutex's Client whose acquisitions are holds of this kind
	name string
	nest rwNestKey
}

// rwNestKey marks a context with the hold of a read-write lock that Do
// gives fn: the Clients from one New (their shared tracker) and the lock's
// key. Its value is "r" or "w".
type rwNestKey struct {
	bg  *backend.Tracker
	key string
}

// Write reports whether l takes write holds.
func (l *RWLocker) Write() bool { return l.c.rw == "w" }

// TryAcquire makes one attempt to take a hold: a read succeeds if no write
// is held and nobody waits in the line, a write if nothing is held and
// nobody waits. Its errors are those of Client.TryAcquire: one wrapping
// ErrNotAcquired if the hold may not be had now, ErrWrongType if the name
// is held as a lock or a semaphore, and ErrInvalid for an invalid option
// or for a context that carries a hold of the name (see RWMutex, Nesting).
// opts apply as for Client.TryAcquire.
func (l *RWLocker) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	if err := l.nested(ctx); err != nil {
		return nil, err
	}
	return l.c.TryAcquire(ctx, l.name, opts...)
}

// Acquire takes a hold, waiting in arrival order as long as ctx allows. It
// returns, and leaves behind, what Client.Acquire does: an error that
// matches both ErrNotAcquired and ctx.Err() if ctx ends first, with no
// hold, queue entry or subscription left. The returned Lock is the hold:
// release it with Lock.Release, which grants the lock to the waiters that
// may have it. opts apply as for Client.Acquire (LeaseTTL, MaxWait,
// HolderMeta, MaxHold). It fails with ErrInvalid, at once, for a context
// that carries a hold of the name (see RWMutex, Nesting).
func (l *RWLocker) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	if err := l.nested(ctx); err != nil {
		return nil, err
	}
	return l.c.Acquire(ctx, l.name, opts...)
}

// Do takes a hold (waiting as Acquire does), runs fn, and gives the hold
// back when fn returns or panics, as Client.Do does for a lock: fn's
// context is cancelled, with a cause wrapping ErrNotHeld, if the hold is
// lost while fn runs. fn's context carries the hold, so that asking for
// the name again with it fails instead of waiting for itself (see
// RWMutex, Nesting).
func (l *RWLocker) Do(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	if err := l.nested(ctx); err != nil {
		return err
	}
	return l.c.Do(ctx, l.name, func(ctx context.Context, held *Lock) error {
		return fn(context.WithValue(ctx, l.nest, l.c.rw), held)
	}, opts...)
}

// nested returns the error of an acquisition whose context carries a hold
// of the same lock, which it would wait for forever.
func (l *RWLocker) nested(ctx context.Context) error {
	held, _ := ctx.Value(l.nest).(string)
	var why string
	switch {
	case held == "":
		return nil
	case held == "r" && l.c.rw == "w":
		why = "a write inside a read of the same lock would wait for that read; release it first (a read cannot be upgraded)"
	case held == "r":
		why = "a read inside a read of the same lock would wait behind a writer queued between them, which waits for the first"
	default:
		why = "the context holds the write of the same lock, which this hold would wait for"
	}
	return opError("acquire", l.name, backend.Because(ErrInvalid, why))
}

// rwRefusal says why a hold of kind rw was not granted.
func rwRefusal(rw string) string {
	if rw == "w" {
		return "the lock is held (by readers or a writer), or others wait ahead"
	}
	return "a writer holds the lock, or others wait ahead"
}
