package dlock

// Stats are counters of a Client's traffic since New (shared with the
// Clients made from it by Owner). They only grow: sample them and take
// differences.
type Stats struct {
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
	calls, writes := c.b.Batches()
	return Stats{Calls: calls, Writes: writes}
}
