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
// never reads as a step. Two checks: a step, against the last reading,
// judged by the shortest lease the server has had (a step that a long
// lease's margin allows may end a short lease early); a rate, against a
// reading at least rateWindow older, by the least share of its lease that
// any of its leases' drift margins allows (a rate that a short lease's
// margin allows may end a long lease early). A way is told once, by either
// check, until a rate check agrees: a clock that runs fast may show as a
// step over a long interval and not over the short one after it.
type clockWatch struct {
	hook    *ClockHook
	addr    string
	cluster *redis.ClusterClient // a Cluster: the master of the key's slot read the clock

	mu      sync.Mutex
	servers map[string]*clockServer // by the server's address
}

// clockServer is what a clockWatch knows of one server's clock.
type clockServer struct {
	last, base clockReading  // the last reading, and the one a rate is measured from
	ttl        time.Duration // the shortest lease time read with it
	rate       float64       // the least share of a lease read with it that its drift margin allows
	told       int           // the direction told (+1 ahead, -1 behind) until a rate check agrees, or 0
}

// clockReading is one reading of a server's clock.
type clockReading struct {
	us        int64     // server time in µs
	sent, got time.Time // the interval it was taken in
}

// rateWindow is the least time over which a clockWatch measures a rate.
const rateWindow = 5 * time.Second

// compare says whether the server's clock moved from a to b beyond margin
// m(hi) of the client's, hi being the most the client's clock can have run
// between them: the direction (0: it agrees), how far beyond, and hi.
func compare(a, b clockReading, m func(hi time.Duration) time.Duration) (dir int, ahead, hi time.Duration) {
	moved := time.Duration(b.us-a.us) * time.Microsecond
	lo, hi := b.sent.Sub(a.got), b.got.Sub(a.sent) // the client's time between the readings is within [lo, hi]
	switch margin := m(hi); {
	case moved > hi+margin:
		return 1, moved - hi, hi
	case moved < lo-margin:
		return -1, moved - lo, hi
	}
	return 0, 0, hi
}

func newClockWatch(h *ClockHook, rdb redis.UniversalClient) *clockWatch {
	if h == nil {
		return nil
	}
	w := &clockWatch{hook: h, servers: map[string]*clockServer{}}
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
// extension of the lock key for a lease of ttl, and tells of a step since
// the previous reading of the same server, or of a rate beyond the margin.
func (w *clockWatch) read(ctx context.Context, key string, ttl time.Duration, us int64, sent, got time.Time) {
	addr := w.addr
	if w.cluster != nil {
		m, err := w.cluster.MasterForKey(ctx, key) // (the slots as the extension found them: no round trip)
		if err != nil {
			return
		}
		addr = m.Options().Addr
	}
	cur := clockReading{us: us, sent: sent, got: got}
	w.mu.Lock()
	s := w.servers[addr]
	if s == nil {
		w.servers[addr] = &clockServer{last: cur, base: cur, ttl: ttl, rate: w.rate(ttl)}
		w.mu.Unlock()
		return
	}
	if sent.Before(s.last.got) {
		// Taken while the last was in flight, it may come before it in
		// the server's time: compared with it, a step between the two
		// would read backwards.
		w.mu.Unlock()
		return
	}
	s.ttl, s.rate = min(s.ttl, ttl), min(s.rate, w.rate(ttl))
	dir, ahead, over := compare(s.last, cur, func(hi time.Duration) time.Duration { return w.hook.Margin(s.ttl, hi) })
	s.last = cur
	switch {
	case dir != 0:
		s.base = cur // a step is no rate
	case got.Sub(s.base.sent) >= rateWindow:
		dir, ahead, over = compare(s.base, cur, func(hi time.Duration) time.Duration {
			return time.Duration(s.rate * float64(hi))
		})
		s.base = cur
		if dir == 0 {
			s.told = 0
		}
	}
	tell := dir != 0 && dir != s.told
	if dir != 0 {
		s.told = dir
	}
	w.mu.Unlock()
	if tell {
		w.hook.Tell(ctx, key, addr, ahead, over)
	}
}

// rate is the share of a lease of ttl that its drift margin allows.
func (w *clockWatch) rate(ttl time.Duration) float64 {
	return float64(w.hook.Margin(ttl, 0)) / float64(ttl)
}
