-- extend_reentrant.lua: push back the expiry of a reentrant lock the owner holds.
-- KEYS[1] lock key
-- ARGV[1] owner id   ARGV[2] ttl in ms
-- Returns 1 if extended, 0 if the owner holds it no more.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
