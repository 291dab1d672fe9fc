// Package torture is a model-based randomized fault checker for dlock: a
// "torture test". TestTorture runs seeded rounds; each round picks a mode
// (plain unfair, fair, reentrant with nested holds, Redlock over 3 or 5
// nodes, semaphores of N permits, N drawn per round from SemPermits (2 or
// 3), elections whose campaigns
// are the acquisitions, plain locks WithoutScripts, read-write locks, or
// multi: fair locks half of whose acquisitions take several names at
// once), drives several Clients — goroutines of the test process and
// worker processes (the test binary re-executed, see RunProcess) — through
// random operations on a few lock names while an Injector breaks things,
// then quiesces the system and checks the round's history.
//
// # Operations
//
// Acquire, TryAcquire and Do with short or generous context deadlines and
// cancellations at random points; Extend to shorter and longer TTLs;
// Release once, twice, late, from stale handles (lapsed or already
// released), and, with the watchdog on, right as it runs (a few ms either
// side of a third of the lease after the last extension was sent; then
// Redis must not carry the lease); panics inside Do (recovered by the
// worker); nested re-entry of a reentrant lock by its owner; a Do nested in another's fn, on a name
// above its own (see (m)); a held lease taken over by its token
// through a new Lock (Resume, one acquisition in five where no watchdog or
// max hold runs); a write downgraded to a read (RWMutex.Downgrade, rw
// rounds); a leader's value changed (Leadership.Proclaim, election rounds,
// checked by (h) against what reads of the leader show); in semaphore
// rounds without node restarts, a worker that only changes the names' kept
// sizes (Semaphore.AddPermits, between N and N+1: size.go), checked by (a)
// and (p); and in semaphore rounds one Acquire or TryAcquire in three
// takes 2 to N permits at once as one lease (Semaphore.AcquireN; for one
// attempt with MaxWait(0)), resumed as such (with N = 3, a hold of 2
// leaves a permit to take beside it, or to hold back from a waiter for one
// queued behind a waiter for more). In plain and fair rounds (15 in 100) and
// multi rounds (half), an acquisition takes a set of two or more names in
// random order (AcquireAll, TryAcquireAll, DoAll), contending with single
// acquisitions of the same names. Where the names are plain locks (plain,
// fair, multi, quorum, noscripts), a third of the acquisitions, sets
// included (their MaxWait bounds the whole call), get per-call options — LeaseTTL from a third of the TTL to twice it, MaxWait,
// HolderMeta (escapes, a comma, the longest allowed, none), a MaxHold or
// MaxHold(0) — and a Client in four gets MaxHold and one in four
// HolderMeta; holders check Inspect's view of their metadata, and
// some stay in their critical section past their max hold. Semaphores,
// elections and read-write locks get LeaseTTL and MaxWait alike, so that
// a queueing request a delay fault holds can land after its lease's
// revocation window (a third of the TTL and up) has passed. With the watchdog on, a Client in three gets
// WatchLoss, and a third of the acquisitions of every kind turn it on or off (the lock nodes have keyspace
// notifications on): messages, reconnects after faults and the key's end make holders check at once, and (a)
// and (g) hold them to telling only a real loss. Half the Clients have a Lost hook that, told of the loss of
// one of its worker's leases, calls that lease's Lock under a bounded context — Release, Fence, Extend or
// Err, a write hold's Downgrade, a leadership's Proclaim, one at random — as the call that found the loss
// may be the one telling it (see (n)). Every Client gets random go-redis settings
// (200–300ms read timeouts, ContextTimeoutEnabled on or off, 3, 1 or no
// retries) and dlock settings (auto-extend, pipelining, the driver road:
// dlock.NewFrom on go-redis, for a third of the workers; with Driver set,
// as the rueidis and valkey-go adapters' tests do, on that client for all).
//
// # Faults
//
// SIGSTOP of a worker process for longer than the TTL, redis-server pause
// and resume, kill and empty restart of a lock node (a minority node of a
// quorum), and, through a TCP proxy in front of every node, requests or
// replies delayed past the read timeout (a request can land after its
// caller gave up and undid it), stalls, and stalls of replies followed by
// a cut (go-redis re-sends the command, so scripts run twice). A goroutine
// worker's go-redis client is closed under its Client while it holds and
// waits — its only node's, or of a quorum one node's or a majority's —
// and it then makes a fresh client and Client (closed.go); the leases it
// kept are left to expire. Some rounds
// end by SIGKILLing a worker process that may hold locks. On the driver
// road, three workers in four have their connections refuse 2–10% of the
// commands (of a batch, one by one or all) unsent, with an error wrapping
// driver.ErrNotSent, as a driver may; no window is exempted for them.
//
// # History
//
// Every worker appends JSON lines (Event) to its own file: each call with
// its invoke and return instants (wall clock, shared by all processes of
// the machine), token, fence, ValidUntil and outcome; inside critical
// sections, "enter"/"alive"/"exit" stamps, each taken just before the
// holder checks that it still holds (Lock.Err, or Do's context), so a
// recorded stamp is an instant the library itself vouched for; and every
// write through dlock.Guard to a separate redis-server that no fault
// touches, accepted or refused as stale.
//
// # Invariants
//
//	(a) critical sections of one name under different owners never
//	    overlap (of a semaphore: no more than N permits at any instant,
//	    each critical section weighing the permits its hold took;
//	    where its kept size changes, N+1, but N where the size was known
//	    to be N when the last of them was granted),
//	    except in the windows the docs allow: after a lock node came back
//	    empty, until the longest lease granted before could have run out
//	    (there (c) must still hold);
//	(b) fences strictly increase in the order acquisitions returned (equal
//	    only for a reentrant re-entry, same owner); a semaphore's permits,
//	    held at once, are not ordered: no two share a fence;
//	(c) the Guard never accepts a write whose fence is below one it
//	    accepted before;
//	(d) liveness: a call returns within a bound of its context's end; no
//	    Acquire or Do sleeps through a free lock (by the history: no lease
//	    of any worker held or unexpired; of a semaphore, as many permits
//	    free as the waiter asks for, and as every waiter that may be ahead
//	    of it in the queue asks for while it waits: a semaphore's queue is
//	    strictly FIFO, and a head waiting for k permits holds up everyone
//	    behind it while fewer than k are free) for
//	    longer than 2s + TTL, outside the faults that reach it (freewait.go); with every worker gone
//	    (some killed while holding), each name is acquirable within
//	    TTL-derived bounds; workers finish;
//	(e) after the run and after the probe, Redis holds nothing under the
//	    round's prefix but fence keys, a semaphore's kept size, and
//	    revocation markers, size changes' answers (a minute), wake keys
//	    and sorted sets whose holds all lapsed (a request that landed
//	    after its undo's marker ended took a hold for nobody, as the docs
//	    allow, and a release does not shorten the key's expiry) that
//	    expire within the longest lease (and, on a node restarted empty, which
//	    forgot its revocations, a lock key expiring within it); a released
//	    lease or reentrant hold is gone from Redis when its release
//	    returns; a Do whose fn panicked left no lock;
//	(f) the coordinator's goroutines return to their level before the
//	    rounds; go-redis pools stay within their size;
//	(g) lease accounting: ValidUntil never lies beyond the lease Redis
//	    granted (acquire, Extend to a shorter TTL); Release does not return
//	    nil after another holder took the lock with a higher fence (not
//	    checked for a semaphore, whose permits come and go); Release
//	    and Extend do not report ErrNotHeld while the lease was valid; the
//	    owner's re-entry is granted while its outer hold is valid;
//	(h) elections (mode election: every acquisition is a Campaign, the
//	    leadership its lease, so (a) and (b) are "never two leaders at
//	    once" and "terms rise"): a read of the leader (Election.Leader)
//	    names it with its own term's fence, and a read sent after another
//	    read or a campaign returned never names an earlier term;
//	(i) multi-locks: each part of a set is recorded as an acquisition of
//	    its name, so (a)–(g) cover it against single holders of the name;
//	    besides, a set returned is the one asked for (its names in order,
//	    one part each, distinct tokens), and held whole: its parts were
//	    taken one by one in the names' byte order — the order that rules
//	    out deadlock — (a round started over gives back what it took) and
//	    each asked Redis for its fence while still valid; a call that
//	    failed gave back every part it took; a part's loss is the set's
//	    (Err, Done). Which parts a call took and gave back, and when, comes
//	    from an Observer's trace: (d) counts a set's waits part by part
//	    (a set must not sleep through the free name it is waiting for),
//	    and counts parts given back as leases;
//	(j) max hold: a lease's deadline (Lock.Deadline) is its max hold
//	    after its acquisition began; no stamp past it and no ValidUntil
//	    beyond it; kept past it, the lease's Done closes by then (a
//	    second's slack), its Err wraps ErrMaxHold if its validity had been
//	    cut to the cap (nothing else can end it there) and never before the
//	    cap, and the lock no longer carries it within 4s (outside faults);
//	(k) a holder that Inspect shows holding the lock is shown with the
//	    metadata it was given (per call, the Client's, or the default),
//	    and Lock.Meta agrees;
//	(l) jeopardy, with the watchdog on: a jeopardy is told only while an
//	    automatic extension is in flight or after one failed, and a holder
//	    that finds its lease lost finds its Jeopardy channel closed;
//	(m) no deadlock reported: in plain, fair, noscripts and multi rounds a
//	    Do's fn sometimes takes a name above its own (the names' byte
//	    order, one global order) by a Do under its context, whose wait
//	    looks for deadlocks every 10–200ms (DeadlockCheck); none can exist,
//	    so any ErrDeadlock is a violation;
//	(n) a Lost hook's call of the lost lease's Lock returns within a
//	    bound of its context's end (no hang: it may run inside the call
//	    that found the loss), and never reports the lease held: Err is the
//	    loss, Extend, Downgrade and Proclaim fail, Fence returns only the
//	    fence issued before, and Release returns nil only as a repeat of
//	    the worker's own Release (or Do's, once fn returned), called
//	    before it returned;
//	(o) closed clients: once a worker's only node's or a majority's go-redis
//	    client is closed under its Client, every call it makes fails with
//	    ErrClosed within 2s (a Lock that knows its lease lost, or a call
//	    whose context ended, may say so instead; a quorum's Release returns
//	    nil once a node confirmed it), its waits under way end within their
//	    bound, and its Client then closes; with only a minority of a
//	    quorum's clients closed, no call fails with ErrClosed;
//	(p) a semaphore's kept size changes once per AddPermits: with one
//	    sizer that adds a permit to a size of N and takes one from N+1,
//	    and after a failed change waits until its copies have landed and
//	    reads the size again, every size a change returns is N or N+1.
//
// Checks that count a lease's time use the lease time it asked for
// (LeaseTTL); a MaxWait ends a wait, for (d), like its context's end.
//
// # Running it
//
//	go test -race ./internal/torture                        # ~100s budget (25s with -short)
//	go test -race ./internal/torture -torture.budget=30m    # make torture
//	go test -race ./internal/torture -torture.seed=S -torture.round=R   # replay one round
//	go test -race ./internal/torture -torture.mode=reentrant   # or multi, …
//
// A seed fixes every worker's sequence of choices and the fault schedule;
// what the operations return still depends on timing, so a replay
// reproduces the scenario, not always the exact interleaving: run it a few
// times.
//
// # What one machine cannot exercise
//
// All processes share one kernel and one clock, so the checker cannot
// show clock skew or a clock stepping on one host (Redis expiring a lease
// early, a client counting validity too long), nor a real network
// partition in which both sides keep running and talking to different
// majorities; the proxy only delays, holds and cuts loopback connections.
// Process pauses are SIGSTOP, not a GC or a hypervisor's steal, and a
// "crash" of a lock node is a SIGKILL of a server without persistence.
package torture
