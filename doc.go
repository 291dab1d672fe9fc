// Package dlock provides distributed locks on Redis for Go services.
//
// A Client takes any go-redis v9 client (a single server, a Sentinel
// failover client or a Cluster client; Redis 7.0 or later) and hands out
// leases on lock names:
//
//	c, err := dlock.New(rdb, dlock.WithTTL(10*time.Second)) // a bad option fails here
//	if err != nil {
//		return err
//	}
//	l, err := c.Acquire(ctx, "reports:nightly") // waits until held or ctx is done
//	if err != nil {
//		return err // errors.Is(err, dlock.ErrNotAcquired) when ctx ended first
//	}
//	defer l.Release(context.WithoutCancel(ctx))
//	fence, err := l.Fence(ctx) // issued while the lease holds the lock, then cached
//	if err != nil {
//		return err
//	}
//	writeReport(ctx, fence) // hand the fencing token to the resource
//
// or, with the lock's loss turned into a cancelled context:
//
//	err := c.Do(ctx, "reports:nightly", func(ctx context.Context, l *dlock.Lock) error { ... })
//
// # What a lock guarantees
//
// A lease is mutually exclusive while it is valid: between a successful
// acquisition and Lock.ValidUntil no other client holds the same name,
// provided that Redis did not lose the key (a restart without persistence,
// a failover to a replica that had not received it) and that the rates of
// the client's and the server's clocks differ by less than the drift margin
// (WithDrift). Validity is counted on the client's monotonic clock from
// before the acquire request was sent, so a slow round trip shortens it
// rather than extending it; an acquisition whose reply came back after the
// lease could already have expired is undone and reported as not acquired.
//
// A holder that dies stops blocking others when its TTL runs out. Only the
// holder can extend or release (its random 128-bit token is compared inside
// a Lua script). With auto-extend on (the default) a watchdog extends the
// lease every TTL/3; if it cannot before the validity runs out, or Redis
// shows the token gone, Lock.Done is closed and Lock.Err says why — no later
// than the validity deadline. Lock.Extend may shorten the lease as well as
// lengthen it; the validity follows either way.
//
// # Failed, cancelled, delayed and panicking calls
//
// A call whose context is done sends nothing. Every way an Acquire or
// TryAcquire ends because of its context matches both ErrNotAcquired and
// ctx.Err(), and returns within a small bound of the deadline whatever
// the Redis client's timeouts (with WithPipelining(false), go-redis honours
// deadlines on reads only with ContextTimeoutEnabled). An attempt whose
// outcome is unknown — no answer, or the context ended while it was in
// flight — is undone: the lock is deleted if the attempt took it, and the
// attempt's token is revoked for the TTL (at most a minute), so a copy of
// the request that is still in the network (delayed, or re-sent by
// go-redis after a lost reply) is refused when it lands. A request delayed
// in the network for longer than that after it was undone can still take
// the lock, for nobody, for at most one TTL. Release, too, revokes its token, and a release that
// go-redis re-sends reports what the first copy did. Do releases the lock
// when its function panics, and the panic goes on.
//
// # What it does not guarantee, and fencing
//
// It is NOT safe to assume that the lock is still held when you act on the
// protected resource. A process can be paused (GC, swapping, a stopped VM)
// or a request delayed in the network for longer than the TTL, after its
// last check; when it resumes, another holder may be inside. No lock service
// can prevent that by itself.
//
// Every lease therefore has a fencing token, Lock.Fence, strictly greater
// than that of every earlier lease of the same name. Send it with each
// write, and have the resource refuse a write whose fence is lower than one
// it has already accepted: the late write of a paused former holder is then
// rejected however long the pause was. Guard does this for resources kept in
// Redis; its documentation shows the same rule in SQL. A fence is issued
// when the holder first asks for it, and only while its lease holds the
// lock. Fences are max(last + 1, Redis server time in µs), so they keep
// rising even when the counter is gone (it lives a minute after the last
// fence, and an empty restart loses it), as long as the servers' clocks do
// not step back by more than that.
//
// Redis can also lose a lock by itself: a restart without persistence, a
// failover to a replica that had not received it, or eviction. With a
// maxmemory-policy other than noeviction (the default), a Redis that is
// full evicts keys, and lock keys, which all have a TTL, are candidates
// even for the volatile-* policies. Keep noeviction on the Redis (or
// Valkey) that holds locks.
//
// # Keys
//
// A lock name N is kept at "dlock:{N}" (the prefix is set by WithPrefix): a
// string holding the lease's token (see Lock.Token: random, then the
// holder metadata, escaped), with a PX expiry, deleted on release.
// Each lease has a marker "dlock:{N}:r:<token>": the latest extension's
// number while held, and after it ended whether it ended holding the lock,
// for min(TTL, 1 minute), so that a request of the lease that lands late
// takes nothing and a re-sent release reports what the first copy did. The
// last fence is at "dlock:{N}:fence" for a minute after it was issued (a
// day over a quorum), and
// releases are announced on the pub/sub channel "dlock:{N}:ch". A reentrant
// lock is a hash at "dlock:{N}" with the owner, the fence and one field per
// hold (each hold is a lease with its own deadline and marker); the fair
// queue lives at "dlock:{N}:q" and "dlock:{N}:qw". A semaphore (see
// Semaphore) is a sorted set at "dlock:{N}": one member per permit, its
// token, scored by its deadline (ms, Redis server clock), expiring with
// the latest permit; each permit has a marker as a lease does, and its
// waiters use the fair queue's keys. A read-write lock (see RWMutex) is a
// sorted set at "dlock:{N}" too, whose members are "r:<token>" for a read
// and "w:<token>" for a write. The braces make all of
// them one Redis Cluster hash slot. Once a name is no longer locked, its
// keys are gone within max(TTL, 1 minute).
//
// # Waiting
//
// Acquire tries once; if the lock is taken, it subscribes to the release
// channel (one pub/sub connection per Client, shared by all its waiters),
// tries again, and then sleeps until a release message, the holder's
// remaining lease, or a jittered, capped backoff, whichever comes first.
//
// By default waiting is fair (WithFair): waiters queue in Redis in arrival
// order, a release hands the lock straight to the first live waiter and
// wakes only that one, and TryAcquire does not jump the queue.
//
// # Per-call options, holder metadata and a max hold
//
// Acquire, TryAcquire and Do — of a Client, a read-write lock's side, a
// semaphore, and of a multi-lock (AcquireAll, TryAcquireAll, DoAll: every
// part), as well as Election.Campaign — take LockOptions that set, for one
// lease, what the Client's options set for all: LeaseTTL (its lease time and watchdog
// period), MaxWait (how long Acquire may wait; 0 tries once), HolderMeta and
// MaxHold. Every lease carries holder metadata, "hostname:pid" unless
// WithHolderMeta or HolderMeta says otherwise, inside its token: Inspect,
// Lock.Meta and the *NotAcquiredError of a refused acquisition show who
// holds a lock, at no cost to Redis. Anyone who can read Redis can read it.
//
// WithMaxHold and MaxHold cap how long a lease is held: the watchdog's last
// extension ends its validity exactly at the cap, where the lease ends as a
// loss does (Lock.Err matches ErrNotHeld and ErrMaxHold, Do cancels its
// function's context) and the lock is released for the next holder.
//
// # Variants
//
// Client.Semaphore returns a counting semaphore: at most N holders of a
// name at once, each holding a permit that is a lease of its own (a *Lock).
// Client.RWMutex returns a read-write lock: many readers or one writer,
// each hold a lease of its own, waiting in one line so that readers cannot
// starve a writer.
// Client.Election returns a leader election: candidates Campaign in
// arrival order, the leadership is a fenced lease (a *Lock inside a
// Leadership), and Election.Leader and Election.Observe read who leads.
// WithReentrant makes a Client's locks reentrant for an owner, given
// explicitly with Client.Owner. Client.AcquireAll takes several names all
// or nothing, in one global order so that overlapping sets cannot
// deadlock, behind one MultiLock. NewRedlock holds locks on a majority of
// independent Redis masters. WithReplicaAck makes acquisitions wait for replicas (WAIT)
// under Sentinel. On a Redis Cluster, releases use sharded pub/sub.
// WithoutScripts runs plain locks as WATCH/MULTI/EXEC transactions, for a
// Redis user that may not run scripts.
package dlock
