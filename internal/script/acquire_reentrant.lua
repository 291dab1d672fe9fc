-- acquire_reentrant.lua: take a reentrant lock, or enter it again as its owner.
-- The lock is a hash: 'owner' = the owner id, 'fence' = the fence of the
-- first hold, and one field 'h:<hold token>' = deadline (ms, server clock)
-- per hold, with PX expiry at the latest deadline. Each hold is a lease of
-- its own: a re-sent request finds its field and changes nothing, a stale
-- handle's release cannot remove a newer hold, and no hold shortens the
-- key below another's deadline.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] the hold's revocation key
-- ARGV[1] owner id   ARGV[2] hold token   ARGV[3] ttl in ms
-- ARGV[4] how long the fence counter lives, in ms (the fence window)
-- Returns {1, fence, holds} when held by the owner now (a new fence if the
-- lock was free, else the fence of the first hold), or {0, pttl, 0, owner,
-- hold} when another owner holds it: pttl -1 if no expiry, owner its id,
-- hold the token of one of its holds (it carries the holder's metadata;
-- '' if none is left).
-- Errors: REVOKED if this hold was already ended; WRONGTYPE if a key holds
-- a foreign value (nothing is written then).
if revoked(KEYS[3]) then return revoked_reply() end
local owner = redis.call('HGET', KEYS[1], 'owner')
local field = 'h:' .. ARGV[2]
local ttl = tonumber(ARGV[3])
if not owner then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE dlock: the lock key holds a hash that is not a reentrant lock')
  end
  local fence = new_fence(KEYS[2], ARGV[4])
  if not fence then return fence_type_reply() end
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fence', string.format('%d', fence), field, now_ms() + ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, fence, 1}
end
if owner ~= ARGV[1] then
  local hold = ''
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'h:' then
      hold = string.sub(all[i], 3)
      break
    end
  end
  return {0, redis.call('PTTL', KEYS[1]), 0, owner, hold}
end
local now = now_ms()
if redis.call('HSETNX', KEYS[1], field, now + ttl) == 1 and redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local holds = live_holds(KEYS[1], now)
return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0, holds}
