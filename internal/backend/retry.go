package backend

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Transient reports whether err may go away if the call is tried again:
// Redis did not answer, or refused a write for the time being (a replica
// short under min-replicas-to-write, a failover or a slot move under way, memory full, a
// server loading its data or busy with a script, a failed snapshot or
// append-only write, MISCONF, refusing writes until the next one succeeds).
// A quorum's may pass if one of its nodes' errors may (a node's no is no
// error that may pass).
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrSuperseded) || closed(err) {
		return false
	}
	if q := (*QuorumError)(nil); errors.As(err, &q) { // (a node's no, errRefused, is an answer: it stands)
		return slices.ContainsFunc(q.Nodes, func(err error) bool { return err != errRefused && Transient(err) })
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // (no answer)
	}
	return slices.ContainsFunc([]string{"NOREPLICAS", "READONLY", "OOM", "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MISCONF", "MOVED", "ASK"},
		func(p string) bool { return strings.HasPrefix(rerr.Error(), p) })
}

// Unsent reports whether err says the request reached no Redis: it never
// left the client (see neverSent), or, over a quorum, it left for no node
// (a QuorumError unwraps to every node's error: one node's ErrNotSent
// says nothing of the others).
func Unsent(err error) bool {
	if q, ok := errors.AsType[*QuorumError](err); ok {
		return !slices.ContainsFunc(q.Nodes, func(err error) bool { return !neverSent(err) })
	}
	return neverSent(err)
}

// The schedule of a clean-up retried in the background (an undo, a
// quorum node's missed release): enough to outlast a blip (a write refused
// for a moment, a connection being re-made), few enough that a node that
// stays down does not keep a goroutine per failed call for long. The
// pauses are 25ms, 100ms, 400ms, 1.6s; each call is bounded by RetryCall.
const (
	RetryMax   = 10 * time.Second
	RetryTries = 5
	RetryCall  = 2 * time.Second
)

// RetryFor is how long the clean-up of a lease of ttl (an undo, a quorum
// node's missed release) is retried in the background: for as long as the
// lease it ends could block others, and at least a second, to outlast a
// blip however short the lease; at most RetryMax.
func RetryFor(ttl time.Duration) time.Duration { return min(max(ttl, time.Second), RetryMax) }

// Retry calls f until it returns an error that is not Transient (or none),
// RetryTries calls were made, or the next pause would end after deadline.
// Each call is bounded by RetryCall and by deadline. tried, if not nil, is
// called once the first call is over. It returns f's last error.
func Retry(deadline time.Time, f func(context.Context) error, tried func()) error {
	pause := 25 * time.Millisecond
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), min(RetryCall, time.Until(deadline)))
		err := f(ctx)
		cancel()
		if try == 0 && tried != nil {
			tried()
		}
		if try == RetryTries-1 || !Transient(err) || time.Now().Add(pause).After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause *= 4
	}
}
