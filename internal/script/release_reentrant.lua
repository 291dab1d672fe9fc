-- release_reentrant.lua: give up one hold of a reentrant lock (see
-- acquire_reentrant.lua); the lock is free when no live hold is left.
-- KEYS[1] lock key   KEYS[2] the hold's revocation key
-- ARGV[1] owner id   ARGV[2] hold token   ARGV[3] release channel
-- ARGV[4] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[5] how long the revocation marker lives, in ms; 0 writes none (see
--         release.lua)
-- Returns 1 if the hold was there and is now removed (also for a re-sent
-- request whose first copy removed it), 0 if it was gone: nothing else is
-- changed then.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HDEL', KEYS[1], 'h:' .. ARGV[2]) == 1 then
  revoke(KEYS[2], '1', ARGV[5])
  if live_holds(KEYS[1], now_ms(), true) == 0 then
    redis.call('DEL', KEYS[1])
    redis.call(ARGV[4], ARGV[3], '*')
  end
  return 1
end
if ARGV[5] ~= '0' and redis.call('GET', KEYS[2]) == '1' then return 1 end
revoke(KEYS[2], '0', ARGV[5])
return 0
