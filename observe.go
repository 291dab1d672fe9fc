package dlock

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Op is the kind of operation an Observer is told of.
type Op string

// The operations an Observer sees.
const (
	OpAcquire  Op = "acquire"  // TryAcquire, Acquire, Do's acquisition
	OpRelease  Op = "release"  // Release, Do's release
	OpExtend   Op = "extend"   // Extend, the watchdog's extensions
	OpLost     Op = "lost"     // a lease lost before its release
	OpJeopardy Op = "jeopardy" // a lease at risk (see [Lock.Jeopardy])
	OpClock    Op = "clock"    // a server's clock disagrees with ours (see [Observer].Clock)
	OpDeadlock Op = "deadlock" // a wait given up in a deadlock (see [Observer].Deadlock)
)

// Event is one operation on a lock, as an Observer sees it.
type Event struct {
	Op   Op
	Name string        // the lock name
	Mode string        // "fair", "unfair", "reentrant", "quorum", "semaphore", "election", "read" or "write"
	Try  bool          // OpAcquire: one attempt (TryAcquire)
	Auto bool          // OpExtend: by the watchdog
	Took time.Duration // for End and Lost: the operation's duration; for OpAcquire, the wait
	Held time.Duration // for End and Lost of OpRelease, OpLost: how long the lease was held (0: a failed Release)
	Err  error         // for End and Lost: the error returned, or nil; for Lost, why
}

// Observer watches a Client's operations; any field may be nil. Its functions
// run concurrently and must not block; a panic is recovered and counted.
type Observer struct {
	Start    func(ctx context.Context, e *Event) context.Context // as an operation begins; its calls use what it returns
	End      func(ctx context.Context, e *Event)                 // when the operation ends, with Start's context
	Lost     func(ctx context.Context, e *Event)                 // a lease lost before its release; e.Err says why
	Jeopardy func(ctx context.Context, e *Event)                 // a lease at risk, once until it recovers
	Waiting  func(ctx context.Context, name string, delta int)   // +1 when an Acquire starts to wait, -1 after
	Clock    func(ctx context.Context, e *Event)                 // a server's clock apart from ours, once until they agree (docs/guarantees.md)
	Deadlock func(ctx context.Context, e *Event)                 // before an acquisition returns ErrDeadlock (e.Err)
}

// WithObserver adds an Observer to the Client.
func WithObserver(o Observer) Option {
	return option(func(opts *options) { opts.observers = append(opts.observers, o) })
}

// Observe adds o to the Client's and its Owner Clients' later operations.
func (c *Client) Observe(o Observer) {
	c.obs.add(o)
}

// observers is a Client's list of Observers and its counters, shared with
// its Owner Clients.
type observers struct {
	mu   sync.Mutex   // serializes add
	list atomic.Value // []Observer

	acquired, notAcquired, failed, released, lost, extendFailed, panics atomic.Uint64
	waiting                                                             atomic.Int64
}

func (o *observers) add(obs Observer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list.Store(append(slices.Clone(o.all()), obs))
}

func (o *observers) all() []Observer {
	list, _ := o.list.Load().([]Observer) // (none before the first add)
	return list
}

// start tells the observers that e, of a lease in mode, begins and returns
// the context for its Redis calls.
func (c *Client) start(ctx context.Context, mode string, e *Event) context.Context {
	e.Mode = mode
	for _, o := range c.obs.all() {
		if o.Start != nil { // (a nil context returned keeps ctx)
			c.obs.safely(func() { ctx = cmp.Or(o.Start(ctx, e), ctx) })
		}
	}
	return ctx
}

// end counts e's outcome and tells the observers, after the clocks read
// meanwhile (see watchClock).
func (c *Client) end(ctx context.Context, e *Event, began time.Time, err error) {
	c.tellClocks(ctx)
	e.Took, e.Err = time.Since(began), err
	switch {
	case e.Op == OpAcquire && err == nil:
		c.obs.acquired.Add(1)
	case e.Op == OpAcquire && errors.Is(err, ErrNotAcquired):
		c.obs.notAcquired.Add(1)
	case overtaken(e):
	case e.Op == OpExtend && err != nil:
		c.obs.extendFailed.Add(1)
	case e.Op == OpRelease && err == nil && e.Held > 0:
		c.obs.released.Add(1)
	case err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrInvalid):
		c.obs.failed.Add(1)
	}
	c.obs.notify(ctx, e)
}

// overtaken reports whether e is the end of a watchdog run that found its
// Lock released once it had its turn: nothing was sent, and nothing failed.
func overtaken(e *Event) bool { return e.Auto && e.Err == ErrReleased }

// waitingFor tells the observers that an Acquire of name starts (+1) or
// stops (-1) waiting.
func (c *Client) waitingFor(ctx context.Context, name string, delta int) {
	c.obs.waiting.Add(int64(delta))
	for _, o := range c.obs.all() {
		if o.Waiting != nil {
			c.obs.safely(func() { o.Waiting(ctx, name, delta) })
		}
	}
}

// tell tells the observers' Lost, or Jeopardy (op), of l, for err; it
// counts a loss.
func (c *Client) tell(l *Lock, op Op, err error) {
	if op == OpLost {
		c.obs.lost.Add(1)
	}
	c.obs.notify(context.Background(), &Event{Op: op, Name: l.name, Mode: l.mode(), Held: time.Since(l.start), Err: err})
}

// notify tells the observers of e: their function for e.Op (Lost,
// Jeopardy, Clock or Deadlock), or End for an operation's end.
func (o *observers) notify(ctx context.Context, e *Event) {
	for _, ob := range o.all() {
		f := ob.End
		switch e.Op {
		case OpLost:
			f = ob.Lost
		case OpJeopardy:
			f = ob.Jeopardy
		case OpClock:
			f = ob.Clock
		case OpDeadlock:
			f = ob.Deadlock
		}
		if f != nil {
			o.safely(func() { f(ctx, e) })
		}
	}
}

// safely runs an observer's function f, counting a panic in it: an
// observer runs on the path of a lock operation (after an acquisition took
// its lease, in the watchdog's timer), and its failure must not leave a
// lease that no caller holds a handle to, or stop a watchdog.
func (o *observers) safely(f func()) {
	defer func() {
		if recover() != nil {
			o.panics.Add(1)
		}
	}()
	f()
}

// SlogObserver logs through l (nil: slog.Default()): acquisitions and releases
// at debug, failures and risks at warn, losses and deadlocks at error.
func SlogObserver(l *slog.Logger) Observer {
	l = cmp.Or(l, slog.Default())
	// One function logs every event, with what its Op has: the lock, its
	// mode (a clock has none), an operation's duration, how long a released
	// or lost lease was held, and the error.
	log := func(ctx context.Context, e *Event) {
		level, msg := slog.LevelDebug, "dlock: "+string(e.Op)
		switch {
		case e.Op == OpLost:
			level, msg = slog.LevelError, "dlock: lease lost"
		case e.Op == OpJeopardy:
			level, msg = slog.LevelWarn, "dlock: lease at risk"
		case e.Op == OpClock:
			level, msg = slog.LevelWarn, "dlock: server clock disagrees"
		case e.Op == OpDeadlock:
			level, msg = slog.LevelError, "dlock: deadlock"
		case e.Op == OpExtend && e.Err == nil, overtaken(e):
			return // the watchdog's routine
		case e.Err == nil:
		case e.Op == OpExtend:
			level, msg = slog.LevelWarn, "dlock: extension failed"
		case e.Op == OpAcquire && errors.Is(e.Err, ErrNotAcquired):
			msg = "dlock: not acquired"
		default:
			level, msg = slog.LevelWarn, "dlock: "+string(e.Op)+" failed"
		}
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("lock", e.Name)}
		if e.Op != OpClock {
			attrs = append(attrs, slog.String("mode", e.Mode))
		}
		if e.Op == OpAcquire || e.Op == OpRelease || e.Op == OpExtend {
			attrs = append(attrs, slog.Duration("took", e.Took))
		}
		if e.Op == OpRelease || e.Op == OpLost {
			attrs = append(attrs, slog.Duration("held", e.Held))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		l.LogAttrs(ctx, level, msg, attrs...)
	}
	return Observer{End: log, Lost: log, Jeopardy: log, Clock: log, Deadlock: log}
}
