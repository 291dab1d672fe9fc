package dlock

// Stats are counters of a Client's work since New (shared with the Clients
// made from it by Owner). All but Waiting only grow: sample them and take
// differences.
type Stats struct {
	Acquired    uint64 // acquisitions that took the lock
	NotAcquired uint64 // acquisitions that ended without it: held by another, or the context ended
	Released    uint64 // releases of a lease that still held the lock
	Lost        uint64 // leases lost before their release
	// ExtendFailed counts extensions (the watchdog's and Extend's) that
	// failed: Redis did not answer or refused, or the lease was gone.
	ExtendFailed uint64
	// Errors counts acquisitions and releases that failed with an error
	// from Redis (not ErrNotAcquired, ErrNotHeld or ErrInvalid).
	Errors uint64
	// Waiting is the number of Acquire calls waiting now for a lock that
	// is taken.
	Waiting int64

	// Calls are the script calls sent to Redis through the pipelining
	// batcher (WithPipelining, on by default), and Writes the pipelines, or
	// lone calls, that carried them: Calls/Writes is the mean batch size.
	// Under load the batch grows by itself: while a few pipelines are in
	// flight, the calls made meanwhile wait and go out together in the
	// next one. Both are 0 with WithPipelining(false).
	Calls, Writes uint64
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	o := c.obs
	calls, writes := c.b.Batches()
	return Stats{Acquired: o.acquired.Load(), NotAcquired: o.notAcquired.Load(), Released: o.released.Load(),
		Lost: o.lost.Load(), ExtendFailed: o.extendFailed.Load(), Errors: o.failed.Load(), Waiting: o.waiting.Load(),
		Calls: calls, Writes: writes}
}
