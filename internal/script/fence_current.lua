-- fence_current.lua: whether a fence is still current: the lease of the
-- token holds the lock and no newer fence was issued for the name. It
-- writes nothing.
-- KEYS[1] lock key   KEYS[2] fence key
-- ARGV[1] the lease's token (a reentrant lock: its owner id)   ARGV[2] the fence
-- ARGV[3] the lock key's shape: string or hash (reentrant)
-- Returns 1 if current, else 0. Errors: WRONGTYPE if the lock key holds
-- another type than the shape (read only when the lease does not hold), or
-- the fence key a value of another type. The counter lives the fence window after
-- the last fence: once it is gone, no fence was issued since, and the fence
-- is current if the server's clock has passed it (fences are floored by
-- it), or, of a reentrant lock (whose owner id outlives a lease), if it is
-- the fence of the owner's first hold.
if not types[ARGV[3]].holds(KEYS[1], ARGV[1]) then -- (see types.lua)
  local t = redis.call('TYPE', KEYS[1])['ok']
  if t ~= ARGV[3] and t ~= 'none' then
    return redis.error_reply('WRONGTYPE dlock: the lock key holds a value of another type')
  end
  return 0
end
local last = redis.pcall('GET', KEYS[2])
if type(last) == 'string' then
  return last == ARGV[2] and 1 or 0
elseif last then
  return fence_type_reply()
end
return types[ARGV[3]].current(KEYS[1], ARGV[2]) and 1 or 0
