package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// This file finds deadlocks: waiters that hold leases (their context carries
// them: see heldContext) and wait for each other. Past a threshold, such a
// waiter writes, for each lease it holds, a record keyed by that lease's
// holder identity (a token, or a reentrant owner's hold of a name: see
// ownerHold) saying what it waits for and since when, and walks the
// waits-for graph: the name it waits for, that name's holders (Inspect),
// their records, the names those wait for...
// A cycle found twice, alike, a period apart, each record of it renewed
// since (its waiter is alive: a record SET late, or by a frozen waiter, is
// not), is reported by one waiter of it only: the one whose wait began last.

// ErrDeadlock means an acquisition gave up a deadlocked wait ([DeadlockCheck]);
// it also matches [ErrNotAcquired], with a [*DeadlockError] cause.
var ErrDeadlock = errors.New("dlock: deadlock")

// DefaultDeadlockCheck is [DeadlockCheck]'s default.
const DefaultDeadlockCheck = time.Second

// The thresholds DeadlockCheck accepts, besides 0: a waiter's record lives
// a few of them, which a longer one would overflow.
const minDeadlockCheck, maxDeadlockCheck = 10 * time.Millisecond, 24 * time.Hour

// DeadlockCheck makes a waiter whose context holds leases look for a deadlock
// every d it waits (0: off; else 10ms to 24h; default [DefaultDeadlockCheck]).
func DeadlockCheck(d time.Duration) LeaseOption {
	if d < 0 || (d > 0 && d < minDeadlockCheck) || d > maxDeadlockCheck {
		return badOption("DeadlockCheck(%v): the threshold must be 0 (off) or %v to %v", d, minDeadlockCheck, maxDeadlockCheck)
	}
	return LeaseOption{func(p *lease) { p.dlCheck = d }}
}

// DeadlockError is ErrDeadlock's cause: Cycle[0].Name is Name, each Holder
// waits for the next Name, the last is ours; an entry per holder.
type DeadlockError struct {
	Name  string
	Cycle []Wait
}

// Wait is one step of a deadlock: Name held by Holder (a token or owner ID).
type Wait struct {
	Name, Holder string
}

func (e *DeadlockError) Error() string {
	var steps []string
	for i, w := range e.Cycle {
		holder := w.Holder
		if i == len(e.Cycle)-1 {
			holder = "this waiter (" + holder + ")"
		}
		steps = append(steps, fmt.Sprintf(" %q held by %s", w.Name, holder))
	}
	return "deadlock:" + strings.Join(steps, ", which waits for")
}

// Unwrap returns ErrDeadlock and ErrNotAcquired.
func (e *DeadlockError) Unwrap() []error { return []error{ErrDeadlock, ErrNotAcquired} }

// Bounds of one walk of the waits-for graph.
const (
	deadlockDepth = 8  // names on one path
	deadlockWidth = 16 // holders of one name
	deadlockCalls = 64 // Redis calls
)

// leasesIn returns the leases still held that ctx carries (see
// heldContext), outermost last; nil if none.
func leasesIn(ctx context.Context) []*Lock {
	var ls []*Lock
	h, _ := ctx.Value(heldKey{}).(*heldContext)
	for i := 0; h != nil && i < deadlockDepth*4; i++ {
		for _, l := range h.held.leases() {
			if l.Err() == nil {
				ls = append(ls, l)
			}
		}
		h, _ = h.Context.Value(heldKey{}).(*heldContext)
	}
	return ls
}

// leases returns the leases l holds: itself.
func (l *Lock) leases() []*Lock { return []*Lock{l} }

// leases returns the leases m holds: its parts.
func (m *MultiLock) leases() []*Lock { return m.parts }

// ownerHold is the identity a record is keyed by for a reentrant owner's
// hold of name: an owner's goroutines hold and wait apart, so a wait blocks
// only the names its own context holds.
func ownerHold(owner, name string) string {
	return strconv.Itoa(len(name)) + ":" + name + ":" + owner
}

// waitCheck is the deadlock check of one wait (acquisition.run), and its
// current walk of the waits-for graph.
type waitCheck struct {
	c        *Client
	rs       backend.Records
	name     string   // the name waited for
	needs    string   // what the waiter needs of name's holders: "all" gone (a writer), or "one" (see kind.needs)
	mine     []string // the holder identities of the leases the waiter holds
	every    time.Duration
	since    time.Time
	id       string // this wait's, to break ties between waits begun alike
	renewals int    // the records' writes so far (0: no record may be in Redis)
	value    string // the record as the last check wrote it
	seen     []step // the cycle the last walks found, if this wait is to report it, with its records' renewals when first found

	// The walk's:
	calls  int      // Redis calls left
	path   []string // the names on the current path
	closes bool     // a holder on the walk is the waiter itself
	err    error
	cycle  []Wait
	steps  []step
}

// deadlockCheck returns the deadlock check of a wait for l that began at
// since with ctx, and when it is first due; nil and nil if there is none:
// the check is off, ctx carries no lease, or the backend keeps no records
// (a quorum).
func (c *Client) deadlockCheck(ctx context.Context, l *Lock, since time.Time) (*waitCheck, <-chan time.Time) {
	rs, ok := c.b.(backend.Records)
	if !ok || l.p.dlCheck <= 0 {
		return nil, nil
	}
	var mine []string // the holder identities of the leases ctx carries (see leasesIn), outermost last
	for _, held := range leasesIn(ctx) {
		if id := held.k.holders.recordOf(held.cl, held.name); !slices.Contains(mine, id) {
			mine = append(mine, id)
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	w := &waitCheck{c: c, rs: rs, name: l.name, needs: cmp.Or(l.k.needs, "one"), mine: mine, every: l.p.dlCheck, since: since, id: newToken()[:11]}
	return w, time.After(time.Until(since.Add(w.every)))
}

// check writes (or renews) the wait's records and walks the graph. It
// returns a *DeadlockError once a cycle this wait is to report was found
// alike by walks a period or more apart, every other record of it renewed
// in between. The next check is due a period on.
func (w *waitCheck) check(ctx context.Context) *DeadlockError {
	if ctx.Err() != nil {
		return nil
	}
	// The record: "<since, ms> <wait ID> <renewals> <needs> <name>".
	w.renewals++
	w.value = strconv.FormatInt(w.since.UnixMilli(), 10) + " " + w.id + " " + strconv.Itoa(w.renewals) + " " + w.needs + " " + w.name
	for _, id := range w.mine {
		if ctx.Err() != nil || w.rs.SetRecord(ctx, w.key(id), w.value, w.life().Milliseconds()) != nil {
			return nil
		}
	}
	w.calls, w.closes, w.err, w.cycle, w.steps = deadlockCalls, false, nil, nil, nil
	found := w.blocked(ctx, w.name, w.needs) && w.closes && w.last() // (an error makes blocked false)
	switch {
	case !found:
		w.seen = nil
	case !w.alike(w.seen): // found once: look again a period on
		w.seen = w.steps
	case w.renewed(w.seen):
		return &DeadlockError{Name: w.name, Cycle: w.cycle}
	}
	return nil
}

// life is how long a record lives unless renewed: a few periods.
func (w *waitCheck) life() time.Duration { return 3*w.every + time.Second }

// end deletes the wait's records, if it wrote any (none if w is nil),
// retried in the background for as long as they could live: a record left
// behind would make its holder look blocked when it waits no more.
func (w *waitCheck) end(ctx context.Context) {
	if w == nil || w.renewals == 0 {
		return
	}
	w.c.cleanUp(ctx, time.Now().Add(w.life()), func(ctx context.Context) error {
		var errs []error
		for _, id := range w.mine {
			errs = append(errs, w.rs.DelRecord(ctx, w.key(id)))
		}
		return errors.Join(errs...)
	})
}

// key is the record of the holder identity id.
func (w *waitCheck) key(id string) string { return w.c.opts.prefix + "waits:" + id }

// step is one holder met on a walk, with its record's wait (since, in ms
// since the epoch, and ID) and renewals.
type step struct {
	name, holder, id string
	since            int64
	renewals         int
}

// blocked reports whether name stays held for as long as its waiter waits,
// which needs what its record says (see kind.needs): for a waiter that
// needs "all" of the name's holders gone (a writer), one holder that is
// blocked keeps it (one in a cycle of the waiter's, if any, is the one the
// walk follows); for any other waiter, every holder must be. A holder is
// blocked if its record says it waits for a name that is blocked so, or
// already on the path (a cycle): the waiter of the check itself waits for
// the path's first name.
func (w *waitCheck) blocked(ctx context.Context, name, needs string) bool {
	if slices.Contains(w.path, name) {
		return true
	}
	if len(w.path) >= deadlockDepth || w.calls <= 0 {
		return false
	}
	w.calls--
	keys, err := w.c.check(name)
	if err != nil {
		return false
	}
	st, err := w.c.b.Inspect(ctx, &keys)
	w.err = err // (nil until now: the walk stops at its first error)
	holders := holdersOf(name, st)
	if err != nil || len(holders) == 0 || len(holders) > deadlockWidth {
		return false
	}
	w.path = append(w.path, name)
	defer func() { w.path = w.path[:len(w.path)-1] }()
	all := needs == "all"
	held := false // (all: a holder is blocked, in no cycle of the waiter's)
	for _, h := range holders {
		nc, ns, closes := len(w.cycle), len(w.steps), w.closes
		ok := w.holderBlocked(ctx, name, h)
		switch {
		case w.err != nil: // (Redis failed: the walk finds nothing; it stops)
			return false
		case all && ok && w.closes:
			return true
		case all: // (what this holder's branch added is not part of it)
			w.cycle, w.steps, w.closes = w.cycle[:nc], w.steps[:ns], closes
			held = held || ok
		case !ok:
			return false
		}
	}
	return !all || held
}

// holderBlocked reports whether h, a holder of name, is blocked (see
// blocked).
func (w *waitCheck) holderBlocked(ctx context.Context, name string, h holder) bool {
	w.cycle = append(w.cycle, Wait{Name: name, Holder: h.id})
	v, ok := w.value, slices.Contains(w.mine, h.rec) // (the waiter's own record, as written: no call)
	w.closes = w.closes || ok
	if !ok && w.calls > 0 {
		w.calls--
		var err error
		v, ok, err = w.rs.GetRecord(ctx, w.key(h.rec))
		w.err = err // (nil until now: the walk stops at its first error)
	}
	since, rest, _ := strings.Cut(v, " ")
	id, rest, _ := strings.Cut(rest, " ")
	n, rest, _ := strings.Cut(rest, " ")
	needs, next, _ := strings.Cut(rest, " ")
	renewals, err := strconv.Atoi(n)
	if !ok || err != nil { // (a record of no renewals: it proves no waiter alive)
		return false
	}
	ms, _ := strconv.ParseInt(since, 10, 64)
	w.steps = append(w.steps, step{name, h.rec, id, ms, renewals})
	return w.blocked(ctx, next, needs)
}

// holder is a holder of a name: id as Inspect names it, rec as its
// record is keyed.
type holder struct{ id, rec string }

// holdersOf returns the holders of name in its state st, in the order
// Inspect lists them.
func holdersOf(name string, st backend.State) []holder {
	if o, _ := told("", st.Extra); o != "" { // (a reentrant lock: its owner)
		return []holder{{o, ownerHold(o, name)}}
	}
	var hs []holder
	for _, p := range st.Leases {
		hs = append(hs, holder{p.Token, p.Token})
	}
	return hs
}

// last reports whether this wait is the one of the walk's cycle to report
// it: the one whose wait began last, ties broken by the greater wait ID.
// Every waiter of the cycle finds the same records, and so the same one.
func (w *waitCheck) last() bool {
	return !slices.ContainsFunc(w.steps, func(s step) bool {
		return cmp.Or(cmp.Compare(s.since, w.since.UnixMilli()), strings.Compare(s.id, w.id)) > 0
	})
}

// alike reports whether the walk met what an earlier one met: the names,
// holders and records' waits, in order.
func (w *waitCheck) alike(before []step) bool {
	return slices.EqualFunc(w.steps, before, func(s, b step) bool {
		return s.name == b.name && s.holder == b.holder && s.id == b.id && s.since == b.since
	})
}

// renewed reports whether every record the walk met was renewed since an
// alike walk counted before: its waiter still waits. (The walker's own
// is, by every check.)
func (w *waitCheck) renewed(before []step) bool {
	return slices.EqualFunc(w.steps, before, func(s, b step) bool { return s.renewals > b.renewals })
}
