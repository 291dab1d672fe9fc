package backend

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClockHook is how a Node tells of its server's clock, by which Redis
// expires keys: a step, a clock that runs fast or slow, or one that froze.
type ClockHook struct {
	// On reports whether anyone listens: only then do extensions ask for
	// the server's time (extend.lua's ARGV[4]: one TIME in the script).
	On func() bool
	// Margin is a lease of ttl's drift margin: how much earlier than its
	// holder counts the server may expire it.
	Margin func(ttl time.Duration) time.Duration
	// Tell is told that the server at addr ("" if unknown) moved ahead
	// (> 0) or behind (< 0) of the client's clock by ahead beyond the
	// margin, over about over, as an extension of the lock key showed.
	Tell func(ctx context.Context, key, addr string, ahead, over time.Duration)
}

// clockWatch compares the server times that a Node's extensions bring back
// with the client's monotonic clock, each server's on its own (a Cluster's
// masters by the key's slot). Each reading is known only to have been
// taken between the request's send and its reply, so two readings bound
// the client's time between them, and only a server time outside those
// bounds by more than the margin of the reading's lease is told: a slow
// reply widens them and never reads as a step. Each reading is compared
// with one baseline reading of its server (see compare): a step shows at
// once, a clock that runs fast or slow once its error outgrows the
// margin. A reading that disagrees becomes the baseline, and its way is
// told once, until the clock agrees over a whole window (baseWindow): a
// clock that runs fast may disagree over a long interval and not over the
// short one after it.
type clockWatch struct {
	hook *ClockHook
	rdb  redis.UniversalClient // a Client's server, or a Cluster's master of the key's slot, read the clock

	mu    sync.Mutex
	bases map[string]*clockReading // each server's baseline, by its address
}

// clockReading is one reading of a server's clock; as its baseline, the
// one the next readings are compared with.
type clockReading struct {
	us        int64     // server time in µs
	sent, got time.Time // the interval it was taken in
	told      int       // a baseline's: the way told (+1 ahead, -1 behind) until the clock agrees over a window, or 0
}

// baseWindow is how long, at least, a baseline the clock agrees with is
// kept, and a lease time if longer: long enough that a rate which would
// end the lease early outgrows its margin before the next baseline.
const baseWindow = 5 * time.Second

// on reports whether an extension asks for the server's time.
func (w *clockWatch) on() bool { return w != nil && w.hook.On != nil && w.hook.On() }

// read records the server time us, read between sent and got by an
// extension of the lock key for a lease of ttl, and tells of a server
// clock that moved beyond the lease's margin since the server's baseline.
// Unwatched (w nil), it does nothing.
func (w *clockWatch) read(ctx context.Context, key string, ttl time.Duration, us int64, sent, got time.Time) {
	if w == nil {
		return
	}
	var addr string // ("": a driver's, unknown)
	switch c := w.rdb.(type) {
	case *redis.Client:
		addr = c.Options().Addr
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, key) // (the slots as the extension found them: no round trip)
		if err != nil {
			return
		}
		addr = m.Options().Addr
	}
	w.mu.Lock()
	dir, ahead, over := w.compare(addr, clockReading{us: us, sent: sent, got: got}, ttl)
	w.mu.Unlock()
	if dir != 0 {
		w.hook.Tell(ctx, key, addr, ahead, over)
	}
}

// compare compares cur, a reading of the server at addr for a lease of
// ttl, with the server's baseline (w.mu held), and makes it the baseline
// if the clocks disagree or the window passed. It returns the way to tell
// (0: none, or told already), how far beyond the margin the server's
// clock moved, and hi, the most the client's clock can have run between
// the readings. The margin is the lease's drift margin for a step, or over
// more than ttl, a rate that ends the lease early by no more (the
// margin's share of ttl).
func (w *clockWatch) compare(addr string, cur clockReading, ttl time.Duration) (dir int, ahead, hi time.Duration) {
	base := w.bases[addr]
	switch {
	case base == nil:
		w.bases[addr] = &cur
		return 0, 0, 0
	case cur.sent.Before(base.got):
		// Taken while the baseline was in flight, it may come before it
		// in the server's time: compared with it, a step between the
		// two would read backwards.
		return 0, 0, 0
	}
	moved := time.Duration(cur.us-base.us) * time.Microsecond
	lo, hi := cur.sent.Sub(base.got), cur.got.Sub(base.sent) // the client's time between the readings is within [lo, hi]
	margin := w.hook.Margin(ttl)
	if hi > ttl && ttl > 0 {
		margin = time.Duration(float64(margin) / float64(ttl) * float64(hi))
	}
	switch {
	case moved > hi+margin:
		dir, ahead = 1, moved-hi
	case moved < lo-margin:
		dir, ahead = -1, moved-lo
	}
	told := base.told
	if dir != 0 || hi >= max(baseWindow, ttl) {
		cur.told = dir
		*base = cur
	}
	if dir == told {
		return 0, 0, 0
	}
	return dir, ahead, hi
}
