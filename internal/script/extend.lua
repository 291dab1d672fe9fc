-- extend.lua: reset the expiry of a lock we still own to ttl from now
-- (shorter or longer than before).
-- KEYS[1] lock key
-- ARGV[1] owner token   ARGV[2] ttl in ms
-- Returns 1 if extended, 0 if the key is missing or owned by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
