-- sem_release.lua: give back a permit of a semaphore and hand it to the
-- first waiter that may have it, or take a waiter that gives up out of the
-- queue; either way the permit's lease is ended (see revoke in lib.lua).
-- KEYS[1] the semaphore   KEYS[2] fence key   KEYS[3] queue
-- KEYS[4] waiters hash   KEYS[5] the permit's marker key (see lib.lua)
-- ARGV[1] the permit's token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[4] how long the revocation marker lives, in ms
-- ARGV[5] how long the fence counter lives, in ms (the fence window)
-- Free permits (this one, or those of holders that expired, or those a
-- waiter that leaves no longer blocks) go to the waiters at the head of
-- the queue (see serve_queue), each announced as "<token> <fence>"; a
-- permit freed with nobody to take it is announced as "*".
-- Returns 1 if the permit was ours and live (it is now given back; also
-- for a re-sent request whose first copy gave it back), 0 if it was not (a
-- waiter's queue entry, if any, is removed). A read-write lock's key is
-- left alone.
local token = ARGV[1]
if redis.call('HDEL', KEYS[4], token) == 1 then
  redis.call('LREM', KEYS[3], 1, token)
end
local kind = redis.call('TYPE', KEYS[1])['ok']
local ours = false
if kind == 'none' or (kind == 'zset' and not is_rw(KEYS[1])) then
  local now = now_ms()
  ours = (tonumber(redis.call('ZSCORE', KEYS[1], token)) or 0) > now
  redis.call('ZREM', KEYS[1], token)
  local held = live_permits(KEYS[1], now)
  local after = serve_queue(KEYS, now, held, nil, {ARGV[2], ARGV[3], ARGV[5]})
  if ours and after == held then
    redis.call(ARGV[3], ARGV[2], '*')
  end
  if after > 0 then
    expire_with_last(KEYS[1])
  end
end
if ours then
  revoke(KEYS[5], '1', ARGV[4])
  return 1
end
if redis.call('GET', KEYS[5]) == '1' then
  return 1
end
revoke(KEYS[5], '0', ARGV[4])
return 0
