package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockio/dlock/internal/script"
)

// A semaphore (see lib.lua) is a sorted set at the lock key: one member per
// permit, scored by its deadline. A permit is a lease like a plain lock's:
// its own token, marker key, extensions and release; its waiters queue as a
// fair lock's do. Extend, Release, Fence and Undo serve permits through the
// same methods as locks, by the claim's Kind, Permits(N, 1).

// Permits returns the kind of a hold of w permits at once (w > 0; 1: a
// permit) of a semaphore whose holder asks with N = permits: one lease, w
// members of the set. The script refuses w above the size in force (the
// kept size, else permits).
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
// the size while none is stored. A change carries its request's id: a
// copy of it that lands again (asked again after a lost reply, as a
// release is, see again; or late) gets the first one's answer and changes
// nothing, for RequestWindow; and it is acknowledged as an acquisition is
// (WithReplicaAck, durable grants).
func (n Node) Permits(ctx context.Context, k *Keys, op, id string, v, size int) (PermitSize, error) {
	keys := []any{k.Lock, sizeKey(k), k.Queue, sizeKey(k) + ":" + id}
	args := []any{op, v, size, k.Channel, n.pub, RequestWindow.Milliseconds()}
	acks := int64(-1)
	_, r, err := n.again(ctx, false, func() (r any, err error) {
		if op == "get" {
			return n.run(ctx, permits, keys, args...)
		}
		r, acks, err = n.acked(ctx, permits, nil, keys, args...)
		return r, err
	})
	vs, err := ints(r, err)
	if err == nil && acks >= 0 && acks < int64(n.replicas) {
		err = n.ackError(acks)
	}
	if err != nil {
		return PermitSize{}, n.wrongKind(ctx, k.Lock, Permit, RedisErr(err))
	}
	if len(vs) != 3 {
		return PermitSize{}, fmt.Errorf("permits.lua: unexpected reply %v", vs)
	}
	return PermitSize{Size: int(vs[0]), Held: int(vs[1]), Changed: vs[2] == 1}, nil
}

// RequestWindow is how long a semaphore's size change is known by its id
// (see Node.Permits): a copy of its request that lands later than that
// after the first is applied again.
const RequestWindow = time.Minute

// sizeKey is the key of a semaphore's size kept in Redis (permits.lua),
// made only when a size is stored.
func sizeKey(k *Keys) string { return k.Lock + ":n" }

// PermitSize is a semaphore's size as permits.lua read or left it.
type PermitSize struct {
	Size, Held int  // the size, and the permits held
	Changed    bool // the call changed the stored size
}
