package backend

import (
	"context"
	"fmt"

	"github.com/dlockio/dlock/internal/script"
)

// A semaphore (see lib.lua) is a sorted set at the lock key: one member per
// permit, scored by its deadline. A permit is a lease like a plain lock's:
// its own token, marker key, extensions and release; its waiters queue as a
// fair lock's do. Extend, Release, Fence and Undo serve permits through the
// same methods as locks, by the claim's Kind, Permits(N, 1).

// Permits returns the kind of a hold of w permits at once (0 < w ≤
// permits; 1: a permit) of a semaphore whose holder asks with N = permits:
// one lease, w members of the set.
func Permits(permits, w int) Kind { return permit{hold{w: w, ask: permits, sized: true}} }

// Permit is the kind Inspect reads every permit of a semaphore as
// (Hold.Kind), whatever N it was asked with and however many permits it
// holds (Hold.N).
var Permit = Permits(0, 1)

// permit is a hold of w permits of a semaphore whose holder asks with N
// (hold.ask).
type permit struct{ hold }

func (permit) scripts() (*script.Script, scriptSet) { return holdAcquire, holdScripts }

func (permit) what() string { return "a semaphore" }

// permits is the semaphore's permits.lua, which keeps its size.
var permits = loads("permits")

// Permits runs permits.lua on the semaphore k: op "get", "set" (to v,
// unless a size is stored), "unset" or "add" (v); size is the caller's N,
// the size while none is stored.
func (n Node) Permits(ctx context.Context, k *Keys, op string, v, size int) (PermitSize, error) {
	r, err := ints(n.run(ctx, permits, []any{k.Lock, sizeKey(k), k.Queue}, op, v, size, k.Channel, n.pub))
	if err != nil {
		return PermitSize{}, n.wrongKind(ctx, k.Lock, Permit, RedisErr(err))
	}
	if len(r) != 3 {
		return PermitSize{}, fmt.Errorf("permits.lua: unexpected reply %v", r)
	}
	return PermitSize{Size: int(r[0]), Held: int(r[1]), Changed: r[2] == 1}, nil
}

// sizeKey is the key of a semaphore's size kept in Redis (permits.lua),
// made only when a size is stored.
func sizeKey(k *Keys) string { return k.Lock + ":n" }

// PermitSize is a semaphore's size as permits.lua read or left it.
type PermitSize struct {
	Size, Held int  // the size, and the permits held
	Changed    bool // the call changed the stored size
}
