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
	// Margin is how far the server's clock may move from the client's over
	// over, the client's time between two readings, for a lease of ttl.
	Margin func(ttl, over time.Duration) time.Duration
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
// bounds by more than the margin is told: a slow reply widens them and
// never reads as a step. Each reading replaces the last (a slow clock drift
// never adds up), and a disagreement is told once, until a reading agrees
// again.
type clockWatch struct {
	hook    *ClockHook
	addr    string
	cluster *redis.ClusterClient // a Cluster: the master of the key's slot read the clock

	mu   sync.Mutex
	last map[string]*clockReading // by the server's address
}

// clockReading is the last reading of one server's clock.
type clockReading struct {
	us        int64     // server time in µs
	sent, got time.Time // the interval it was taken in
	told      int       // the direction told (+1 ahead, -1 behind) until the clocks agree again, or 0
}

func newClockWatch(h *ClockHook, rdb redis.UniversalClient) *clockWatch {
	if h == nil {
		return nil
	}
	w := &clockWatch{hook: h, last: map[string]*clockReading{}}
	switch c := rdb.(type) {
	case *redis.Client:
		w.addr = c.Options().Addr
	case *redis.ClusterClient:
		w.cluster = c
	}
	return w
}

// on reports whether an extension asks for the server's time.
func (w *clockWatch) on() bool { return w != nil && w.hook.On != nil && w.hook.On() }

// read records the server time us, read between sent and got by an
// extension of the lock key for a lease of ttl, and tells of a
// disagreement with the previous reading of the same server.
func (w *clockWatch) read(ctx context.Context, key string, ttl time.Duration, us int64, sent, got time.Time) {
	addr := w.addr
	if w.cluster != nil {
		m, err := w.cluster.MasterForKey(ctx, key) // (the slots as the extension found them: no round trip)
		if err != nil {
			return
		}
		addr = m.Options().Addr
	}
	w.mu.Lock()
	r := w.last[addr]
	if r == nil || sent.Before(r.got) {
		// The first reading; or one taken while the last was in flight,
		// which may come before it in the server's time: compared with it,
		// a step between the two would read backwards.
		if r == nil {
			w.last[addr] = &clockReading{us: us, sent: sent, got: got}
		}
		w.mu.Unlock()
		return
	}
	moved := time.Duration(us-r.us) * time.Microsecond
	lo, hi := sent.Sub(r.got), got.Sub(r.sent) // the client's time between the readings is within [lo, hi]
	m := w.hook.Margin(ttl, hi)
	var ahead time.Duration
	dir := 0
	switch {
	case moved > hi+m:
		ahead, dir = moved-hi, 1
	case moved < lo-m:
		ahead, dir = moved-lo, -1
	}
	tell := dir != 0 && dir != r.told
	*r = clockReading{us: us, sent: sent, got: got, told: dir}
	w.mu.Unlock()
	if tell {
		w.hook.Tell(ctx, key, addr, ahead, hi)
	}
}
