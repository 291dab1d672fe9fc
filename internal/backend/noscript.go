package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

// NoScripts is the backend of one deployment whose Redis user may not run
// scripts (EVAL, EVALSHA): the plain lock's operations, each a
// compare-and-act transaction (WATCH, reads, MULTI … EXEC) instead of a
// script, on the same keys and values as the scripts (see lib.lua). A
// script-free Client and a scripting one can share lock names.
//
// Every transaction watches the keys its decision reads, and writes only
// in its EXEC: a write to one of them between the WATCH and the EXEC (by
// anyone: another client, the undo of this lease, an expiry) aborts the
// EXEC, and the operation reads again, up to maxTries times. A request
// delayed in the network therefore acts on what its own reads saw, or not
// at all; and go-redis never re-sends a transaction's commands on another
// connection (its connection is pinned to the transaction), so a re-sent
// EXEC cannot run without its WATCH.
//
// It serves plain locks only: fair waiting (a queue handed over in one
// step), reentrant locks and semaphores need scripts, and the root package
// refuses them with this backend.
type NoScripts struct {
	Node // Scan, Batches; its fields configure the operations
}

// NewNoScripts returns the script-free backend of n, which must be reached
// through go-redis (its transactions need it) and not be a quorum's node
// (nodeTimeout > 0: a quorum needs scripts).
func NewNoScripts(n Node, nodeTimeout time.Duration) (NoScripts, error) {
	if n.uc == nil || nodeTimeout > 0 {
		return NoScripts{}, fmt.Errorf("%w: WithoutScripts(): the script-free mode runs on one go-redis client (New), not a quorum or a driver", ErrInvalid)
	}
	return NoScripts{Node: n}, nil
}

// Carries serves plain locks only: every other Kind runs scripts (see
// Backend).
func (NoScripts) Carries(k Kind) error { return anyBackendOnly(k, ErrNeedsScripts) }

// Prepare does nothing: no scripts to load (see Backend).
func (NoScripts) Prepare(context.Context, *Claim) error { return nil }

// scriptingDenied returns the error for a NOPERM reply to EVAL or EVALSHA
// (an ACL that denies the Redis user scripting, such as -@scripting), which
// names the mode that needs no scripts; nil for any other error.
func scriptingDenied(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "NOPERM") || !strings.Contains(strings.ToLower(rerr.Error()), "'eval") {
		return nil
	}
	return fmt.Errorf("scripting is denied to this Redis user; dlock.WithoutScripts() selects the mode that runs no scripts (%w)", err)
}

// maxTries bounds the tries of one operation whose transaction keeps
// being aborted by writes to its keys (or moved with its slot).
const maxTries = 16

// errConflict reports an operation whose transaction was aborted maxTries
// times: it did nothing.
var errConflict = fmt.Errorf("the transaction was aborted by concurrent writes to its keys %d times", maxTries)

// ErrRedirected reports an operation whose transaction never ran: the
// Cluster redirected it more times than the client follows.
var ErrRedirected = errors.New("the transaction did not run: its slot is being migrated, and the Cluster redirected it more times than the client follows")

// tx is one try of an operation: a transaction that watches the keys the
// operation decides on, and the operation's context.
type tx struct {
	*redis.Tx
	ctx context.Context
}

// watched runs fn on a transaction that watches keys (the first the lock's
// key or its marker: they share the hash slot) until fn returns anything
// but an aborted EXEC (redis.TxFailedErr), or a MOVED/ASK reply when the
// slot is being moved on a Cluster; each try reads anew. It returns the
// last try's value and error. A Cluster client that gave up following
// redirects (ASK from a slot's source, MOVED from its target, while the
// slot is migrated) returns no error though fn never ran to its end: that
// is ErrRedirected, not an answer. A lease c (nil for none) of a kind n
// does not carry is refused, unsent.
func watched[T any](ctx context.Context, n NoScripts, c *Claim, keys []string, fn func(tx, *Claim) (T, error)) (T, error) {
	var v T
	if c != nil {
		if err := n.Carries(c.Kind); err != nil {
			return v, NotSent(err)
		}
		c = new(*c) // (fn reads its own copy: a try left in flight must not read the caller's next token)
	}
	return leftWith(ctx, func() (T, error) { return watchTries(ctx, n, c, keys, fn) })
}

// watchTries is watched's tries, on the claim c (nil for none).
func watchTries[T any](ctx context.Context, n NoScripts, c *Claim, keys []string, fn func(tx, *Claim) (T, error)) (T, error) {
	var v T
	var ran bool // fn ran to its end without an error
	run := func(t *redis.Tx) (err error) {
		v, err = fn(tx{t, ctx}, c)
		ran = err == nil
		return err
	}
	for try := range maxTries {
		err := n.uc.Watch(ctx, run, keys...)
		switch {
		case err == nil && !ran:
			return v, ErrRedirected // (v: a try's that failed, if any)
		case err == nil || ctx.Err() != nil:
			return v, err
		case errors.Is(err, redis.TxFailedErr):
		case strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK "):
			// Refused before anything ran: read the slot map again.
			if cc, ok := n.uc.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			if !SleepCtx(ctx, time.Duration(try+1)*20*time.Millisecond) {
				return v, ctx.Err()
			}
		default:
			return v, err
		}
	}
	return v, errConflict
}

// read sends cmds, each a command's arguments, in one round trip on the
// transaction's connection after its WATCH; exec sends them in its MULTI …
// EXEC. Each returns their replies and the error of the first that failed,
// a missing key's (redis.Nil) aside (redis.TxFailedErr: the EXEC was
// aborted), or else the pipeline's own.
func (t tx) read(cmds ...[]any) ([]*redis.Cmd, error) { return t.send(t.Pipeline(), cmds) }

func (t tx) exec(cmds ...[]any) ([]*redis.Cmd, error) { return t.send(t.TxPipeline(), cmds) }

func (t tx) send(p redis.Pipeliner, cmds [][]any) ([]*redis.Cmd, error) {
	r := make([]*redis.Cmd, len(cmds))
	for i, c := range cmds {
		r[i] = p.Do(t.ctx, c...)
	}
	_, err := p.Exec(t.ctx) // (also the error of a pipeline failed unsent, by a hook, which none of its commands carries)
	for _, cmd := range r {
		if e := cmd.Err(); e != nil && e != redis.Nil {
			return r, e
		}
	}
	if err == redis.Nil {
		err = nil
	}
	return r, err
}

// lease reads the lock's holder and the marker of the lease c with one
// MGET, as the scripts mostly do (a key missing, or of another type, reads
// ""), and the replies of more commands, in one round trip (see read).
// Where a script reads either key with GET, so that a key of another type
// fails it (WRONGTYPE), its operation reads it again in more.
func (t tx) lease(c *Claim, more ...[]any) (holder, mark string, r []*redis.Cmd, err error) {
	r, err = t.read(append([][]any{{"MGET", c.Lock, c.Rev}}, more...)...)
	if v, _ := r[0].Slice(); len(v) == 2 {
		holder, _ = v[0].(string)
		mark, _ = v[1].(string)
	}
	return holder, mark, r[1:], err
}

// get reads the lock's holder and the marker of the lease c with a GET
// each, in one round trip (see read), as a numbered extension does
// (extend.lua): a key missing reads ""; a lock key of another type fails
// it (WRONGTYPE), and a marker of another type only when the lock holds
// the lease, since the script, finding that it does not, reads no further.
// It returns no more replies (lease's signature).
func (t tx) get(c *Claim, more ...[]any) (holder, mark string, _ []*redis.Cmd, err error) {
	r, err := t.read(append([][]any{{"GET", c.Lock}, {"GET", c.Rev}}, more...)...)
	holder, herr := r[0].Text()
	mark, _ = r[1].Text()
	if holder != c.Token && (herr == nil || herr == redis.Nil) {
		err = nil // the holder was read: the marker's error does not count
	}
	return holder, mark, r[2:], err
}

// ack returns err, the error of the transaction's writes, if any; else it
// waits, on the transaction's connection, for the replicas
// (WithReplicaAck) and the append-only file (durable grants) to
// acknowledge the writes, when either is on, and returns short of the
// acknowledgements (see acksOf) if there were too few, or the refusal of
// WAITAOF, which also matches refused.
func (n NoScripts) ack(t tx, err, refused error, short func(acks int64) error) error {
	if err != nil || n.replicas <= 0 {
		return err
	}
	cmds, _ := t.read(n.acks...)
	rs := make([]driver.Result, 0, 2) // (WAIT and WAITAOF: on the stack)
	for _, cmd := range cmds {
		v, err := cmd.Result()
		rs = append(rs, driver.Result{Val: v, Err: err})
	}
	acks, err := n.acksOf(rs, refused)
	if err == nil && acks < int64(n.replicas) {
		err = short(acks)
	}
	return err
}

// Acquire takes the lock if it is free; see Node.Acquire for when the
// attempt must be undone. There is no fair queue: with queue set (a
// waiter) a refused attempt sets the wake key.
func (n NoScripts) Acquire(ctx context.Context, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	g, err := watched(ctx, n, c, []string{c.Rev}, func(t tx, c *Claim) (Grant, error) { return n.acquireTx(t, c, ttl, queue) })
	if err != nil {
		err = n.wrongKind(ctx, c.Lock, c.Kind, RedisErr(err))
		g.Undo = !errors.Is(err, ErrRevoked) && !neverSent(err) // (a failed try's Grant has no Undo)
	}
	return g, err
}

// acquireTx is one try of Acquire, acquire.lua's steps. The lease's
// marker is watched: an undo of this lease (which writes it) that comes
// first makes the lease's token refused, and one that comes between the
// reads and the EXEC aborts the EXEC. The lock key itself is not watched:
// SET NX takes it only if it is free whatever happened since the reads, so
// a lock taken and let go again meanwhile (a lock in churn) aborts nothing.
func (n NoScripts) acquireTx(t tx, c *Claim, ttl time.Duration, queue bool) (Grant, error) {
	h, m, r, err := t.lease(c, []any{"GET", c.Rev}, []any{"PTTL", c.Lock}) // (acquire.lua GETs the marker)
	left := r[1]
	switch ms := ttl.Milliseconds(); {
	case err != nil:
		return Grant{}, err
	case m == "0" || m == "1":
		return Grant{}, ErrRevoked
	case h == c.Token && strings.HasPrefix(m, "e"):
		return Grant{Held: true}, nil // a late copy: a numbered extension was applied since, which it must not undo (acquire.lua)
	case h == c.Token:
		// Ours already: this lease's earlier try ran, its reply lost. Make
		// it last ttl from now if it ends sooner (never shorten it), as
		// acquire.lua does.
		r, err = t.exec([]any{"PEXPIRE", c.Lock, ms, "GT"}, []any{"GET", c.Lock})
		if v, _ := r[1].Text(); err == nil && v != c.Token {
			return Grant{}, redis.TxFailedErr // it expired meanwhile: watched reads again
		}
	case h == "":
		// Free, or a key of another type (MGET reads it as none), which
		// SET … GET refuses (WRONGTYPE), as acquire.lua's does. Taken by
		// another since the reads if SET finds a holder.
		r, err = t.exec([]any{"SET", c.Lock, c.Token, "NX", "PX", ms, "GET"}, []any{"PTTL", c.Lock})
		h, _ = r[0].Text()
		left = r[1]
	}
	if err == nil && h != "" && h != c.Token { // held by another
		v, _ := left.Int64()
		if px := min(v, WakeWindow.Milliseconds()); queue && px > 0 {
			// A waiter: the wake key, so that a release by a Client with
			// scripts announces itself too (see release.lua), for at most
			// the window, as acquire.lua sets it. Only a hint: a waiter not
			// woken tries again when the holder's lease ends.
			// Lengthened, never shortened: another waiter's may live longer.
			t.read([]any{"SET", c.Wake, "1", "NX", "PX", px}, []any{"PEXPIRE", c.Wake, px, "GT"})
		}
		return Grant{PTTL: pttlOf(v), Holder: h}, nil
	}
	err = n.ack(t, err, ErrNotAcquired, n.ackUndone)
	return Grant{Held: err == nil}, err // (Acquire has the attempt undone after an error)
}

// Release ends the lease as release.lua does (see Node.Release): it deletes
// the lock if the lease holds it, and marks the lease ended either way.
// The lock and the marker are watched, so a lock taken by this lease's
// attempt still in flight, or by another lease, after the reads aborts the
// EXEC, and the release reads again.
func (n NoScripts) Release(ctx context.Context, c *Claim) (bool, error) {
	px := Window(cmp.Or(c.TTL, n.ttl)).Milliseconds() // the marker's life
	return result(watched(ctx, n, c, []string{c.Lock, c.Rev}, func(t tx, c *Claim) (bool, error) {
		h, m, _, err := t.lease(c)
		ok := h == c.Token
		switch {
		case err != nil:
			return false, err
		case !drives(m, c.Resumer):
			return false, ErrSuperseded // the lease is the resuming Lock's: nothing is written
		case ok: // (the wake key too, as release.lua does: the release is announced)
			_, err = t.exec([]any{"DEL", c.Lock, c.Wake}, []any{"SET", c.Rev, "1", "PX", px}, []any{n.pub, c.Channel, "*"})
		case m == "1": // released already, by a try whose reply was lost
			return true, nil
		case m == "0": // ended already: its marker stays as it is (see lib.lua's revoke)
		default:
			_, err = t.exec([]any{"SET", c.Rev, "0", "PX", px})
		}
		return ok, err
	}))
}

// Extend resets the lease to ttl from now as extend.lua does: only while
// the lease holds the lock, and unless an extension with a sequence number
// of at least seq was applied (recorded in the marker, "e<seq>"); with seq
// 0 it only ever lengthens the lease (PEXPIRE GT) and records nothing. Both keys
// are watched, so an older extension delayed in the network, which reads
// before a newer one writes and would act after it, finds its EXEC aborted.
func (n NoScripts) Extend(ctx context.Context, c *Claim, ttl time.Duration, seq int64) (bool, error) {
	ms, arg := ttl.Milliseconds(), fmt.Sprint(c.seqArg(seq))
	// Unnumbered, it never shortens the lease: no order to keep (see
	// extend.lua). Numbered, it reads both keys with GET instead, as
	// extend.lua does (see get).
	read, more := tx.lease, [][]any(nil)
	if seq > 0 { // (the marker's life: see below)
		read, more = tx.get, [][]any{{"PTTL", c.Lock}, {"PTTL", c.Rev}}
	}
	return result(watched(ctx, n, c, []string{c.Lock, c.Rev}, func(t tx, c *Claim) (bool, error) {
		h, m, pttls, err := read(t, c, more...)
		switch {
		case err != nil || h != c.Token:
			return false, err
		case !strings.HasPrefix(m, "e"): // no numbered extension was applied (see extend.lua and lib.lua's superseded)
		case seq > 0 && m == "e"+arg: // this request's earlier copy
			return true, nil
		case seq == 0 || seqOf(m) >= seq:
			return false, ErrSuperseded
		}
		writes := [][]any{{"pexpire", c.Lock, ms, "gt"}}
		if seq > 0 { // the marker lives as long as the lease could have, if longer (see lib.lua's superseded)
			lock, _ := pttls[0].Int64()
			rev, _ := pttls[1].Int64()
			writes = [][]any{{"pexpire", c.Lock, ms}, {"SET", c.Rev, "e" + arg, "PX", max(ms, lock, rev)}}
		}
		_, err = t.exec(writes...)
		return true, n.ack(t, err, nil, n.ackError) // (result drops it after an error)
	}))
}

// Fence issues the lease's fence as fence.lua does: max(last + 1, the
// server's clock in µs), stored for the fence window, if the lease holds
// the lock. The clock is read with TIME on the transaction's connection
// (the master of the keys), before the EXEC; the lock and the counter are
// watched, so a fence issued by anyone else meanwhile aborts the EXEC and
// this one is computed again. Fences therefore rise as with scripts, also
// when the counter was lost (it expired, an empty restart, a failover).
// The lease's marker is watched too: a Lock that another resumed gets no
// fence (see drives).
func (n NoScripts) Fence(ctx context.Context, c *Claim) (int64, error) {
	return result(watched(ctx, n, c, []string{c.Lock, c.Fence, c.Rev}, func(t tx, c *Claim) (int64, error) {
		h, m, r, err := t.lease(c, []any{"GET", c.Fence}, []any{"TIME"})
		prev, _ := r[0].Int64()     // (0: no counter)
		now, _ := r[1].Int64Slice() // seconds, µs
		switch {
		case err != nil && !strings.HasPrefix(err.Error(), "WRONGTYPE"): // (only the counter's GET can fail so: see lease)
			return 0, err
		case h != c.HolderID():
			return 0, nil
		case !drives(m, c.Resumer):
			return 0, ErrSuperseded
		case err != nil:
			return 0, Because(ErrWrongType, "the fence key holds a value of another type", err)
		case len(now) != 2:
			return 0, fmt.Errorf("TIME: unexpected reply %v", now)
		}
		fence := max(prev+1, now[0]*1e6+now[1])
		_, err = t.exec([]any{"SET", c.Fence, fence, "PX", n.fenceMS})
		return fence, err // (result drops the fence after an error)
	}))
}

// readState reads the state of the lock k as inspect.lua does, in one
// round trip through p (in a MULTI, or after a transaction's WATCH), and
// passes what it read to stateOf.
func readState(ctx context.Context, k *Keys, p redis.Pipeliner) (State, error) {
	kind := p.Type(ctx, k.Lock)
	contents := map[string]func() (any, error){}
	for typ, s := range shapes {
		contents[typ] = s.fetch(ctx, p, k.Lock)
	}
	pttl, now := p.Do(ctx, "PTTL", k.Lock), p.Time(ctx)
	// The errors of these (a key of another type) read as no fence, no
	// value (an election leader's) and no waiter, as in inspect.lua.
	fence, value := p.Get(ctx, k.Fence), p.Get(ctx, valueKey(k))
	waiting, entries := p.LRange(ctx, k.Queue, 0, -1), p.HGetAll(ctx, k.Waiters)
	_, perr := p.Exec(ctx)
	if kind.Err() == nil && kind.Val() == "" { // (TYPE always answers: the pipeline failed unsent, by a hook)
		return State{}, perr
	}
	t, err := now.Result() // (a failed pipeline fails every read)
	var c any              // (nothing for a type no kind keeps; the reads of the other types failed: WRONGTYPE)
	var cerr error
	if read := contents[kind.Val()]; read != nil {
		c, cerr = read()
	}
	if err = cmp.Or(err, cerr, kind.Err()); err != nil {
		return State{}, err
	}
	holder, _ := c.(string) // (a string's: GET's)
	left, _ := pttl.Int64()
	f, _ := fence.Int64()
	ms := t.UnixMilli()
	// The waiters in the queue whose entry's deadline (see lib.lua) is
	// ahead of the server's clock, as inspect.lua counts them.
	var live int64
	for _, token := range waiting.Val() {
		deadline, _, ok := strings.Cut(entries.Val()[token], ":")
		if d, err := strconv.ParseInt(deadline, 10, 64); ok && err == nil && d > ms {
			live++
		}
	}
	return stateOf(k, kind.Val(), holder, c, left, f, ms, live, value.Val()), nil
}

// Op is refused: the kinds with operations of their own need scripts (see
// Backend).
func (NoScripts) Op(context.Context, KindOp) (any, error) { return nil, ErrNeedsScripts }

// Inspect reads the lock's state as inspect.lua does, in one MULTI (which
// nothing can abort: it writes nothing, and watches nothing).
func (n NoScripts) Inspect(ctx context.Context, k *Keys) (State, error) {
	return result(leftWith(ctx, func() (State, error) { return readState(ctx, k, n.uc.TxPipeline()) }))
}

// Undo ends the lease c may hold (see Node.Undo).
func (n NoScripts) Undo(ctx context.Context, c *Claim) error {
	_, err := n.Release(ctx, c)
	return err
}

// Announce publishes msg with a plain PUBLISH (or SPUBLISH).
func (n NoScripts) Announce(ctx context.Context, k *Keys, msg string) error {
	return RedisErr(n.uc.Do(ctx, n.pub, k.Channel, msg).Err())
}

// Force deletes the lock whoever holds it, as force_release.lua does: the
// lock is watched before its holding is read, so the EXEC deletes the
// holding that was read, or nothing.
func (n NoScripts) Force(ctx context.Context, k *Keys) (bool, error) {
	return result(watched(ctx, n, nil, []string{k.Lock}, func(t tx, _ *Claim) (bool, error) {
		st, err := readState(ctx, k, t.Pipeline())
		if ok, ferr := st.forced(); !ok { // (a failed read's State is empty: no holding)
			return false, cmp.Or(err, ferr)
		}
		markers := st.forcedKeys(k)[1:]
		reads := make([][]any, len(markers))
		for i, m := range markers {
			reads[i] = []any{"PTTL", m}
		}
		pttls, err := t.read(reads...)
		if err != nil {
			return false, err
		}
		cmds := [][]any{{"DEL", k.Lock}, {n.pub, k.Channel, "*"}}
		for i, marker := range markers { // (as long as the lease could have lived, and a minute: see force_release.lua)
			rev, _ := pttls[i].Int64()
			cmds = append(cmds, []any{"SET", marker, "0", "PX", max(st.TTL.Milliseconds(), rev, 0) + time.Minute.Milliseconds()})
		}
		_, err = t.exec(cmds...)
		return true, err // (result drops it after an error)
	}))
}
