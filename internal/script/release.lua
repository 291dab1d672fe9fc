-- release.lua: delete a lock we own, announce that it is free, and end the
-- lease (or undo an attempt whose outcome is unknown).
-- KEYS[1] lock key   KEYS[2] the lease's marker key (see lib.lua)
-- ARGV[1] owner token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[4] how long the revocation marker lives, in ms
-- Returns 1 if it was ours and is now deleted (also for a re-sent request
-- whose first copy deleted it), 0 if it was missing or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4]) -- see revoke in lib.lua
  redis.call(ARGV[3], ARGV[2], '*')
  return 1
end
if redis.call('GET', KEYS[2]) == '1' then
  return 1
end
redis.call('SET', KEYS[2], '0', 'PX', ARGV[4])
return 0
