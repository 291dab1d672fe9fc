package backend

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// Kind is what a lease is, and the one place a Node learns how to serve
// it: the scripts that take, extend and end it, how their replies read,
// and which scripts Prepare loads for it. Each kind is a type in a file of
// its own: a Client's own locks (lock.go: plain and fair; reentrant.go), a
// semaphore's permits (semaphore.go), a read-write lock's holds
// (rwmutex.go) and leadership campaigns (campaign.go). Every Claim names
// its Kind. Each backend says which kinds it carries (Backend.Carries),
// and still refuses a claim of another on its own.
type Kind interface {
	// acquire runs the kind's acquire script once (see Node.Acquire).
	acquire(ctx context.Context, n Node, c *Claim, ttl time.Duration, queue bool) (Grant, error)
	// extend sends the kind's extension (see Node.Extend), whose reply is
	// 1 if it extended, and returns the reply, the replicas that
	// acknowledged it (-1 without replica ack) and the error.
	extend(ctx context.Context, n Node, c *Claim, ttl time.Duration, seq int64) (any, int64, error)
	// release sends the kind's release (see Node.Release), whose reply is
	// 1 if the lease held the lock; window is the lease's marker's life
	// in ms.
	release(ctx context.Context, n Node, c *Claim, window int64) (any, error)
	// scripts returns the script the kind's acquisition runs and the set
	// of those its leases run.
	scripts() (first *script.Script, need scriptSet)
	// anyBackend reports whether every backend carries the kind (see
	// Backend.Carries): a quorum, and one without scripts, as well as a
	// Node (shared: false). A kind built on another kind's type (the fair
	// lock on the plain lock's) says it itself.
	anyBackend() bool
	// fenceWindow is how long the fence counter lives after a lease of
	// ttl on n is fenced (see Node.Fence): the Node's fence window
	// (shared), unless the kind says otherwise.
	fenceWindow(n Node, ttl time.Duration) any
	// holder is what the lock names as the holder of the lease c, if not
	// its token (Claim.Holder, set as c's token or kind is; shared: "").
	holder(c *Claim) string
	// what is a lease of the kind in words ("a plain lock"), as a
	// WRONGTYPE error says what was wanted (see wrongKind).
	what() string
	// shape is the Redis type of the kind's lock key; its name goes to
	// the scripts shared by kinds (fence.lua, raise_fence.lua), which so
	// need not probe it.
	shape() *shape
}

// shared is what the kinds share unless they say otherwise: the Node's
// fence window, and the token as the holder (no Claim.Holder).
type shared struct{}

func (shared) fenceWindow(n Node, _ time.Duration) any { return n.fenceMS }

func (shared) holder(*Claim) string { return "" }

func (shared) anyBackend() bool { return false }

// A shape is a Redis type that kinds keep at their lock key, and how a key
// of that type reads, whichever kind wrote it.
type shape struct {
	// typ is the type's name, as TYPE says it; heldAs names the kinds that
	// keep a key of the type ("a reentrant lock"; see State.HeldAs).
	typ, heldAs string
	// holds says what a key of this type holds ("a lock (a string), …")
	// after a WRONGTYPE reply, reading the key if it must; false if that
	// read failed.
	holds func(ctx context.Context, n Node, key string) (string, bool)
	// read puts into st the key's contents as inspect.lua's owners carry
	// them (a string's, its holder, stateOf reads itself into st.Token;
	// now: the server's clock, ms): its Leases (st's TTL is read), and its
	// kind's Extra, reading extra too, the value of a key a kind keeps
	// beside (inspect.lua's KEYS[5], a leader's: see valueKey).
	read func(st *State, contents any, now int64, extra string)
	// fetch queues on p the read of the contents that inspect.lua makes,
	// for a backend without scripts, and returns what reads its reply once
	// p ran: as a script's call reads it (a string; a hash's fields and
	// values, or a sorted set's members and scores, as one flat list).
	fetch func(ctx context.Context, p redis.Pipeliner, key string) func() (any, error)
}

// shapes are the Redis types the kinds keep, by name: each registers
// itself where its kinds are declared (shaped).
var shapes = map[string]*shape{}

// shaped registers s as the shape of its type, and returns it.
func shaped(s shape) *shape { shapes[s.typ] = &s; return &s }

// shapeOf returns the shape whose type is typ; for a type no kind keeps
// ("none" included), one that holds another program's value, and reads
// and fetches nothing.
func shapeOf(typ string) *shape {
	if s := shapes[typ]; s != nil {
		return s
	}
	return &shape{typ: typ, heldAs: "a " + typ, holds: holding("a " + typ + ", another program's value"), read: func(*State, any, int64, string) {}}
}

// holding returns a shape's holds that reads nothing: the key holds what.
func holding(what string) func(context.Context, Node, string) (string, bool) {
	return func(context.Context, Node, string) (string, bool) { return what, true }
}

// Why a backend does not carry a Kind (Backend.Carries, Backend.Op).
var (
	ErrOverQuorum   = errors.New("a quorum carries only its nodes' own locks")
	ErrNeedsScripts = errors.New("only plain locks run without scripts")
)

// anyBackendOnly is the Carries of a backend that serves only the kinds
// every backend carries (plain locks): nil for those, else why.
func anyBackendOnly(k Kind, why error) error {
	if !k.anyBackend() {
		return why
	}
	return nil
}

// Carries serves every Kind (see Backend).
func (Node) Carries(Kind) error { return nil }

// flag is b as a script's argument: 1 or 0.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendIf returns a script's arguments args, followed by v if cond: its
// optional last argument (a fair waiter's 1, a hold's permits).
func appendIf(cond bool, v any, args ...any) []any {
	if cond {
		return append(args, v)
	}
	return args
}

// granted returns g, what an acquire script granted, unless fewer replicas
// than asked acknowledged it (acks; -1 without replica ack): then it must
// be undone.
func (n Node) granted(g Grant, acks int64) (Grant, error) {
	if acks >= 0 && acks < int64(n.replicas) {
		return Grant{Undo: true}, n.ackUndone(acks)
	}
	return g, nil
}
