// Package dlock provides distributed locks on Redis for Go services.
//
// A [Client] takes any go-redis v9 client (a single server, a Sentinel
// failover client or a Cluster client; Redis 7.0 or later), or rueidis,
// valkey-go or redigo ([NewFrom]), and hands out leases on lock names, each a [*Lock]:
//
//	c, err := dlock.New(rdb)
//	...
//	err = c.TryDo(ctx, "reports:nightly", func(ctx context.Context, l *dlock.Lock) error {
//		fence, err := l.Fence(ctx) // give it to the resource with every write
//		...
//	})
//	if errors.Is(err, dlock.ErrNotAcquired) {
//		... // another instance holds the lock and writes the report
//	}
//
// [Client.TryDo] runs the function only if the lock is free now, so that one
// of several instances does the job; [Client.Do] waits for the lock, so that
// each does it in turn.
//
// Besides plain locks: [Client.Semaphore], [Client.RWMutex], [Client.Election],
// [Client.AcquireAll], [WithReentrant], [NewRedlock] and [WithoutScripts].
// docs/README.md indexes the guide, the guarantees and the design.
//
// # Guarantees
//
// Until [Lock.ValidUntil] no other client holds the name, provided Redis keeps
// the key (no restart without persistence, no failover to a replica that
// missed it, no eviction) and clock rates differ by less than [WithDrift]'s
// margin. A holder that dies blocks others for one TTL at most.
//
// # What is NOT guaranteed, and fencing
//
// It is NOT safe to assume that the lock is still held when you act on the
// protected resource: a process paused (GC, swap, a stopped VM) or a request
// delayed for longer than the TTL can act after another holder got in. No
// lock service can prevent that by itself. [Lock.Fence] therefore gives each
// lease a fencing token strictly greater than that of every earlier lease of
// the name: have the resource refuse a write whose fence is lower than one it
// has accepted ([Guard] does so in Redis), whatever the pause.
package dlock
