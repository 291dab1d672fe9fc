-- force_release.lua: delete a lock whoever holds it, and announce it free.
-- For operators; a holder learns of it at its next extension. A key that is
-- not a dlock lock (neither a plain lock's string nor a reentrant lock's
-- hash) is left alone.
-- KEYS[1] lock key
-- ARGV[1] release channel   ARGV[2] publish command: PUBLISH or SPUBLISH
-- Returns 1 if a lock was deleted, 0 if there was none.
-- Errors: WRONGTYPE if the key holds something else.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'string' and not (kind == 'hash' and redis.call('HEXISTS', KEYS[1], 'owner') == 1) then
  return redis.error_reply('WRONGTYPE dlock: the lock key holds a ' .. kind .. ' that is not a dlock lock')
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], ARGV[1], '*')
return 1
