-- acquire_fair.lua: take a lock in arrival order (fair mode).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue (list of waiter tokens)
-- KEYS[4] waiters (hash: token -> "deadline_ms:ttl_ms")   KEYS[5] the lease's marker key
-- KEYS[6] the wake key (see release.lua): a waiter that queues sets it for
--         the holder's remaining lease, at most as long as its queue entry
--         lives, so that an unfair holder's release (a name used in both
--         modes) announces itself too
-- ARGV[1] the lease's token   ARGV[2] ttl in ms
-- ARGV[3] what only a contended call reads, in one argument (each costs the
--         server a string of its own): "<qttl> <publish> <fence_ms>": how
--         long a queue entry lives without being renewed, in ms (the lease's
--         revocation window, see lib.lua); the publish command, PUBLISH or
--         SPUBLISH on a Redis Cluster; how long the fence counter lives, in
--         ms (the fence window; a fence issued with a longer lease lives as
--         long as the lease). The channel is the lock key + ":ch".
-- ARGV[4] (a waiter's only) 1: queue up if taken (absent: a try)
-- Returns 0 when the lock is ours (taken now, handed to us by a release, or
-- already ours), else {pttl, holder}: the holder's remaining ms (-1: no
-- expiry) and its token, which carries its metadata. The lock goes to the caller only if no live waiter is ahead
-- of it; a try never queues and never jumps the queue. A free lock with
-- live waiters (its holder expired without releasing) is handed to the
-- first of them, with a fence: the handover is announced on the channel as
-- "<token> <fence>".
-- Errors: REVOKED if this lease was already ended (nothing is written, no
-- queue entry made); WRONGTYPE if a key holds a foreign value.
-- One EXISTS over the marker and the queue: on the common path (this lease
-- never ended, nobody queued) SET NX GET follows and nothing else.
local quiet = redis.call('EXISTS', KEYS[5], KEYS[3]) == 0
local holder -- nil: not tried yet; else the holder SET NX GET named
if quiet then
  holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if not holder then return 0 end
end
-- (the shared functions are defined here)
return take_queued(KEYS, ARGV, quiet, holder) or 0
