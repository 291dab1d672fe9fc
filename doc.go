// Package dlock provides distributed locks on Redis for Go services.
//
// A [Client] takes any go-redis v9 client (a single server, a Sentinel
// failover client or a Cluster client; Redis 7.0 or later), or another
// client through its driver ([NewFrom]), and hands out leases on lock names,
// each a [*Lock]. [Client.TryDo] runs a function under a lock only if it is
// free now, so that one of several instances does a job (see its example);
// [Client.Do] waits for the lock. Besides locks: [Client.Semaphore],
// [Client.RWMutex] and [Client.Election] (a quorum, reentrant or script-free
// Client refuses them: [ErrInvalid]), [Client.AcquireAll], [WithReentrant],
// [NewRedlock], [WithoutScripts]; docs/README.md indexes the guides.
//
// # Guarantees
//
// Until [Lock.ValidUntil] no other client holds the name, provided Redis keeps
// the key (no restart without persistence, no failover to a replica that
// missed it, no eviction) and clock rates differ by less than [WithDrift]'s
// margin. A holder that dies blocks others for one TTL at most.
//
// NOT guaranteed: that the lock is still held when you act. A process paused
// or a request delayed past the TTL can act after another holder got in: have
// the resource refuse a write whose [Lock.Fence] is lower than one it accepted
// ([Guard] does so in Redis). See docs/guarantees.md.
package dlock
