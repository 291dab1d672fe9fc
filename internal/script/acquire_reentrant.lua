-- acquire_reentrant.lua: take a reentrant lock, or enter it again as its owner.
-- The lock is a hash: field = owner id, value = hold count, with PX expiry.
-- KEYS[1] lock key   KEYS[2] fence key
-- ARGV[1] owner id   ARGV[2] ttl in ms
-- Returns {1, fence, holds} when held by the owner now (a new fence when the
-- count went from 0 to 1, else the fence of the first hold), or {0, pttl, 0}
-- when another owner holds it (pttl -1: no expiry).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  if last and last >= fence then
    fence = last + 1
  end
  redis.call('SET', KEYS[2], string.format('%d', fence))
  return {1, fence, 1}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local holds = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), holds}
end
return {0, redis.call('PTTL', KEYS[1]), 0}
