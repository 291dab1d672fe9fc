-- rw_release.lua: give back a read or a write hold of a read-write lock and
-- grant the lock to the waiters at the head of the queue that may have it
-- now, or take a waiter that gives up out of the queue; either way the
-- hold's lease is ended (see revoke in lib.lua).
-- KEYS[1] the lock   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters
-- hash   KEYS[5] the hold's marker key (see lib.lua)
-- ARGV[1] the hold's token   ARGV[2] 'r' for a read, 'w' for a write
-- ARGV[3] release channel   ARGV[4] publish command: PUBLISH or SPUBLISH
-- ARGV[5] how long the revocation marker lives, in ms
-- ARGV[6] how long the fence counter lives, in ms (the fence window)
-- Grants (see rw_serve_queue) are announced as "<token> <fence>"; a
-- release that leaves the lock free with nobody to take it, as "*".
-- Returns 1 if the hold was ours and live (it is now given back; also for
-- a re-sent request whose first copy gave it back), 0 if it was not (a
-- waiter's queue entry, if any, is removed). A key that is not a
-- read-write lock is left alone.
local token = ARGV[1]
if redis.call('HDEL', KEYS[4], token) == 1 then
  redis.call('LREM', KEYS[3], 1, token)
end
local kind = redis.call('TYPE', KEYS[1])['ok']
local ours = false
if kind == 'none' or (kind == 'zset' and is_rw(KEYS[1])) then
  local now = now_ms()
  local member = ARGV[2] .. ':' .. token
  ours = (tonumber(redis.call('ZSCORE', KEYS[1], member)) or 0) > now
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local _, granted = rw_serve_queue(KEYS, now, nil, {ARGV[3], ARGV[4], ARGV[6]})
  if ours and granted == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call(ARGV[4], ARGV[3], '*')
  end
  expire_with_last(KEYS[1])
end
if ours then
  revoke(KEYS[5], '1', ARGV[5])
  return 1
end
if redis.call('GET', KEYS[5]) == '1' then
  return 1
end
revoke(KEYS[5], '0', ARGV[5])
return 0
