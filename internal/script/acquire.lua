-- acquire.lua: take a lock that is free, or confirm one we already hold.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] the lease's revocation key
-- ARGV[1] owner token   ARGV[2] ttl in ms
-- Returns the fence (>= 0) when the lock is ours: a new fence if it was free,
-- the fence issued with it if we already held it (a re-sent request).
-- Returns -2 - pttl (< 0) when someone else holds it: -1 if the key has no
-- expiry. One integer rather than a pair, so the reply is one value to read.
-- Errors: REVOKED if this lease was already ended (the request arrived after
-- its caller gave up); WRONGTYPE if a key holds a foreign value (nothing is
-- written then).
-- SET NX GET (Redis 7.0+) takes a free lock and names the holder of a taken
-- one in a single command. When the lock is already ours (a re-sent request,
-- or a fair waiter confirming a handover), the expiry is pushed out to ttl
-- from now if it is sooner (PEXPIRE GT: never shortened, so a late copy
-- cannot cut short a lease an extension lengthened): the caller counts its
-- validity from when it sent this request.
if revoked(KEYS[3]) then
  return revoked_reply()
end
local taken, holder = take_free(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if taken then
  return taken
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
return -2 - math.max(redis.call('PTTL', KEYS[1]), -1)
