package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// Election is a leader election on one name: candidates Campaign, the
// first in line leads, and leadership passes to the next candidate when the
// leader resigns or its lease ends. Leadership is a lease on the name, as a
// lock's is, held by a *Lock with everything a lock's lease has: a random
// token, a TTL extended by the watchdog, Done and Err, a fence.
//
// Candidates wait first come, first served, whatever WithFair says: they
// queue in Redis in arrival order, a resigning leader hands leadership
// straight to the first candidate and wakes only that one (over pub/sub),
// and a leader that dies without resigning is followed by the first
// candidate in line once its TTL runs out.
//
// The leader's value (Campaign's value) rides in its lease token as holder
// metadata does (see Lock.Token), so reading the leader (Leader, Observe)
// costs one script call and no key of its own. Each term is fenced as it
// begins, in the same script that takes the name: its fence (Leadership.Fence)
// is strictly greater than every fence issued before for the name, and the
// name's fence counter holds it for as long as the term lasts, so a reader
// always gets the fence of the leader it reads.
//
// # What it guarantees, and what it does not
//
// What the package documentation says of a lock holds for leadership: no
// two candidates hold it at once between their Campaign's success and
// their Leadership's ValidUntil, a leader learns of the loss of its lease
// (Done, Err) no later than that deadline, and a leader paused past its TTL
// (GC, a stopped process) can act as leader after its successor's term
// began. Fencing answers that: have every resource the leader writes to
// refuse a fence lower than one it has seen (see Guard), and the deposed
// leader's writes are refused.
//
// Leader and Observe read the leadership as it was when Redis answered:
// by the time the caller acts on it, the leader may have changed. A
// candidate paused (or cut off) just as the leadership was handed to it
// may lose that term before it learns of it; readers then see a term that
// was never acted on, and the candidate, still in line, leads a later
// term under the same token with a higher fence.
//
// An election's name is its own: while a leader holds it, a lock or
// semaphore of the same name cannot be taken, and a lock of the name taken
// with Client.Acquire would read as a leader whose fence is not its own.
// An Election is a small value bound to the Client that made it; it is
// safe for concurrent use.
type Election struct {
	c    *Client // a variant of the Client that made it, whose acquisitions are campaigns
	name string
	keys backend.Keys
}

// Election returns the election name, kept on c's Redis deployment under
// the same prefix, TTL, watchdog and hooks as c's locks: its leader's lease
// is the lock key "dlock:{name}", its candidates wait in the name's fair
// queue (see the package documentation, Keys).
//
// It returns an error wrapping ErrInvalid for a bad name, and for a Client
// that cannot hold an election: a quorum (NewRedlock), whose waiting is
// never fair, a reentrant Client (WithReentrant: a leader is not an owner
// that may re-enter), and a Client made WithoutScripts().
func (c *Client) Election(name string) (*Election, error) {
	k, err := c.check(name)
	switch {
	case err != nil:
		return nil, err
	case c.mode == "quorum":
		return nil, fmt.Errorf("%w: Election(%q): elections are not available over a quorum (NewRedlock), whose waiting is not fair", ErrInvalid, name)
	case c.opts.reentrant:
		return nil, fmt.Errorf("%w: Election(%q): a reentrant Client (WithReentrant) cannot hold an election", ErrInvalid, name)
	case c.opts.noScripts:
		return nil, fmt.Errorf("%w: Election(%q): elections need scripts; a Client made WithoutScripts() cannot hold one", ErrInvalid, name)
	}
	v := *c
	v.opts.fair = true // candidates queue, whatever WithFair says
	v.campaign = true
	v.mode = "election"
	return &Election{c: &v, name: name, keys: k}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits, in arrival order behind the candidates before it, until
// this candidate leads, or until ctx ends; value is what Leader and
// Observe show of it while it leads (its lease's holder metadata: at most
// MaxMetaLen bytes of valid UTF-8 without control characters).
//
// It returns the Leadership, which must end with Leadership.Resign (or by
// the loss of its lease). Its errors are those of Client.Acquire: if ctx
// ends first, an error matching both ErrNotAcquired and ctx.Err(), with
// the candidate out of the queue and nothing left behind; ErrWrongType if
// the name is held as a semaphore, a read-write lock or a reentrant lock;
// an error wrapping
// ErrInvalid for a value the lease token cannot carry, or a bad option.
//
// opts apply to the leader's lease as to a lock's (LeaseTTL, MaxWait,
// MaxHold), except HolderMeta, which value replaces: it is refused
// (ErrInvalid).
func (e *Election) Campaign(ctx context.Context, value string, opts ...LockOption) (*Leadership, error) {
	opts, err := e.campaignOpts(value, opts)
	if err != nil {
		return nil, err
	}
	l, err := e.c.Acquire(ctx, e.name, opts...)
	if err != nil {
		return nil, err
	}
	ld, err := leadership(ctx, l)
	if err != nil {
		l.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return ld, nil
}

// Do campaigns as Campaign does, runs fn while the candidate leads, and
// resigns when fn returns or panics, as Client.Do does for a lock: fn's
// context is cancelled, with a cause wrapping ErrNotHeld, if the
// leadership is lost while fn runs. It returns Campaign's error, or fn's
// joined with an error wrapping ErrNotHeld if the leadership was lost
// before fn returned.
func (e *Election) Do(ctx context.Context, value string, fn func(ctx context.Context, ld *Leadership) error, opts ...LockOption) error {
	opts, err := e.campaignOpts(value, opts)
	if err != nil {
		return err
	}
	return e.c.Do(ctx, e.name, func(ctx context.Context, l *Lock) error {
		ld, err := leadership(ctx, l)
		if err != nil {
			return err
		}
		return fn(ctx, ld)
	}, opts...)
}

// campaignOpts checks a campaign's value and options and returns the
// options with the value as the lease's holder metadata.
func (e *Election) campaignOpts(value string, opts []LockOption) ([]LockOption, error) {
	if why := badMeta(value); why != "" {
		return nil, fmt.Errorf("%w: campaign %q: the value %s", ErrInvalid, e.name, why)
	}
	probe := lease{meta: "\x00"} // no HolderMeta can set this value
	for _, opt := range opts {
		if opt != nil {
			opt(&probe)
		}
	}
	if probe.meta != "\x00" {
		return nil, fmt.Errorf("%w: campaign %q: HolderMeta: the leader's metadata is Campaign's value", ErrInvalid, e.name)
	}
	return append(opts[:len(opts):len(opts)], HolderMeta(value)), nil
}

// leadership returns the Leadership of the campaign's lease l. The term's
// fence came with the grant (the campaign's script issues it, or the
// handover that gave the lease); only a grant that found the counter gone
// leaves it to be asked for.
func leadership(ctx context.Context, l *Lock) (*Leadership, error) {
	fence, err := l.Fence(ctx)
	if err != nil {
		return nil, err
	}
	return &Leadership{l: l, fence: fence}, nil
}

// Leadership is one candidate's term as leader, returned by
// Election.Campaign. Its methods are safe for concurrent use.
//
// It is NOT safe to assume that the candidate still leads just because
// Done is open: as with any lease, a process paused between checking and
// acting can act after its term ended. Give Fence to the resources the
// leader writes to.
type Leadership struct {
	l     *Lock
	fence int64
}

// Value returns the value the leader campaigned with.
func (ld *Leadership) Value() string { return ld.l.Meta() }

// Fence returns the term's fencing token: strictly greater than every
// fence issued for the name before this term began, including every
// earlier leader's, and what Leader reports as the leader's Fence.
func (ld *Leadership) Fence() int64 { return ld.fence }

// Done returns a channel that is closed when the leadership ends: on
// Resign, or when its lease is lost (Err says why).
func (ld *Leadership) Done() <-chan struct{} { return ld.l.Done() }

// Err returns nil while the candidate leads, ErrReleased after Resign, or
// an error wrapping ErrNotHeld that says why the leadership was lost.
func (ld *Leadership) Err() error { return ld.l.Err() }

// ValidUntil returns the client-side deadline of the leader's lease (see
// Lock.ValidUntil): until then no other candidate leads.
func (ld *Leadership) ValidUntil() time.Time { return ld.l.ValidUntil() }

// Lock returns the leader's lease, for what Leadership does not repeat
// (Token, TTL, Extend, Deadline). Releasing it resigns.
func (ld *Leadership) Lock() *Lock { return ld.l }

// Resign ends the leadership and hands it to the first candidate in line,
// or leaves the election without a leader if none waits. It is idempotent,
// and returns what Lock.Release returns: an error wrapping ErrNotHeld if the
// leadership was lost before (the term may have overlapped the next one).
func (ld *Leadership) Resign(ctx context.Context) error { return ld.l.Release(ctx) }

// Leader is the leadership of an election as read from Redis: who leads,
// or the zero Leader (Token "") when nobody does.
type Leader struct {
	Value string        // the value the leader campaigned with
	Token string        // the leader's lease token (see Lock.Token); "" when nobody leads
	Fence int64         // the leader's term: its Leadership.Fence
	TTL   time.Duration // the leader's remaining lease when it was read
}

// Leader reads who leads the election now, with one script call: the zero
// Leader if nobody does. It returns ErrWrongType if the name is held as a
// semaphore or reentrant lock, or the error from Redis. The answer may be
// stale by the time it arrives.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	st, err := e.c.b.Inspect(ctx, &e.keys)
	switch {
	case err != nil:
		return Leader{}, opError("leader", e.name, public(err))
	case !st.Held:
		return Leader{}, nil
	case st.Type != "string":
		what := map[string]string{"hash": "a reentrant lock", "zset": "a semaphore or a read-write lock"}[st.Type]
		if what == "" {
			what = "a " + st.Type
		}
		return Leader{}, opError("leader", e.name, backend.Because(ErrWrongType, "the name is held as "+what+", not by a leader"))
	}
	return Leader{Value: metaOf(st.Token), Token: st.Token, Fence: st.Fence, TTL: st.TTL}, nil
}

// Observe returns a channel that delivers the election's leadership as it
// changes, until ctx ends; then the channel is closed, and nothing is left
// running (a pub/sub subscription it shared with others stays theirs).
//
// The first value is the leadership when Observe starts (the zero Leader if
// nobody leads); then each new term (a new leader, or a new fence), and the
// zero Leader when the election is left without one (the leader resigned
// with nobody waiting, or its lease ran out or was taken away). Terms come
// in order: each one's Fence is above the one before it. Observe is
// woken by the announcements of the name's pub/sub channel (each handover
// and each new term is announced) and re-reads the leadership when the
// leader's lease is due to end and at least once per lease time (WithTTL)
// besides, so a change it was not told of is seen within that.
//
// A value not yet received holds up the ones behind it: a reader that
// falls behind gets the leadership as it is when it takes the next value,
// not every leader in between. Errors from Redis are not delivered: Observe
// reads again after a short pause.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	go e.observe(ctx, ch)
	return ch
}

// observeRetry is how long Observe waits after a failed read.
const observeRetry = 100 * time.Millisecond

// observe delivers the leadership on ch until ctx ends (see Observe).
func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	defer close(ch)
	w := e.c.watch(ctx, e.keys.Channel, pubsub.WatchToken())
	defer w.close()
	timer := time.NewTimer(0) // the first read, once subscribed
	defer timer.Stop()
	var last Leader
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
		ld, err := e.Leader(ctx)
		next := e.c.opts.ttl
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			next = observeRetry
		case first || ld.Token != last.Token || ld.Fence != last.Fence:
			select {
			case ch <- ld:
			case <-ctx.Done():
				return
			}
			last, first = ld, false
		}
		if err == nil && ld.TTL > 0 {
			next = min(next, ld.TTL+time.Millisecond) // a leader that dies announces nothing
		}
		timer.Stop()
		select { // drain a timer that fired while a wake-up won
		case <-timer.C:
		default:
		}
		timer.Reset(next)
	}
}
