-- lib_queue.lua: the fair queue's functions, which fair locks and elections
-- share (see lib.lua). A function is defined after those it calls, here or
-- in a file read before this one (script.go, withLib).

-- fenced(k, who, ttl, pub, fence_ms) issues a fence for the lease of token
-- who, of ttl ms, at the fair lock k[1] and announces it on the lock's
-- channel as "<who> <fence>"; the counter k[2] lives the fence window
-- (fence_ms), or as long as the lease if that is longer. It returns the
-- fence, or nil, writing nothing, when k[2] holds a value of another type.
local function fenced(k, who, ttl, pub, fence_ms)
  local fence = new_fence(k[2], math.max(tonumber(fence_ms), tonumber(ttl)))
  if fence then
    redis.call(pub, k[1] .. ':ch', who .. ' ' .. string.format('%d', fence))
  end
  return fence
end

-- live_head(k, head, now) takes waiters off the head of the fair queue
-- k[3], head (taken off already) first, until one whose entry in the
-- waiters hash k[4] ("deadline_ms:ttl_ms") is live at now, and returns it,
-- its ttl and how long its entry lives in ms (nil: no waiter was live).
-- The entries of the waiters that died or gave up without saying so are
-- deleted; the caller serves the one returned, or puts it back (its entry
-- is kept).
local function live_head(k, head, now)
  while head do
    local deadline, ttl = string.match(redis.call('HGET', k[4], head) or '', '^(%d+):(%d+)$')
    if deadline and tonumber(deadline) > now then return head, ttl, deadline - now end
    redis.call('HDEL', k[4], head)
    head = redis.call('LPOP', k[3])
  end
end

-- hand_over gives the fair lock k[1], whose holder released it, to the
-- first live waiter of its queue, head (taken out already) first, with a
-- fence (see fenced; a[2] is "<publish> <fence_ms>"); those whose entry
-- lapsed are dropped. With nobody live, or a foreign fence key, the lock
-- is freed rather than handed over unfenced, and the release announced as
-- "*". It returns 1, the release's reply.
local function hand_over(k, a, head)
  local pub, fence_ms = string.match(a[2], '^(%S+) (%d+)')
  local live, ttl = live_head(k, head, head and now_ms()) -- (the clock is read only if someone queued)
  if live then
    redis.call('HDEL', k[4], live)
  end
  if live and fenced(k, live, ttl, pub, fence_ms) then
    redis.call('SET', k[1], live, 'PX', ttl)
    return 1
  end
  redis.call('DEL', k[1])
  redis.call(pub, k[1] .. ':ch', '*') -- someone queued, or the release of a campaign: those who left, or watch, may listen
  return 1
end

-- queue_up puts the waiter token at the end of the queue k[3], its entry
-- "<deadline_ms>:<rest>" in the waiters hash k[4] (deadline: ms after now,
-- the server's clock), or renews the entry of one already queued, and
-- makes both keys live at least ms from now (never shorter: a waiter with
-- a short TTL must not cut short the entry of one with a longer TTL).
local function queue_up(k, token, now, ms, rest)
  if redis.call('HSET', k[4], token, string.format('%d:', now + tonumber(ms)) .. rest) == 1 then
    redis.call('RPUSH', k[3], token)
  end
  for _, key in ipairs({k[3], k[4]}) do
    if redis.call('PTTL', key) < tonumber(ms) then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

-- leave_queue is a fair release (release_fair.lua, campaign_release.lua:
-- keys k, arguments a) by a lease that does not hold the lock, whose
-- marker reads m: its queue entry, if any, is removed, and a marked lease
-- is marked ended. It returns the release's reply: 1 if a first copy of
-- the request released the lock, else 0.
local function leave_queue(k, a, m)
  if redis.call('HDEL', k[4], a[1]) == 1 then
    redis.call('LREM', k[3], 1, a[1])
  end
  if not a[3] then return 0 end
  if m == '1' then return 1 end
  if m ~= '0' then redis.call('SET', k[5], '0', 'PX', a[3]) end -- ended, not holding the lock (see revoke)
  return 0
end

-- take_queued is a fair lock's acquire (acquire_fair.lua: its keys k,
-- arguments a) past its common path: quiet when neither the lease's
-- marker nor the queue exists, holder what SET NX GET named if it ran. It
-- returns the reply when the lock is another's ({pttl, holder}, or an
-- error); else nil, and 'taken' if the caller took the lock now, 'kept'
-- if its lease held it already and this request renewed it, nothing for a
-- late copy (see numbered).
local function take_queued(k, a, quiet, holder)
  if not quiet and revoked(k[5]) then return revoked_reply() end
  local qttl, pub, fence_ms = string.match(a[3], '^(%d+) (%S+) (%d+)')
  if not holder and (quiet or not redis.call('LINDEX', k[3], 0)) then
    -- Nobody queued (the common case): SET NX GET takes a free lock, or
    -- names the holder of a taken one, in a single command.
    holder = redis.call('SET', k[1], a[1], 'NX', 'PX', a[2], 'GET')
    if not holder then return nil, 'taken' end
  end
  holder = holder or redis.call('GET', k[1]) -- (unless SET NX GET named it, here or in the caller)
  if holder == a[1] then
    -- Handed over earlier, or a re-sent request: the caller counts its
    -- validity from when it sent this one, so the lease must last ttl from
    -- now; it is never shortened (GT). Not once a numbered extension was
    -- applied (see extend.lua): this is then a late copy, and the lease may
    -- have been shortened since.
    if not quiet and numbered(k[5]) then return nil end
    if redis.call('PEXPIRE', k[1], a[2], 'GT') == 0 then
      -- Not lengthened: written all the same (its value and expiry kept),
      -- so that the WAIT or WAITAOF after this call, which covers only its
      -- own connection's writes, covers the handover too.
      redis.call('SET', k[1], a[1], 'XX', 'KEEPTTL')
    end
    return nil, 'kept'
  end
  if not holder then
    -- The first live waiter takes the lock: another than the caller with a
    -- fence, announced. Waiters that died or gave up without saying so are
    -- dropped; the clock is read only if someone is queued (we are here
    -- only then: the queue was not empty above).
    local head, ttl, life = live_head(k, redis.call('LPOP', k[3]), now_ms())
    holder = head ~= a[1] and head -- (nil or false: the lock is the caller's)
    if holder and not fenced(k, holder, ttl, pub, fence_ms) then
      -- A foreign fence key: the head keeps its place, and a queue the LPOP
      -- emptied lives as long as the head's entry, as queue_up made it.
      redis.call('LPUSH', k[3], holder)
      redis.call('PEXPIRE', k[3], life, 'NX')
      return fence_type_reply()
    end
    if head then
      redis.call('HDEL', k[4], head)
    end
    redis.call('SET', k[1], holder or a[1], 'PX', holder and ttl or a[2])
    if not holder then return nil, 'taken' end
  end
  local pttl = math.max(redis.call('PTTL', k[1]), -1)
  if a[4] then
    queue_up(k, a[1], now_ms(), qttl, a[2])
    local px = pttl < 0 and tonumber(qttl) or math.min(pttl, tonumber(qttl)) -- (0: the lease ends now)
    if px > 0 and redis.call('PTTL', k[6]) < px then -- (lengthened, never shortened: another waiter's may live longer)
      redis.call('SET', k[6], '1', 'PX', px)
    end
  end
  return {pttl, holder or ''}
end
