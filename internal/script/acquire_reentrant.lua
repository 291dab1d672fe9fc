-- acquire_reentrant.lua: take a reentrant lock, or enter it again as its owner.
-- The lock is a hash: field = owner id, value = hold count, with PX expiry.
-- KEYS[1] lock key   KEYS[2] fence key
-- ARGV[1] owner id   ARGV[2] ttl in ms
-- Returns {1, fence, holds} when held by the owner now (a new fence when the
-- count went from 0 to 1, else the fence of the first hold), or {0, pttl, 0}
-- when another owner holds it (pttl -1: no expiry).
-- Fences come from new_fence (fence.lua, prepended).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, new_fence(KEYS[2]), 1}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local holds = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), holds}
end
return {0, redis.call('PTTL', KEYS[1]), 0}
