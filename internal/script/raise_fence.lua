-- raise_fence.lua: make a quorum node's fence counter at least a given
-- value, so that a later majority sees the fence a quorum lease was issued
-- with; only while the lease still holds the lock on this node.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] the lease's marker key
-- ARGV[1] fence   ARGV[2] the lease's token (a reentrant lock: its owner id)
-- ARGV[3] how long the fence counter lives, in ms (the fence window)
-- ARGV[4] the lock key's shape: string, hash (reentrant) or zset (see types.lua)
-- ARGV[5] the asking Lock's resumer id ('' for the Lock that took the lease)
-- Returns 1 if the counter is at least the fence now, 0 if the lease does
-- not hold the lock here, or another Lock resumed it (see drives).
if not types[ARGV[4]].holds(KEYS[1], ARGV[2]) or not drives(redis.call('GET', KEYS[3]), ARGV[5]) then return 0 end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
redis.call('SET', KEYS[2], string.format('%d', math.max(cur, tonumber(ARGV[1]))), 'PX', ARGV[3])
return 1
