-- fence.lua: issue the fencing token of the lease that holds a lock (asked
-- for when the holder first needs it, so that a lease that never asks
-- costs the server nothing for fencing).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] the lease's marker key
-- ARGV[1] the lease's token (a reentrant lock: its owner id)
-- ARGV[2] how long the fence counter lives, in ms (the fence window)
-- ARGV[3] the lock key's shape: string, hash (reentrant) or zset (see types.lua)
-- ARGV[4] the asking Lock's resumer id ('' for the Lock that took the lease)
-- Returns the fence (> 0), 0 if the lease does not hold the lock, or -1 if
-- another Lock resumed it (see drives in lib.lua): none is issued.
-- Errors: WRONGTYPE if the fence key holds a foreign value.
local held, mark = types[ARGV[3]].holds(KEYS[1], ARGV[1], KEYS[3]) -- (a string: one read)
if not held then
  return 0
elseif not drives(mark, ARGV[4]) then
  return -1
end
return new_fence(KEYS[2], ARGV[2]) or fence_type_reply()
