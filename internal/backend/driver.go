package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/driver"
)

// NewNodeFrom returns the backend of one deployment reached through a
// driver (another Redis client than go-redis). The driver sends each
// command once and pipelines concurrent callers' commands itself, so there
// is no batcher; replica acknowledgement and the script-free mode need
// go-redis (the caller refuses them).
func NewNodeFrom(d driver.Conn, c Config) Node {
	d = guard{d}
	n := newNode(c, nil, d)
	if d.Info().Cluster {
		n.clock = nil // which master read the clock is unknown: readings of several would compare as one server's
	}
	return n
}

// guard keeps a driver's calls to their contexts: some clients (rueidis)
// make a command that finds its connection being dialled wait for that
// dial, whatever its own context. From a call that failed without a reply
// (a guarded one as its caller leaves it in flight) until troubleFor
// passes without another, each call runs on a goroutine of its own and its
// caller leaves when its context ends (whether the command was sent is
// then unknown; a call whose context is already done is not sent). Healthy, a call reads one atomic; one that read it just
// before a failure was recorded (the failed call's return and its record
// are a moment apart) runs unguarded, as before any failure.
type guard struct{ driver.Conn }

// troubleFor is how long calls stay guarded after a failure: twice a
// usual dial timeout (5 s), so that a dial that a failure started ends
// within it.
const troubleFor = 10 * time.Second

// lastNoReply is when a driver call last failed without a reply (ns since
// epoch, on the monotonic clock; 0: never). It is one for the process:
// Clients that share a client share its dials.
var (
	lastNoReply atomic.Int64
	epoch       = time.Now()
)

// guarded runs f on ctx as guard says, through leftWith while troubled;
// f's error says whether it failed without a reply (noReply). A call left
// in flight is noted as it is left: the trouble counts from then, not from
// when f ends.
func guarded[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if !troubled() {
		return noted(f(ctx))
	}
	return noted(leftWith(ctx, func() (T, error) { return noted(f(ctx)) }))
}

// troubled reports whether a driver call failed without a reply less than
// troubleFor ago.
func troubled() bool {
	t := lastNoReply.Load()
	return t != 0 && int64(time.Since(epoch))-t < int64(troubleFor)
}

// noted returns a call's result, and records when its error says that it
// got no reply.
func noted[T any](v T, err error) (T, error) {
	if noReply(err) {
		lastNoReply.Store(max(int64(time.Since(epoch)), 1))
	}
	return v, err
}

// noReply reports whether err says that a call got no reply: it is
// neither a reply (an error reply, a closed client) nor a refusal of the
// driver's before the call was sent (ErrNotSent).
func noReply(err error) bool {
	return err != nil && !errors.As(err, new(driver.Error)) && !errors.Is(err, driver.ErrClosed) && !errors.Is(err, ErrNotSent)
}

func (g guard) Do(ctx context.Context, args ...any) (any, error) {
	if !troubled() { // (guarded's test, before the closure that would cost an allocation each call)
		return noted(g.Conn.Do(ctx, args...))
	}
	return guarded(ctx, func(ctx context.Context) (any, error) {
		return g.Conn.Do(ctx, args...)
	})
}

// DoMulti's calls failed without a reply if one of its commands did.
func (g guard) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	rs, err := guarded(ctx, func(ctx context.Context) ([]driver.Result, error) {
		rs := g.Conn.DoMulti(ctx, cmds...)
		if len(rs) != len(cmds) { // (a driver's fault: what was sent is not known)
			return nil, fmt.Errorf("the driver gave %d replies to %d commands", len(rs), len(cmds))
		}
		if i := slices.IndexFunc(rs, func(r driver.Result) bool { return noReply(r.Err) }); i >= 0 {
			return rs, rs[i].Err
		}
		return rs, nil
	})
	if rs == nil && err != nil { // (left in flight, or a driver's reply count wrong)
		return slices.Repeat([]driver.Result{{Err: err}}, len(cmds))
	}
	return rs
}

func (g guard) Masters(ctx context.Context) ([]driver.Conn, error) {
	ms, err := guarded(ctx, g.Conn.Masters)
	for i, m := range ms {
		ms[i] = guard{m}
	}
	return ms, err
}
