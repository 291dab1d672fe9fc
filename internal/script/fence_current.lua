-- fence_current.lua: whether a fence is still current: the lease of the
-- token holds the lock and no newer fence was issued for the name. It
-- writes nothing.
-- KEYS[1] lock key   KEYS[2] fence key
-- ARGV[1] the lease's token (a reentrant lock: its owner id)   ARGV[2] the fence
-- ARGV[3] the lock key's shape: string or hash (reentrant)
-- Returns 1 if current, else 0. The counter lives the fence window after
-- the last fence: once it is gone, no fence was issued since, and the fence
-- is current if the server's clock has passed it (fences are floored by
-- it), or, of a reentrant lock (whose owner id outlives a lease), if it is
-- the fence of the owner's first hold.
if not holds(KEYS[1], ARGV[1], ARGV[3]) then return 0 end
local last = redis.pcall('GET', KEYS[2])
if type(last) == 'string' then
  return last == ARGV[2] and 1 or 0
elseif last then -- (a value of another type at the fence key)
  return 0
elseif ARGV[3] == 'hash' then
  return redis.call('HGET', KEYS[1], 'fence') == ARGV[2] and 1 or 0
end
local t = redis.call('TIME')
return tonumber(ARGV[2]) <= tonumber(t[1]) * 1000000 + tonumber(t[2]) and 1 or 0
