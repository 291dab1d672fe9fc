package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// Election is a leader election (docs/election.md): candidates queue, the first
// leads until it resigns or its lease ends; safe for concurrent use.
type Election struct {
	c    *Client // the Client that made it
	name string
	keys backend.Keys
}

// Election returns the election name; [ErrInvalid] for a bad name.
func (c *Client) Election(name string) (*Election, error) {
	k, err := c.check(name)
	if err != nil {
		return nil, err
	}
	w := words{plural: "elections", one: "an election", verb: "hold", overQuorum: ", whose waiting is not fair"}
	if err := c.carries(&campaigns, fmt.Sprintf("Election(%q)", name), w); err != nil {
		return nil, err
	}
	return &Election{c: c, name: name, keys: k}, nil
}

// campaigns are the kind of an election's candidates: they campaign, and
// queue whatever WithUnfair says; a leader resigns. Their tokens begin
// with "e:" (before the marks, they carried the tag 1): a leadership's
// lease is a string holding its token, as a plain lock's is.
var campaigns = kind{slot: newMode("election"), lease: backend.Campaign, waits: queues{}, mark: marked("e:", 1),
	acquireOp: "campaign", releaseOp: "resign", by: "led by another candidate", holders: tokens{}}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits, as [Client.Acquire] does, until this candidate leads; value
// (valid as [HolderMeta], which it replaces) is what [Election.Leader] shows.
func (e *Election) Campaign(ctx context.Context, value string, opts ...LockOption) (*Leadership, error) {
	opts, err := e.campaignOpts(value, opts)
	if err != nil {
		return nil, err
	}
	l, err := e.c.acquireAs(ctx, &campaigns, e.name, opts, false)
	if err != nil {
		return nil, err
	}
	ld, err := leadership(ctx, l)
	if err != nil && l.p.resume == "" {
		release(ctx, l) // (a resumed lease is left: see leadership)
	}
	return ld, err
}

// Do campaigns, runs fn while leading and resigns, as [Client.Do] does.
func (e *Election) Do(ctx context.Context, value string, fn func(ctx context.Context, ld *Leadership) error, opts ...LockOption) error {
	opts, err := e.campaignOpts(value, opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return nilFunc(e.name)
	}
	return e.c.do(ctx, &campaigns, e.name, func(ctx context.Context, l *Lock) error {
		ld, err := leadership(ctx, l)
		if err != nil {
			return err
		}
		return fn(ctx, ld)
	}, opts, false)
}

// campaignOpts checks a campaign's value and options and returns the
// options with the value as the lease's holder metadata.
func (e *Election) campaignOpts(value string, opts []LockOption) ([]LockOption, error) {
	if why := badMeta(value); why != "" {
		return nil, fmt.Errorf("%w: campaign %q: the value %s", ErrInvalid, e.name, why)
	}
	var probe lease
	for _, opt := range opts {
		if opt != nil {
			opt.applyLease(&probe)
		}
	}
	if probe.metaSet {
		return nil, fmt.Errorf("%w: campaign %q: HolderMeta: the leader's metadata is Campaign's value", ErrInvalid, e.name)
	}
	return append(opts[:len(opts):len(opts)], HolderMeta(value)), nil
}

// leadership returns the Leadership of the campaign's lease l. The term's
// fence came with the grant (the campaign's script issues it, or the
// handover that gave the lease); only a grant that found the counter gone
// leaves it to be asked for. A resumed lease's value is the one in Redis,
// read while l holds the lease; its fence is issued anew, above the
// term's, so that a resource that checks fences refuses the superseded
// leader's late writes. A resumed lease whose leadership could not be read
// is left as it was, for another resume of its token (a momentary error
// must not end the term it took over).
func leadership(ctx context.Context, l *Lock) (_ *Leadership, err error) {
	ld := &Leadership{l: l, value: l.Meta()} // (the campaign's value)
	defer l.tellUntold()                     // (a loss found below)
	if l.p.resume != "" {
		defer func() {
			if err != nil {
				l.lose(err, true)
			}
		}()
		st, err := l.c.b.Inspect(ctx, &l.cl.Keys)
		if err := l.answered("campaign", "the lock key no longer holds our token", st.Token == l.cl.Token, err); err != nil {
			return nil, err
		}
		_, ld.value = told(st.Token, st.Extra) // (the token is the Lock's: its metadata is the campaign's value)
	}
	if ld.fence, err = l.Fence(ctx); err != nil {
		return nil, err
	}
	return ld, nil
}

// Leadership is one candidate's term as leader; as for a [Lock], give its Fence
// to what it writes. Safe for concurrent use.
type Leadership struct {
	l     *Lock
	fence int64

	// The one Proclaim under way holds its Lock's opTurn: a Proclaim
	// waiting for it honours its context, and Value does not wait for the
	// network.
	seq   int64      // the number of the last Proclaim sent (see proclaim.lua); guarded by the turn
	mu    sync.Mutex // guards value
	value string     // the value proclaimed last, else the campaign's
}

// Value returns the leader's value: the campaign's, or the last proclaimed.
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Proclaim changes what [Election.Leader] shows, within the term; [ErrNotHeld]
// once lost, [ErrReleased] after Resign. A Proclaim that failed yet lands later
// never undoes a later one.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if why := badMeta(value); why != "" {
		return fmt.Errorf("%w: proclaim %q: the value %s", ErrInvalid, ld.l.name, why)
	}
	// A loss found here is told once the turn is given back: a Lost hook
	// may Proclaim, or call the Lock (see Lock.lapse).
	defer ld.l.tellUntold()
	if !ld.l.take(ctx, opTurn) { // a Proclaim under way outlasted ctx
		return opError("proclaim", ld.l.name, backend.NotSent(ctx.Err()))
	}
	defer ld.l.give(opTurn)
	if err := ld.l.lapse(); err != nil {
		return err
	}
	ld.seq++ // never reused: a failed Proclaim's copy may still land
	seq := ld.seq
	ok, err := backend.OpValue[bool](ctx, ld.l.c.b, func(ctx context.Context, n backend.Node) (any, error) {
		return n.Proclaim(ctx, ld.l.cl, value, seq)
	})
	if err := ld.l.answered("proclaim", "the lock key no longer holds our token", ok, err); err != nil {
		return err
	}
	ld.mu.Lock()
	ld.value = value
	ld.mu.Unlock()
	return nil
}

// Fence returns the term's fencing token, above every earlier one of the name.
func (ld *Leadership) Fence() int64 { return ld.fence }

// Done returns a channel closed when the leadership ends: on Resign or loss.
func (ld *Leadership) Done() <-chan struct{} { return ld.l.Done() }

// Err returns nil while leading, [ErrReleased] after Resign, or the loss.
func (ld *Leadership) Err() error { return ld.Lock().Err() }

// ValidUntil returns the lease's deadline (see [Lock.ValidUntil]).
func (ld *Leadership) ValidUntil() time.Time { return ld.l.ValidUntil() }

// Lock returns the leader's lease. Releasing it resigns.
func (ld *Leadership) Lock() *Lock {
	if ld == nil {
		return nil // (whose Release and Err say so)
	}
	return ld.l
}

// Resign ends the leadership for the next candidate, as [Lock.Release] does.
func (ld *Leadership) Resign(ctx context.Context) error { return ld.Lock().Release(ctx) }

// Leader is who leads an election, as read; the zero Leader when nobody does.
type Leader struct {
	Value string        // the leader's value: the campaign's, or the last proclaimed
	Token string        // the leader's lease token (see Lock.Token); "" when nobody leads
	Fence int64         // the leader's term: its Leadership.Fence
	TTL   time.Duration // the leader's remaining lease when it was read
}

// Leader returns who leads now; [ErrWrongType] if the name is another kind.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	st, err := e.c.b.Inspect(ctx, &e.keys)
	switch {
	case err != nil:
		return Leader{}, opError("leader", e.name, err)
	case !st.Held:
		return Leader{}, nil
	case st.Type != "string", tokenMark(st.Token) != campaigns.mark: // (a string whose token is no leader's: a lock's, or another program's value)
		return Leader{}, opError("leader", e.name, backend.Because(ErrWrongType, "the name is held as "+st.HeldAs()+", not by a leader"))
	}
	_, value := told(st.Token, st.Extra)
	return Leader{Value: value, Token: st.Token, Fence: st.Fence, TTL: st.TTL}, nil
}

// Observe returns a channel of the leader, then each change in fence order
// (zero: none; a slow reader gets the latest), closed when ctx, the Client
// or its Redis client ends.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	if !e.c.bg.Go(func() { e.observe(ctx, ch) }) { // (Close waits for a read under way)
		close(ch) // (after Close)
	}
	return ch
}

// observeRetry is how long Observe waits after a failed read.
const observeRetry = 100 * time.Millisecond

// observe delivers the leadership on ch until ctx ends or the Client
// closes (see Observe). The value it offers is always the last one read:
// every wake-up and timer re-reads, whether or not the reader took the
// value before.
func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	defer close(ch)
	ctx, cancel := context.WithCancel(ctx) // (ends with the Client too: a read under way is cut by Close)
	defer cancel()
	stop := context.AfterFunc(e.c.stop, cancel)
	defer stop()
	w := e.c.watch(ctx, e.keys.Channel, pubsub.WatchToken())
	defer w.close()
	timer := time.NewTimer(0) // the first read, once subscribed
	defer timer.Stop()
	last := Leader{Fence: -1} // the value the reader took last (none: no read matches it)
	pending := last           // the leadership as last read (none yet)
	var ends time.Time        // when pending's lease runs out, if it has a leader with one
	for {
		// pending is due while the reader has not taken it (its TTL aside).
		due := pending.Token != last.Token || pending.Fence != last.Fence || pending.Value != last.Value
		var out chan<- Leader // nil, so no send, unless a value is due and not known to be over
		if due && (ends.IsZero() || time.Now().Before(ends)) {
			out = ch
		}
		select {
		case <-ctx.Done():
			return
		case out <- pending:
			last = pending
			continue
		case <-w.wake:
		case <-timer.C:
		}
		read := time.Now()
		ld, err := e.Leader(ctx)
		next := e.c.opts.lease.ttl
		switch {
		case ctx.Err() != nil, errors.Is(err, ErrClosed): // (its Redis client closed: no read will succeed)
			return
		case errors.Is(err, ErrWrongType): // (another kind holds the name: nobody leads, until it changes)
			pending, ends = Leader{}, time.Time{}
		case err != nil:
			next = observeRetry
		default:
			pending, ends = ld, time.Time{}
			if ld.TTL > 0 {
				ends = read.Add(ld.TTL)
				next = min(next, ld.TTL+time.Millisecond) // a leader that dies announces nothing
			}
		}
		timer.Reset(next) // (a fire not received is dropped: Go 1.23 timers)
	}
}
