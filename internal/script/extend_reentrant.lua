-- extend_reentrant.lua: reset one hold of a reentrant lock to ttl from now
-- (shorter or longer); the key lasts until the latest hold's deadline.
-- KEYS[1] lock key
-- ARGV[1] owner id   ARGV[2] hold token   ARGV[3] ttl in ms
-- Returns 1 if extended, 0 if the hold is gone (released, expired, or the
-- lock is another owner's).
local field = 'h:' .. ARGV[2]
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
local now = now_ms()
local deadline = tonumber(redis.call('HGET', KEYS[1], field) or '0') or 0
if deadline <= now then
  return 0
end
redis.call('HSET', KEYS[1], field, now + tonumber(ARGV[3]))
local _, last = live_holds(KEYS[1], now)
redis.call('PEXPIRE', KEYS[1], last - now)
return 1
