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
// with the client's monotonic clock. Each reading is known only to have
// been taken between the request's send and its reply, so two readings
// bound the client's time between them, and only a server time outside
// those bounds by more than the margin is told: a slow reply widens them
// and never reads as a step. Each reading replaces the last (a slow clock
// drift never adds up), and a disagreement is told once, until a reading
// agrees again.
type clockWatch struct {
	hook *ClockHook
	addr string

	mu        sync.Mutex
	us        int64     // the last reading, server time in µs (0: none)
	sent, got time.Time // the interval it was taken in
	told      int       // the direction told (+1 ahead, -1 behind) until the clocks agree again, or 0
}

func newClockWatch(h *ClockHook, rdb redis.UniversalClient) *clockWatch {
	if h == nil {
		return nil
	}
	w := &clockWatch{hook: h}
	if c, ok := rdb.(*redis.Client); ok {
		w.addr = c.Options().Addr
	}
	return w
}

// on reports whether an extension asks for the server's time.
func (w *clockWatch) on() bool { return w != nil && w.hook.On != nil && w.hook.On() }

// read records the server time us, read between sent and got by an
// extension of the lock key for a lease of ttl, and tells of a
// disagreement with the previous reading.
func (w *clockWatch) read(ctx context.Context, key string, ttl time.Duration, us int64, sent, got time.Time) {
	w.mu.Lock()
	if w.us == 0 || sent.Before(w.got) {
		// The first reading; or one taken while the last was in flight,
		// which may come before it in the server's time: compared with it,
		// a step between the two would read backwards.
		if w.us == 0 {
			w.us, w.sent, w.got = us, sent, got
		}
		w.mu.Unlock()
		return
	}
	moved := time.Duration(us-w.us) * time.Microsecond
	lo, hi := sent.Sub(w.got), got.Sub(w.sent) // the client's time between the readings is within [lo, hi]
	m := w.hook.Margin(ttl, hi)
	var ahead time.Duration
	dir := 0
	switch {
	case moved > hi+m:
		ahead, dir = moved-hi, 1
	case moved < lo-m:
		ahead, dir = moved-lo, -1
	}
	tell := dir != 0 && dir != w.told
	w.us, w.sent, w.got, w.told = us, sent, got, dir
	w.mu.Unlock()
	if tell {
		w.hook.Tell(ctx, key, w.addr, ahead, hi)
	}
}
