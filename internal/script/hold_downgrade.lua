-- hold_downgrade.lua: turn a write hold of a read-write lock into a read
-- hold in one step: no writer can come in between, and the readers waiting
-- at the head of the queue are let in with it.
-- KEYS[1] the lock (sorted set, see lib.lua)   KEYS[2] fence key
-- KEYS[3] queue   KEYS[4] waiters hash   KEYS[5] the hold's marker key
-- ARGV[1] the hold's token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH or SPUBLISH
-- ARGV[4] how long the fence counter lives, in ms (the fence window)
-- ARGV[5] the asking Lock's resumer id ('' for the Lock that took the hold)
-- The hold keeps its token, deadline and fence: "w:<token>" becomes
-- "r:<token>" with the same score. Grants are announced as for a release.
-- Returns 1 if the hold is now a read (also for a re-sent request whose
-- first copy did it), 0 if the write hold is gone (released or lapsed),
-- -1 if another Lock resumed it (see drives in lib.lua).
if not drives(redis.call('GET', KEYS[5]), ARGV[5]) then return -1 end
local now = now_ms()
local w, r = 'w:' .. ARGV[1], 'r:' .. ARGV[1]
local score = redis.pcall('ZSCORE', KEYS[1], w)
if type(score) ~= 'string' or tonumber(score) <= now then
  local read = redis.pcall('ZSCORE', KEYS[1], r) -- (a re-sent request: the read is live)
  return type(read) == 'string' and tonumber(read) > now and 1 or 0
end
redis.call('ZREM', KEYS[1], w)
redis.call('ZADD', KEYS[1], score, r) -- (the key is new if w was its only member: it has no expiry yet)
if redis.call('LINDEX', KEYS[3], 0) then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  rw_serve_queue(KEYS, now, nil, {ARGV[2], ARGV[3], ARGV[4]})
end
expire_with_last(KEYS[1])
return 1
