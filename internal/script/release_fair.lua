-- release_fair.lua: release a lock and hand it to the first live waiter, or
-- take a waiter that gives up out of the queue (fair mode); either way the
-- lease is ended (see revoke in lib.lua).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters hash
-- KEYS[5] the lease's marker key (see lib.lua)
-- ARGV[1] owner token
-- ARGV[2] what only a contended call reads, in one argument:
--         "<publish> <fence_ms>": the publish command, PUBLISH or SPUBLISH
--         on a Redis Cluster; how long the fence counter lives, in ms (the
--         fence window; with a longer lease handed over, as long as that
--         lease). The channel is the lock key + ":ch".
-- ARGV[3] (a marked lease's only) how long the revocation marker lives, in
--         ms; a clean lease writes none (see release.lua)
-- ARGV[4] (a resumed Lock's only) its resumer id (see drives in lib.lua)
-- A handover is announced on the channel as "<token> <fence>", a plain
-- release as "*" only if someone queued: a fair lock's
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
local head -- the first waiter, taken out of the queue
if holder == token then
  if ARGV[3] then
    redis.call('SET', KEYS[5], '1', 'PX', ARGV[3]) -- ended, holding the lock
  end
  head = redis.call('LPOP', KEYS[3])
  if not head then -- nobody queued (the common case)
    redis.call('DEL', KEYS[1])
    return 1
  end
end
-- (the shared functions are defined here)
if holder ~= token then return leave_queue(KEYS, ARGV, m) end
return hand_over(KEYS, ARGV, head)
