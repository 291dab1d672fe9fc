-- release_reentrant.lua: give up one hold of a reentrant lock.
-- KEYS[1] lock key
-- ARGV[1] owner id   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- Returns the holds left (0: the lock is now free, and waiters are told), or
-- -1 if the owner holds it no more (never held, expired, or released beyond
-- its hold count); nothing is changed then.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local holds = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if holds <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[3], ARGV[2], '*')
  return 0
end
return holds
