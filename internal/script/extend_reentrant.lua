-- extend_reentrant.lua: reset one hold of a reentrant lock to ttl from now
-- (shorter or longer), unless a newer extension of it was applied; the key
-- lasts until the latest hold's deadline.
-- KEYS[1] lock key   KEYS[2] the hold's own key (see lib.lua)
-- ARGV[1] owner id   ARGV[2] hold token   ARGV[3] ttl in ms
-- ARGV[4] 0 for an extension that never shortens the hold, else the
--         extension's sequence number (see extend.lua)
-- Returns 1 if the hold is ours (extended now, or by this request's
-- earlier copy), 0 if it is gone (released, expired, or the lock is another
-- owner's), 2 if a newer extension was applied (see extend.lua).
local field = 'h:' .. ARGV[2]
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
local now = now_ms()
local deadline = tonumber(redis.call('HGET', KEYS[1], field) or '0') or 0
if deadline <= now then return 0 end
local s = extension(KEYS[2], ARGV[4], ARGV[3], KEYS[1])
if s ~= 0 then return s end
local until_ms = now + tonumber(ARGV[3])
if ARGV[4] == '0' and until_ms <= deadline then return 1 end -- (never shortened)
redis.call('HSET', KEYS[1], field, until_ms)
live_holds(KEYS[1], now, true)
return 1
