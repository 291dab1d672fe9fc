package dlock

import "sync/atomic"

// Stats are a Client's counters since New, shared with its Owner Clients. All
// but Waiting only grow.
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

// holding counts a lease of mode that begins (+1) or ends (-1) being held.
func (o *observers) holding(mode string, delta int64) {
	n, ok := o.held.Load(mode)
	if !ok {
		n, _ = o.held.LoadOrStore(mode, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(delta)
}

// Held returns how many leases the Client and its Owner Clients hold now, by
// [Event.Mode], each counted from its acquisition to its release or loss as
// its Lock knows it: without the watchdog, a lease that ran out counts until
// it is looked at (Err, Done, an Observer's Lost). A mode once held stays, at 0.
func (c *Client) Held() map[string]int64 {
	m := map[string]int64{}
	c.obs.held.Range(func(mode, n any) bool {
		m[mode.(string)] = n.(*atomic.Int64).Load()
		return true
	})
	return m
}
