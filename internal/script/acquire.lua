-- acquire.lua: take a lock that is free, or confirm one we already hold.
-- KEYS[1] lock key   KEYS[2] fence key
-- ARGV[1] owner token   ARGV[2] ttl in ms
-- Returns the fence (>= 0) when the lock is ours: a new fence if it was free,
-- the fence issued with it if we already held it (a retry after a lost reply).
-- Returns -2 - pttl (< 0) when someone else holds it: -1 if the key has no
-- expiry. One integer rather than a pair, so the reply is one value to read.
-- A new fence comes from new_fence (fence.lua).
-- SET NX GET (Redis 7.0+) takes a free lock and names the holder of a taken
-- one in a single command.
local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if not holder then
  return new_fence(KEYS[2])
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
return -2 - math.max(redis.call('PTTL', KEYS[1]), -1)
