-- force_release.lua: delete a lock whoever holds it, and announce it free.
-- For operators; a holder learns of it at its next extension.
-- KEYS[1] lock key
-- ARGV[1] release channel   ARGV[2] publish command: PUBLISH or SPUBLISH
-- Returns 1 if a lock was deleted, 0 if there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[2], ARGV[1], '*')
  return 1
end
return 0
