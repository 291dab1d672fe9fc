package dlock

// WithoutScripts makes the Client run no Lua scripts, for Redis users that
// may not (an ACL with -@scripting, or a managed Redis that denies EVAL
// and EVALSHA). A scripting Client that meets such an ACL fails with an
// error that says so and names this option.
//
// Each operation of the lock is then a compare-and-act transaction: WATCH
// the keys it decides on, read them, and MULTI … EXEC the writes, again
// from the reads if a watched key changed before the EXEC (at most 16
// times; then the call fails, having done nothing). The keys and values
// are those of the scripts, so script-free and scripting Clients can share
// lock names, Client.Inspect and List read both alike, and so does the
// dlock command.
//
// What it keeps, as with scripts: mutual exclusion (SET NX PX); release,
// extension and fence only while the lease still holds the lock; the
// lease's marker key, so that an attempt of a lease that was undone or
// released, delayed in the network, takes nothing, and a release whose
// reply was lost reports, when tried again, what the first did; extension
// sequence numbers, so a delayed older extension cannot cut short what a
// newer one set; fences that rise across releases, floored by the server's
// clock (TIME, read on the connection of the transaction) when the counter
// was lost to an expiry, an empty restart or a failover; unfair waiting,
// woken by pub/sub, with backoff; WithReplicaAck (WAIT on the transaction's
// connection); Sentinel and Cluster clients; MaxHold, holder metadata,
// AcquireAll, Client.ForceRelease. go-redis never re-sends the commands of
// a transaction on another connection, so a re-sent EXEC cannot run
// without its WATCH.
//
// What it gives up: fair waiting and handover (a waiter's queue has to be
// served in the same atomic step as the release), reentrant locks,
// semaphores, read-write locks, elections and Redlock (NewRedlock), which
// need scripts: New refuses WithFair(true) and WithReentrant(true) with it,
// and Client.Semaphore, Client.RWMutex, Client.Election and NewRedlock refuse
// it (ErrInvalid). Waiting is unfair, as with WithFair(false), which may be
// given but need not be; WithPipelining does not apply (each operation holds a
// connection of its own for its transaction), and New refuses
// WithPipelining(true) with it. Each operation takes three or four round
// trips instead of one, and a lock name whose keys are written very often
// (many holders asking for fences at once) may see transactions aborted
// and tried again. Guard, which writes with a script, needs scripting on
// the Redis it writes to.
func WithoutScripts() Option {
	return func(o *options) { o.noScripts = true }
}

// scriptFree applies WithoutScripts to the other options: it records those
// that need scripts as invalid, and turns fair waiting and pipelining off.
func (o *options) scriptFree() {
	if !o.noScripts {
		return
	}
	switch {
	case o.reentrant:
		o.invalid("WithReentrant(true): reentrant locks need scripts, which WithoutScripts() turns off")
	case o.fairSet && o.fair:
		o.invalid("WithFair(true): fair waiting needs scripts, which WithoutScripts() turns off; waiting is unfair without them")
	case o.pipeliningSet && o.pipelining:
		o.invalid("WithPipelining(true): does not apply with WithoutScripts(), whose transactions each hold a connection")
	}
	o.fair, o.pipelining = false, false
}
