-- rw_acquire.lua: take a read or a write hold of a read-write lock, in
-- arrival order, or confirm one we already hold.
-- KEYS[1] the lock (sorted set: "r:<token>" or "w:<token>" -> deadline ms,
-- see lib.lua)   KEYS[2] fence key   KEYS[3] queue (list of waiter tokens)
-- KEYS[4] waiters (hash: token -> "deadline_ms:ttl_ms:r|w")
-- KEYS[5] the hold's marker key (see lib.lua)
-- ARGV[1] the hold's token   ARGV[2] 'r' for a read, 'w' for a write
-- ARGV[3] ttl in ms   ARGV[4] 1 to queue up if it may not have the hold now,
-- 0 to try only   ARGV[5] how long a queue entry lives without being
-- renewed, in ms (the hold's revocation window, see lib.lua)
-- ARGV[6] release channel   ARGV[7] publish command:
-- PUBLISH or SPUBLISH   ARGV[8] how long the fence counter lives, in ms
-- A read is granted while no write is held, a write while nothing is held,
-- and either only if no live waiter is ahead of the caller: a reader that
-- comes while a writer waits queues behind it, and a try never queues and
-- never jumps the queue. Waiters at the head of the queue that may have
-- their hold get it first (see rw_serve_queue), each announced on the
-- channel as "<token> <fence>".
-- Returns 0 when the hold is ours (taken now, handed to us earlier, or
-- already ours: a re-sent request, whose hold then lasts at least ttl from
-- now), else -2 - the ms until the earliest held hold's deadline (< 0; -1
-- if none is held), as one integer.
-- Errors: REVOKED if this hold's lease was already ended (nothing is
-- written, no queue entry made); WRONGTYPE if the key holds something other
-- than a read-write lock, such as a lock or a semaphore (nothing is
-- written).
if revoked(KEYS[5]) then
  return revoked_reply()
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and not (kind == 'zset' and is_rw(KEYS[1])) then
  local what = ({string = 'a lock (a string)', hash = 'a reentrant lock (a hash)', zset = 'a semaphore'})[kind] or ('a ' .. kind)
  return redis.error_reply('WRONGTYPE dlock: the key holds ' .. what .. ', not a read-write lock')
end
local token, want, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local member = want .. ':' .. token
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], member) then
  -- Handed over earlier, or a re-sent request: the caller counts its
  -- validity from when it sent this one; never shortened (GT).
  redis.call('ZADD', KEYS[1], 'GT', now + ttl, member)
  expire_with_last(KEYS[1])
  return 0
end
local head = rw_serve_queue(KEYS, now, token, {ARGV[6], ARGV[7], ARGV[8]})
if (not head or head == token) and rw_admits(KEYS[1], want) then
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], token)
  end
  redis.call('ZADD', KEYS[1], now + ttl, member)
  expire_with_last(KEYS[1])
  return 0
end
if ARGV[4] == '1' then
  local entry = string.format('%d:%d:%s', now + tonumber(ARGV[5]), ttl, want)
  if redis.call('HSET', KEYS[4], token, entry) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  extend_queue(KEYS[3], KEYS[4], ARGV[5])
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
if not first then
  return -1
end
return -2 - math.max(tonumber(first) - now, 0)
