-- release.lua: delete a lock we own, announce that it is free if someone
-- waits, and end the lease (or undo an attempt whose outcome is unknown).
-- KEYS[1] lock key   KEYS[2] the lease's marker key (see lib.lua)
-- KEYS[3] the wake key, set by a waiter's attempt (acquire.lua)
-- ARGV[1] owner token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[4] how long the lease's marker lives, in ms; 0 writes none (every
--         request of the lease was answered on its one send, so none can
--         land after this: see Node.Release)
-- Returns 1 if it was ours and is now deleted (also, with a marker, for a
-- re-sent request whose first copy deleted it), 0 if it was missing or
-- someone else's. The release is announced, and the wake key deleted, only
-- if the wake key exists: the one read of the common path is MGET.
local v = redis.call('MGET', KEYS[1], KEYS[3])
if v[1] == ARGV[1] then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[4]) -- see revoke in lib.lua
  end
  if v[2] then
    redis.call('DEL', KEYS[1], KEYS[3])
    redis.call(ARGV[3], ARGV[2], '*')
  else
    redis.call('DEL', KEYS[1])
  end
  return 1
end
if ARGV[4] == '0' then
  return 0
end
if redis.call('GET', KEYS[2]) == '1' then
  return 1
end
redis.call('SET', KEYS[2], '0', 'PX', ARGV[4])
return 0
