-- acquire_fair.lua: take a lock in arrival order (fair mode).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue (list of waiter tokens)
-- KEYS[4] waiters (hash: token -> "deadline_ms:ttl_ms")   KEYS[5] the lease's marker key
-- KEYS[6] the wake key (see release.lua): a waiter that queues sets it for
--         the holder's remaining lease, at most as long as its queue entry
--         lives, so that an unfair holder's release (a name used in both
--         modes) announces itself too
-- ARGV[1] the lease's token   ARGV[2] ttl in ms
-- ARGV[3] what only a contended call reads, in one argument (each costs the
--         server a string of its own): "<qttl> <publish> <fence_ms> <campaign>":
--         how long a queue entry lives without being renewed, in ms (the
--         lease's revocation window, see lib.lua); the publish command,
--         PUBLISH or SPUBLISH on a Redis Cluster; how long the fence counter
--         lives, in ms (the fence window; a fence issued with a longer lease
--         lives as long as the lease); 1 for a leadership campaign (see
--         election.go), else 0. The channel is the lock key + ":ch".
-- ARGV[4] (a waiter's only) 1: queue up if taken (absent: a try)
-- Returns 0 when the lock is ours (taken now, handed to us by a release, or
-- already ours), else {pttl, holder}: the holder's remaining ms (-1: no
-- expiry) and its token, which carries its metadata. The lock goes to the caller only if no live waiter is ahead
-- of it; a try never queues and never jumps the queue. A free lock with
-- live waiters (its holder expired without releasing) is handed to the
-- first of them, with a fence: the handover is announced on the channel as
-- "<token> <fence>".
-- A campaign's lease is fenced as it takes the lock, so that the fence
-- counter always names the current leader's term: the reply is then the
-- fence (> 0) instead of 0 (for a lease that already held the lock, the
-- counter's value, 0 if it is gone), and a lock taken rather than handed
-- over is announced on the channel as "<token> <fence>" too, for those who
-- watch the leadership.
-- Errors: REVOKED if this lease was already ended (nothing is written, no
-- queue entry made); WRONGTYPE if a key holds a foreign value.
local token = ARGV[1]
-- One EXISTS over the marker and the queue: on the common path (this lease
-- never ended, nobody queued) SET NX GET follows and nothing else.
local quiet = redis.call('EXISTS', KEYS[5], KEYS[3]) == 0
local campaign = string.sub(ARGV[3], -1) == '1'
local holder -- nil: not tried yet; else the holder SET NX GET named
if quiet and not campaign then
  holder = redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2], 'GET')
  if not holder then return 0 end
end
-- (the shared functions are defined here)
if not quiet and revoked(KEYS[5]) then return revoked_reply() end

local qttl, pub, fence_ms = string.match(ARGV[3], '^(%d+) (%S+) (%d+)')

-- won returns the reply of an attempt that took the lock now (see above).
local function won()
  if not campaign then return 0 end
  return fenced(KEYS, token, ARGV[2], pub, fence_ms) or fence_type_reply()
end

if holder then
  -- taken, found above
elseif quiet or not redis.call('LINDEX', KEYS[3], 0) then
  -- Nobody queued (the common case): SET NX GET takes a free lock, or names
  -- the holder of a taken one, in a single command.
  holder = redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2], 'GET')
  if not holder then return won() end
else
  holder = redis.call('GET', KEYS[1])
end
if holder == token then
  -- Handed over earlier, or a re-sent request: the caller counts its
  -- validity from when it sent this one, so the lease must last ttl from
  -- now; it is never shortened (GT). Not once a numbered extension was
  -- applied (see extend.lua): this is then a late copy, and the lease may
  -- have been shortened since.
  if quiet or not numbered(KEYS[5]) then
    if redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT') == 0 then
      -- Not lengthened: written all the same (its value and expiry kept),
      -- so that the WAIT or WAITAOF after this call, which covers only its
      -- own connection's writes, covers the handover too.
      redis.call('SET', KEYS[1], token, 'XX', 'KEEPTTL')
    end
    if campaign then
      redis.call('PEXPIRE', KEYS[2], ARGV[2], 'GT')
    end
  end
  if campaign then return tonumber(redis.call('GET', KEYS[2]) or '0') or 0 end
  return 0
end
if not holder then
  -- The first live waiter takes the lock: another than the caller with a
  -- fence, announced. Waiters that died or gave up without saying so are
  -- dropped; the clock is read only if someone is queued (we are here
  -- only then: the queue was not empty above).
  local head, ttl, life = live_head(KEYS, redis.call('LPOP', KEYS[3]), now_ms())
  holder = head ~= token and head -- (nil or false: the lock is the caller's)
  if holder and not fenced(KEYS, holder, ttl, pub, fence_ms) then
    -- A foreign fence key: the head keeps its place, and a queue the LPOP
    -- emptied lives as long as the head's entry, as queue_up made it.
    redis.call('LPUSH', KEYS[3], holder)
    redis.call('PEXPIRE', KEYS[3], life, 'NX')
    return fence_type_reply()
  end
  if head then
    redis.call('HDEL', KEYS[4], head)
  end
  redis.call('SET', KEYS[1], holder or token, 'PX', holder and ttl or ARGV[2])
  if not holder then return won() end
end
local pttl = math.max(redis.call('PTTL', KEYS[1]), -1)
if ARGV[4] then
  local entry = string.format('%d', now_ms() + tonumber(qttl)) .. ':' .. ARGV[2]
  queue_up(KEYS, token, entry, qttl)
  local px = pttl < 0 and tonumber(qttl) or math.min(pttl, tonumber(qttl)) -- (0: the lease ends now)
  if px > 0 and redis.call('PTTL', KEYS[6]) < px then -- (lengthened, never shortened: another waiter's may live longer)
    redis.call('SET', KEYS[6], '1', 'PX', px)
  end
end
return {pttl, holder or ''}
