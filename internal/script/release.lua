-- release.lua: delete a lock we own and announce that it is free.
-- KEYS[1] lock key
-- ARGV[1] owner token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- Returns 1 if it was ours and is now deleted, 0 if it was missing or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[3], ARGV[2], '*')
  return 1
end
return 0
