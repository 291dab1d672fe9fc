package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Op is the kind of operation an Observer is told of.
type Op string

// The operations an Observer sees.
const (
	OpAcquire Op = "acquire" // TryAcquire, Acquire, and Do's acquisition: from the call to its return
	OpRelease Op = "release" // Release, and Do's release
	OpExtend  Op = "extend"  // Extend, and the watchdog's extensions (Auto)
	OpLost    Op = "lost"    // a lease lost before its release (Observer.Lost)
)

// Event is one operation on a lock, as an Observer sees it.
type Event struct {
	Op   Op
	Name string // the lock name
	Mode string // "fair", "unfair", "reentrant", "quorum", "semaphore" (a permit), "election" (a campaign), "read" or "write" (a hold of a read-write lock)
	Try  bool   // OpAcquire: one attempt (TryAcquire)
	Auto bool   // OpExtend: made by the watchdog

	// Set when the operation ends (End), or the lease is lost (Lost):
	Took time.Duration // the operation's duration: for OpAcquire, the wait
	Held time.Duration // OpRelease and OpLost: how long the lease was held (0: a repeated Release, which did nothing)
	Err  error         // nil, or the error returned (ErrNotAcquired: not acquired); for Lost, why
}

// Observer is told of a Client's operations, for traces, metrics and logs
// (see WithObserver and Client.Observe; WithLogger and the extra/dlockotel
// and extra/dlockprom modules are built on it). Any field may be nil. The
// functions are called on the path of the operation, from many goroutines
// at once, and must not block; an extension by the watchdog and a loss come
// from a timer, with a background context. A panic in one is recovered and
// dropped, so that it cannot leave behind a lease that no caller has a
// handle to.
type Observer struct {
	// Start is called as an operation begins, with the caller's context.
	// The context it returns is the one the operation's Redis calls are
	// made with, so a span started here is the parent of the Redis
	// client's own spans. With pipelining (the default), calls that share
	// a pipeline are sent with the context of the first one among them.
	Start func(ctx context.Context, e *Event) context.Context
	// End is called when the operation ends, with the context Start
	// returned and e completed.
	End func(ctx context.Context, e *Event)
	// Lost is called when a lease is lost before its release: e.Err wraps
	// ErrNotHeld and says why.
	Lost func(ctx context.Context, e *Event)
	// Waiting is called with +1 when an Acquire finds the lock taken and
	// starts to wait, and with -1 when that wait ends.
	Waiting func(ctx context.Context, name string, delta int)
}

// WithObserver adds an Observer to the Client (see also Client.Observe).
func WithObserver(o Observer) Option {
	return func(opts *options) { opts.observers = append(opts.observers, o) }
}

// WithLogger makes the Client log through l: acquisitions and releases at
// debug level, a failed extension as a warning, a lost lease as an error,
// with LogAttrs and the operation's context, so that a handler can add the
// trace it carries. Without it dlock logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(opts *options) {
		if l == nil {
			opts.invalid("WithLogger(nil)")
			return
		}
		opts.observers = append(opts.observers, logObserver(l))
	}
}

// Observe adds o to the Client's observers, and to those of the Clients
// made from it by Owner. It is safe to call while the Client is in use;
// operations that already started do not see o.
func (c *Client) Observe(o Observer) {
	c.obs.add(o)
}

// observers is a Client's list of Observers and its counters, shared with
// its Owner Clients.
type observers struct {
	mu      sync.Mutex // serializes add
	list    atomic.Pointer[[]Observer]
	anyLost atomic.Bool // some Observer has Lost: leases arm their expiry timer

	acquired, notAcquired, failed, released, lost, extendFailed atomic.Uint64
	waiting                                                     atomic.Int64
}

func (o *observers) add(obs Observer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var list []Observer
	if p := o.list.Load(); p != nil {
		list = append(list, *p...)
	}
	list = append(list, obs)
	o.list.Store(&list)
	if obs.Lost != nil {
		o.anyLost.Store(true)
	}
}

func (o *observers) all() []Observer {
	if p := o.list.Load(); p != nil {
		return *p
	}
	return nil
}

// start tells the observers that e begins and returns the context for its
// Redis calls.
func (c *Client) start(ctx context.Context, e *Event) context.Context {
	e.Mode = c.mode
	for _, o := range c.obs.all() {
		if o.Start != nil {
			var next context.Context
			safely(func() { next = o.Start(ctx, e) })
			if next != nil {
				ctx = next
			}
		}
	}
	return ctx
}

// end counts e's outcome and tells the observers.
func (c *Client) end(ctx context.Context, e *Event, began time.Time, err error) {
	e.Took, e.Err = time.Since(began), err
	switch {
	case e.Op == OpAcquire && err == nil:
		c.obs.acquired.Add(1)
	case e.Op == OpAcquire && errors.Is(err, ErrNotAcquired):
		c.obs.notAcquired.Add(1)
	case e.Op == OpExtend && err != nil:
		c.obs.extendFailed.Add(1)
	case e.Op == OpRelease && err == nil && e.Held > 0:
		c.obs.released.Add(1)
	case err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrInvalid):
		c.obs.failed.Add(1)
	}
	for _, o := range c.obs.all() {
		if o.End != nil {
			safely(func() { o.End(ctx, e) })
		}
	}
}

// waitingFor tells the observers that an Acquire of name starts (+1) or
// stops (-1) waiting.
func (c *Client) waitingFor(ctx context.Context, name string, delta int) {
	c.obs.waiting.Add(int64(delta))
	for _, o := range c.obs.all() {
		if o.Waiting != nil {
			safely(func() { o.Waiting(ctx, name, delta) })
		}
	}
}

// lostLease counts the loss of l and tells the observers.
func (c *Client) lostLease(l *Lock, err error) {
	c.obs.lost.Add(1)
	e := Event{Op: OpLost, Name: l.name, Mode: c.mode, Held: time.Since(l.start), Err: err}
	for _, o := range c.obs.all() {
		if o.Lost != nil {
			safely(func() { o.Lost(context.Background(), &e) })
		}
	}
}

// safely runs an observer's function, dropping a panic: an observer runs
// on the path of a lock operation (after an acquisition took its lease,
// in the watchdog's timer), and its failure must not leave a lease that no
// caller holds a handle to, or stop a watchdog.
func safely(f func()) {
	defer func() { _ = recover() }()
	f()
}

// hooksObserver is the Observer that calls the Hooks of WithHooks.
func hooksObserver(h Hooks) Observer {
	o := Observer{}
	if h.Acquired != nil || h.Released != nil {
		o.End = func(_ context.Context, e *Event) {
			switch {
			case e.Err != nil:
			case e.Op == OpAcquire && h.Acquired != nil:
				h.Acquired(e.Name, e.Took)
			case e.Op == OpRelease && h.Released != nil && e.Held > 0:
				h.Released(e.Name, e.Held)
			}
		}
	}
	if h.Lost != nil {
		o.Lost = func(_ context.Context, e *Event) { h.Lost(e.Name, e.Err) }
	}
	return o
}

// logObserver is the Observer of WithLogger.
func logObserver(l *slog.Logger) Observer {
	return Observer{
		End: func(ctx context.Context, e *Event) {
			level, msg := slog.LevelDebug, "dlock: "+string(e.Op)
			switch {
			case e.Op == OpExtend && e.Err == nil:
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
			attrs := []slog.Attr{slog.String("lock", e.Name), slog.String("mode", e.Mode), slog.Duration("took", e.Took)}
			if e.Op == OpRelease {
				attrs = append(attrs, slog.Duration("held", e.Held))
			}
			if e.Err != nil {
				attrs = append(attrs, slog.String("error", e.Err.Error()))
			}
			l.LogAttrs(ctx, level, msg, attrs...)
		},
		Lost: func(ctx context.Context, e *Event) {
			l.LogAttrs(ctx, slog.LevelError, "dlock: lease lost", slog.String("lock", e.Name),
				slog.String("mode", e.Mode), slog.Duration("held", e.Held), slog.String("error", e.Err.Error()))
		},
	}
}
