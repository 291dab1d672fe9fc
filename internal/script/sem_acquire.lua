-- sem_acquire.lua: take a permit of a semaphore, in arrival order, or
-- confirm one we already hold.
-- KEYS[1] the semaphore (sorted set: permit token -> deadline ms, see lib.lua)
-- KEYS[2] fence key   KEYS[3] queue (list of waiter tokens)
-- KEYS[4] waiters (hash: token -> "deadline_ms:ttl_ms:permits")
-- KEYS[5] the permit's marker key (see lib.lua)
-- ARGV[1] the permit's token   ARGV[2] ttl in ms
-- ARGV[3] 1 to queue up if no permit is free, 0 to try only
-- ARGV[4] how long a queue entry lives without being renewed, in ms (the
--         permit's revocation window, see lib.lua)
-- ARGV[5] release channel   ARGV[6] publish command: PUBLISH or SPUBLISH
-- ARGV[7] how long the fence counter lives, in ms (the fence window)
-- ARGV[8] permits: the caller's N
-- A permit is granted only while fewer than the caller's N permits are
-- held (by anyone, whatever N they asked with) and no live waiter is ahead
-- of the caller: a try never queues and never jumps the queue. Free
-- permits go to the live waiters at the head of the queue first (see
-- serve_queue), each announced on the channel as "<token> <fence>".
-- Returns 0 when the permit is ours (taken now, handed to us earlier, or
-- already ours: a re-sent request, whose permit then lasts at least ttl
-- from now), else -2 - the ms until the earliest held permit's deadline
-- (< 0; -1 if none is held), as one integer.
-- Errors: REVOKED if this permit's lease was already ended (nothing is
-- written, no queue entry made); WRONGTYPE if the key holds something
-- other than a semaphore, such as a lock or a read-write lock (nothing is
-- written).
if revoked(KEYS[5]) then
  return revoked_reply()
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'zset' and is_rw(KEYS[1]) then
  kind = 'rw'
end
if kind ~= 'zset' and kind ~= 'none' then
  local what = ({string = 'a lock (a string)', hash = 'a reentrant lock (a hash)', rw = 'a read-write lock'})[kind] or ('a ' .. kind)
  return redis.error_reply('WRONGTYPE dlock: the key holds ' .. what .. ', not a semaphore')
end
local token, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[8])
local now = now_ms()
local held = live_permits(KEYS[1], now)
if redis.call('ZSCORE', KEYS[1], token) then
  -- Handed over earlier, or a re-sent request: the caller counts its
  -- validity from when it sent this one; never shortened (GT).
  redis.call('ZADD', KEYS[1], 'GT', now + ttl, token)
  expire_with_last(KEYS[1])
  return 0
end
local head
held, head = serve_queue(KEYS, now, held, token, {ARGV[5], ARGV[6], ARGV[7]})
if (not head or head == token) and held < n then
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], token)
  end
  redis.call('ZADD', KEYS[1], now + ttl, token)
  expire_with_last(KEYS[1])
  return 0
end
if ARGV[3] == '1' then
  local entry = string.format('%d:%d:%d', now + tonumber(ARGV[4]), ttl, n)
  if redis.call('HSET', KEYS[4], token, entry) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  extend_queue(KEYS[3], KEYS[4], ARGV[4])
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
if not first then
  return -1
end
return -2 - math.max(tonumber(first) - now, 0)
