package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// RWMutex is a read-write lock (docs/rwmutex.md): many readers or one writer,
// each hold a [*Lock], queued in arrival order. Safe for concurrent use.
type RWMutex struct {
	name           string
	c              *Client // the Client that made it
	reader, writer RWLocker
}

// RWMutex returns the read-write lock name; [ErrInvalid] for a bad name.
func (c *Client) RWMutex(name string) (*RWMutex, error) {
	if _, err := c.check(name); err != nil {
		return nil, err
	}
	if err := c.carries(&writeHolds, fmt.Sprintf("RWMutex(%q)", name), words{plural: "read-write locks", one: "a read-write lock", verb: "keep"}); err != nil {
		return nil, err
	}
	rw := &RWMutex{name: name, c: c}
	rw.reader, rw.writer = RWLocker{rw, &readHolds}, RWLocker{rw, &writeHolds}
	return rw, nil
}

// The kinds of a read-write lock's read and write holds: they queue,
// whatever WithUnfair says.
var (
	readHolds = kind{slot: newMode("read"), lease: backend.Read, waits: queues{}, acquireOp: "acquire", releaseOp: "release", holders: tokens{},
		why: "a writer holds the lock, or others wait ahead"}
	writeHolds = kind{slot: newMode("write"), lease: backend.Write, waits: queues{}, needs: "all", acquireOp: "acquire", releaseOp: "release", holders: tokens{},
		why: "the lock is held (by readers or a writer), or others wait ahead"}
)

// Name returns the read-write lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// Reader returns what takes read holds of the lock.
func (rw *RWMutex) Reader() *RWLocker { return &rw.reader }

// Writer returns what takes write holds of the lock.
func (rw *RWMutex) Writer() *RWLocker { return &rw.writer }

// Downgrade turns the write hold w into a read hold in one step, keeping its
// token, fence and lease: no writer comes between. [ErrInvalid] if w is not a
// write hold of it; after an unknown outcome, Downgrade again.
func (rw *RWMutex) Downgrade(ctx context.Context, w *Lock) error {
	if w == nil || w.name != rw.name || w.c.engine != rw.c.engine {
		return fmt.Errorf("%w: Downgrade of %q: not a hold of it", ErrInvalid, rw.name)
	}
	// Every other call of w that sends its claim waits: a Release, an
	// extension, a Fence. A loss found meanwhile is told once all three
	// are given back (see Lock.lapse).
	defer w.tellUntold()
	for _, t := range []uint8{relTurn, extTurn, fenceTurn} {
		if !w.take(ctx, t) {
			return opError("downgrade", rw.name, backend.NotSent(ctx.Err()))
		}
		defer w.give(t)
	}
	if w.cl.Kind != backend.Write && w.cl.Kind != backend.Downgrading { // (asking again settles an unknown outcome)
		return fmt.Errorf("%w: Downgrade of %q: not a write hold", ErrInvalid, rw.name)
	}
	if err := w.lapse(); err != nil {
		return err
	}
	// Until the reply, the hold may be either: an undo at the max hold,
	// meanwhile, ends both (it reads the claim under w.mu).
	w.mu.Lock()
	cl := *w.cl
	w.cl.SetKind(backend.Downgrading)
	w.mu.Unlock()
	ok, err := backend.OpValue[bool](ctx, w.c.b, func(ctx context.Context, n backend.Node) (any, error) {
		return n.Downgrade(ctx, &cl)
	})
	w.mu.Lock()
	w.cl.SetKind(cl.Kind) // (only its kind changes: Key, Token and TTL read the rest unlocked)
	// Downgraded, it counts as a read in the held counts (Held), unless a
	// loss or a release ended its count already.
	if ok && err == nil && w.err == nil && w.slot != readHolds.slot {
		w.c.held[w.slot].ended.Add(1)
		w.slot = readHolds.slot
		w.c.held[w.slot].began.Add(1)
	}
	w.mu.Unlock()
	if err := w.answered("downgrade", "the write hold is gone", ok, err); err != nil {
		return err
	}
	return w.lapse() // (lost in flight, at the max hold: ErrMaxHold)
}

// RWHold is one live hold of a read-write lock.
type RWHold struct {
	Token string        // the hold's token: its Lock's Token
	TTL   time.Duration // its remaining lease
	Write bool          // a write hold (else a read)
	Meta  string        // its holder metadata (HolderMeta), read from Token; "" if none
}

// A read-write lock's live holds show in Info as its RWHolds.
var _ = part(func(info *Info, st backend.State) {
	for _, h := range st.Leases {
		if h.Kind == backend.Read || h.Kind == backend.Write {
			info.RWHolds = append(info.RWHolds, RWHold{Token: h.Token, TTL: h.Left, Write: h.Kind == backend.Write, Meta: metaOf(h.Token)})
		}
	}
})

// Holders returns the live holds, soonest first; [ErrWrongType]: another kind.
func (rw *RWMutex) Holders(ctx context.Context) ([]RWHold, error) {
	info, err := rw.c.Inspect(ctx, rw.name)
	return holdsAs(rw.name, info, err, info.RWHolds, info.Permits, "a read-write lock", "a semaphore")
}

// RWLocker takes read or write holds; [ErrInvalid] if zero or nested in a hold.
type RWLocker struct {
	rw *RWMutex // the lock it takes holds of
	k  *kind    // its acquisitions: read or write holds
}

// Write reports whether l takes write holds.
func (l *RWLocker) Write() bool { return l.k == &writeHolds }

// TryAcquire makes one attempt to take a hold, as [Client.TryAcquire] does.
func (l *RWLocker) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	if err := l.nested(ctx); err != nil {
		return nil, err
	}
	return l.rw.c.acquireAs(ctx, l.k, l.rw.name, opts, true)
}

// Acquire takes a hold as [Client.Acquire] does.
func (l *RWLocker) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	if err := l.nested(ctx); err != nil {
		return nil, err
	}
	return l.rw.c.acquireAs(ctx, l.k, l.rw.name, opts, false)
}

// Do takes a hold, runs fn and releases it, as [Client.Do] does.
func (l *RWLocker) Do(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return l.do(ctx, fn, opts, false)
}

// TryDo runs fn under a hold only if granted now, else [ErrNotAcquired].
func (l *RWLocker) TryDo(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	return l.do(ctx, fn, opts, true)
}

// do is Do (try: TryDo).
func (l *RWLocker) do(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts []LockOption, try bool) error {
	if err := l.nested(ctx); err != nil {
		return err
	}
	return l.rw.c.do(ctx, l.k, l.rw.name, fn, opts, try)
}

// nested returns the error of an acquisition whose context carries a live
// hold of the same lock (a Do's, or a Lock's Context), which it would wait
// for forever, or by an RWLocker of no RWMutex (nil or zero).
func (l *RWLocker) nested(ctx context.Context) error {
	if l == nil || l.rw == nil {
		return fmt.Errorf("%w: an RWLocker is an RWMutex's Reader or Writer", ErrInvalid)
	}
	for _, h := range leasesIn(ctx) {
		if h.name != l.rw.name || h.c.engine != l.rw.c.engine {
			continue
		}
		why := "the context holds the write of the same lock, which this hold would wait for"
		switch read := h.mode() == readHolds.mode(); {
		case read && l.k == &writeHolds:
			why = "a write inside a read of the same lock would wait for that read; release it first (a read cannot be upgraded)"
		case read:
			why = "a read inside a read of the same lock would wait behind a writer queued between them, which waits for the first"
		}
		return opError("acquire", l.rw.name, backend.Because(ErrInvalid, why))
	}
	return nil
}
