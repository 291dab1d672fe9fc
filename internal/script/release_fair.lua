-- release_fair.lua: end a lease in fair mode: hand the lock to the first
-- live waiter, or free it (leaving a tombstone) if nobody waits; a waiter
-- that gives up leaves the queue. Either way the lease is ended (see
-- lib.lua): a request of it still in flight cannot take the lock or a
-- place in the queue later.
-- KEYS[1] lock key   KEYS[2] queue   KEYS[3] waiters hash
-- KEYS[4] the lease's marker key
-- ARGV[1] the lease's token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[4] how long the tombstone or marker lives (the revocation window), in ms
-- A handover is announced on the channel as "<token>", a lock freed with
-- waiters queued (all of them gone) as "*"; a lock freed with nobody
-- queued is not announced: fair waiters are always queued.
-- Returns 1 if the lease held the lock (it is now handed over or free;
-- also for a re-sent request whose first copy did that), 0 if it did not
-- (a waiter's queue entry, if any, is removed).
-- Errors: WRONGTYPE if a key holds a foreign value.
local token = ARGV[1]
local v = redis.call('GET', KEYS[1])
if not owns(v, token) then
  local e = ended(v, token, KEYS[4])
  if e then
    return e
  end
  if redis.call('HDEL', KEYS[3], token) == 1 then
    redis.call('LREM', KEYS[2], 1, token)
  end
  mark(KEYS[4], '0', ARGV[4])
  return 0
end
local now
local queued = false
while true do
  local head = redis.call('LPOP', KEYS[2])
  if not head then
    tombstone(KEYS[1], v, token, ARGV[4])
    if queued then
      redis.call(ARGV[3], ARGV[2], '*')
    end
    return 1
  end
  queued = true
  now = now or now_ms() -- the clock is read only when someone waits
  local entry = redis.call('HGET', KEYS[3], head)
  redis.call('HDEL', KEYS[3], head)
  local deadline, ttl = string.match(entry or '', '^(%d+):(%d+)$')
  if deadline and tonumber(deadline) > now then
    redis.call('SET', KEYS[1], head, 'PX', ttl)
    mark(KEYS[4], '1', ARGV[4])
    redis.call(ARGV[3], ARGV[2], head)
    return 1
  end
end
