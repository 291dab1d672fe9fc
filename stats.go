package dlock

import "sync/atomic"

// Stats are a Client's and its Owners' counters; all but Waiting only grow.
type Stats struct {
	Acquired       uint64 // acquisitions that took the lock
	NotAcquired    uint64 // acquisitions that ended without it
	Released       uint64 // releases of a lease that still held the lock
	Lost           uint64 // leases lost before their release
	ExtendFailed   uint64 // extensions (the watchdog's and Extend's) that failed
	Errors         uint64 // acquisitions and releases failed by a Redis error
	Waiting        int64  // Acquire calls waiting now
	Calls, Writes  uint64 // script calls go-redis's batcher sent, and its pipelines (0 through NewFrom)
	ObserverPanics uint64 // panics recovered in Observer functions
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	o := &c.obs
	calls, writes := c.b.Batches()
	return Stats{Acquired: o.acquired.Load(), NotAcquired: o.notAcquired.Load(), Released: o.released.Load(),
		Lost: o.lost.Load(), ExtendFailed: o.extendFailed.Load(), Errors: o.failed.Load(), Waiting: o.waiting.Load(),
		Calls: calls, Writes: writes, ObserverPanics: o.panics.Load()}
}

// holds counts a Client's leases by mode (a kind's slot): how many began
// being held, and how many of those ended; Held is the difference. It is
// made with the Client, once every kind has registered its mode.
type holds []struct{ began, ended atomic.Int64 }

// Held returns how many leases the Client and its Owner Clients hold now, by
// [Event.Mode] (docs/observability.md); a mode once held stays, at 0.
func (c *Client) Held() map[string]int64 {
	m := map[string]int64{}
	for i := range c.held {
		h := &c.held[i]
		ended := h.ended.Load() // (first: a lease ends after it began, so the difference is never negative)
		if began := h.began.Load(); began > 0 {
			m[modes[i]] = began - ended
		}
	}
	return m
}
