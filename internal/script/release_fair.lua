-- release_fair.lua: release a lock and hand it to the first live waiter, or
-- take a waiter that gives up out of the queue (fair mode); either way the
-- lease is ended (see revoke in lib.lua).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters hash
-- KEYS[5] the lease's marker key (see lib.lua)
-- KEYS[6] (a leadership campaign's only) the leader's value key
--         (proclaim.lua), deleted with the lease
-- ARGV[1] owner token
-- ARGV[2] what only a contended call reads, in one argument:
--         "<publish> <fence_ms> <announce>": the publish command, PUBLISH or
--         SPUBLISH on a Redis Cluster; how long the fence counter lives, in
--         ms (the fence window; with a longer lease handed over, as long as
--         that lease); 1 to announce a plain release even with nobody queued
--         (a leadership campaign: its observers watch the channel), else 0.
--         The channel is the lock key + ":ch".
-- ARGV[3] (a marked lease's only) how long the revocation marker lives, in
--         ms; a clean lease writes none (see release.lua)
-- ARGV[4] (a resumed Lock's only) its resumer id (see drives in lib.lua)
-- A handover is announced on the channel as "<token> <fence>", a plain
-- release as "*" only if someone queued (or with announce): a fair lock's
-- waiters are all in its queue, so nobody else listens.
-- Returns 1 if the lock was ours (it is now handed over or deleted; also for
-- a re-sent request whose first copy did that), 0 if it was not (a waiter's
-- queue entry, if any, is removed; also when the lock key is of another
-- kind, which is left alone), -1 if another Lock resumed the lease (nothing
-- is done).
local token = ARGV[1]
-- A lock key of another kind (the name taken meanwhile as a reentrant lock,
-- a semaphore or a read-write lock) holds no lease of ours; MGET reads it
-- as nil. The marker tells whether another Lock resumed the lease.
local v = redis.call('MGET', KEYS[1], KEYS[5])
local holder, m = v[1], v[2]
local n, by
if m then n, by = string.match(m, '^e(%d+)%.(.+)$') end
if by and by ~= ARGV[4] and tonumber(n) >= (tonumber(string.match(ARGV[4] or '', '^(%d+):')) or -1) then
  return -1 -- not drives (lib.lua)
end
if holder ~= token then
  if redis.call('HDEL', KEYS[4], token) == 1 then
    redis.call('LREM', KEYS[3], 1, token)
  end
  if not ARGV[3] then return 0 end
  if m == '1' then return 1 end
  redis.call('SET', KEYS[5], '0', 'PX', ARGV[3]) -- ended, not holding the lock (see revoke in lib.lua)
  return 0
end
if ARGV[3] then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[3]) -- ended, holding the lock
end
if KEYS[6] then
  redis.call('DEL', KEYS[6])
end
local head = redis.call('LPOP', KEYS[3]) -- the first waiter, taken out of the queue
if not head then -- nobody queued (the common case)
  redis.call('DEL', KEYS[1])
  if string.sub(ARGV[2], -1) == '1' then
    redis.call(string.match(ARGV[2], '^%S+'), KEYS[1] .. ':ch', '*')
  end
  return 1
end
-- (the shared functions are defined here)
-- Hand the lock to the first live waiter; those whose entry lapsed are
-- dropped. With a foreign fence key the lock is freed rather than handed
-- over unfenced.
local pub, fence_ms = string.match(ARGV[2], '^(%S+) (%d+)')
local live, ttl = live_head(KEYS, head, now_ms())
if live then
  redis.call('HDEL', KEYS[4], live)
end
if live and fenced(KEYS, live, ttl, pub, fence_ms) then
  redis.call('SET', KEYS[1], live, 'PX', ttl)
  return 1
end
redis.call('DEL', KEYS[1])
redis.call(pub, KEYS[1] .. ':ch', '*') -- someone queued: those who left may still listen
return 1
