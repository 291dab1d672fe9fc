-- lib.lua: functions the scripts share. Each script is preceded by those it
-- calls, and only those (script.go, withLib); chunks are separated by blank
-- lines.
--
-- A plain lock is a string key holding its lease's token, with PX expiry.
-- Each lease has a key of its own, "<lock>:r:<token>" (its marker), that
-- records what happened to it, so that a request of it that arrives late
-- or twice does no harm:
--   "e<n>" while it is held, once an extension that may shorten it was
--          sent: the sequence number of the latest such extension applied
--          (an older one, delayed in the network, is ignored: it must not
--          cut short a lease a newer extension set). Extensions that only
--          lengthen (PEXPIRE GT) need no number;
--   "q"    while a hold of a sorted-set kind waits in the queue (its
--          release then takes the entry out);
--   "1"/"0" once it is ended (released, handed over, or the undo of an
--          attempt whose outcome is unknown): "1" when it held the lock
--          until then, "0" when not. An acquire of the lease still in
--          flight (delayed, or sent again after a lost reply) is refused
--          instead of taking the lock for nobody; a re-sent release reports
--          what the first copy did. The marker lives for the revocation
--          window, min(TTL, 1 min), whatever happens to the lock. Only a
--          lease that may have such a request in flight is marked: dlock
--          sends each request once (the Redis client never re-sends it),
--          so a lease whose every acquire was answered ends unmarked; an
--          undo, a resumed lease, a quorum's or a script-free one is marked.
-- A waiter's queue entry (fair locks, semaphores, read-write locks,
-- elections) lives the same window unless renewed, so that a request that
-- lands after its lease's marker is gone holds a place in line for one
-- window at most, and entries past their deadline are skipped and dropped
-- by whoever serves the queue.
-- The fence counter ("<lock>:fence") is written only when a fence is asked
-- for (fence.lua) or a lock is handed to a fair waiter, and lives for the
-- fence window after that; a fence issued with a lease that outlives the
-- window (a fair handover, a leadership term) lives as long as that lease.
--
-- A semaphore is a sorted set at the lock key: one member per permit, the
-- permit's token, scored by its deadline (ms, server clock), with the key
-- expiring at the latest deadline. A permit is held while its deadline is
-- ahead of the server's clock; the scripts that count permits drop the
-- others first (a permit is granted without counting only when it is the
-- set's one member), so a holder that died frees its permit at its
-- deadline without anyone releasing it. Each permit is a lease with a marker key of
-- its own, as a plain lock's. Its waiters queue as a fair lock's, with
-- entries "deadline_ms:ttl_ms:permits": the N the waiter asked with.
--
-- A read-write lock is a sorted set at the lock key too, with one member
-- per hold: "r:<token>" for a read, "w:<token>" for a write (a write is the
-- only member while it is held), scored by its deadline, the key expiring
-- at the latest deadline. A semaphore's members are bare tokens, whose
-- second character is never ':', so the first member tells the two apart.
-- Each hold is a lease with a marker key of its own; the waiters queue as
-- a fair lock's, with entries "deadline_ms:ttl_ms:r" or "...:w".
--
-- now_ms() is the server's clock in ms.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- new_fence(key, window_ms) returns the next fence for the counter at key
-- and stores it for window_ms: max(last + 1, server time in µs), so fences
-- keep rising even when the counter was lost (it expired, an empty restart,
-- a failover to a stale replica). The clock's value is written first and
-- corrected in the rare case that the counter was already ahead of it: two
-- commands on the common path. string.format('%d') keeps all digits
-- (tostring would round to 14). It returns nil, writing nothing, when key
-- holds a value of another type.
local function new_fence(key, window_ms)
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.pcall('SET', key, string.format('%d', fence), 'PX', window_ms, 'GET')
  if type(last) == 'table' then return nil end
  last = tonumber(last or '0')
  if last and last >= fence then
    fence = last + 1
    redis.call('SET', key, string.format('%d', fence), 'PX', window_ms)
  end
  return fence
end

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

local function revoked_reply()
  return redis.error_reply('REVOKED dlock: this lease was already ended')
end

local function fence_type_reply()
  return redis.error_reply('WRONGTYPE dlock: the fence key holds a value of another type')
end

-- hold_member returns the member of the sorted set at key that a hold's
-- member names: itself, or for a read-write hold whose downgrade has an
-- unknown outcome ("?:<token>") its read if the set has it, else its write.
local function hold_member(key, member)
  if string.sub(member, 1, 2) ~= '?:' then return member end
  local read = 'r:' .. string.sub(member, 3)
  if type(redis.pcall('ZSCORE', key, read)) == 'string' then return read end
  return 'w:' .. string.sub(member, 3)
end

-- clock_passed reports whether the server's clock (µs) is at or past fence.
local function clock_passed(fence)
  local t = redis.call('TIME')
  return tonumber(fence) <= tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- live_holds(key, now, expire) drops the holds of the reentrant lock at
-- key whose deadline has passed and returns how many are left. With expire,
-- the key is set to expire with the latest deadline among them (ms, server
-- clock), if any is left: it must outlive that deadline and need not
-- outlive it, each hold being a lease of its own.
local function live_holds(key, now, expire)
  local all = redis.call('HGETALL', key)
  local n, last = 0, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'h:' then
      local d = tonumber(all[i + 1]) or 0
      if d > now then
        n, last = n + 1, math.max(last, d)
      else
        redis.call('HDEL', key, all[i])
      end
    end
  end
  if expire and n > 0 then
    redis.call('PEXPIRE', key, last - now)
  end
  return n
end

-- revoke marks a lease (or a reentrant hold) ended: held is '1' if it held
-- the lock until now. A window of '0' writes nothing: every request of the
-- lease was answered on its one send, so none can land later (see
-- Node.Release).
local function revoke(key, held, window_ms)
  if window_ms ~= '0' then
    redis.call('SET', key, held, 'PX', window_ms)
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
  redis.call('SET', k[5], '0', 'PX', a[3]) -- ended, not holding the lock (see revoke)
  return 0
end

-- revoked reports whether the lease (or hold) of the marker key was ended.
local function revoked(key)
  local r = redis.call('GET', key)
  return r == '0' or r == '1'
end

-- numbered reports whether the marker key holds the number of an applied
-- extension ("e<n>", see superseded): a lease's later extensions are all
-- numbered then, so an unnumbered one that finds it is a late copy.
local function numbered(key)
  local m = redis.call('GET', key)
  return m ~= false and string.sub(m, 1, 1) == 'e'
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

-- superseded tells whether an extension with sequence number seq may be
-- applied: 0 if it is the newest (seq is then recorded in the marker key,
-- for ttl_ms: the lease's life), 1 if it was applied already (a re-sent
-- copy), 2 if a higher number was (a late copy, or the lease was resumed
-- by another Lock, which numbers its extensions above: see resume.go).
-- seq is "<n>", or "<n>.<id>" from a resumed Lock (its id tells its copies
-- from another resumer's that picked the same number).
local function superseded(key, seq, ttl_ms)
  local m = redis.call('GET', key)
  local last = m and tonumber(string.match(m, '^e(%d+)'))
  local n = tonumber(string.match(seq, '^(%d+)'))
  if last and (last > n or (last == n and m ~= 'e' .. seq)) then
    return 2
  elseif last == n then
    return 1
  end
  redis.call('SET', key, 'e' .. seq, 'PX', ttl_ms)
  return 0
end

-- extend_lease is extend.lua's extension (its keys k, arguments a) of the
-- lease whose token a[1] holds the lock k[1]: it returns the reply, and
-- true if it set the lock's expiry now (not for a late or re-sent copy).
local function extend_lease(k, a)
  if a[3] == '0' then
    local v = redis.call('MGET', k[1], k[2])
    if v[1] ~= a[1] then return 0 end
    if v[2] and string.byte(v[2]) == 101 then return 2 end -- "e<n>": a numbered extension was applied
    redis.call('PEXPIRE', k[1], a[2], 'GT')
    return 1, true
  elseif redis.call('GET', k[1]) ~= a[1] then
    return 0
  end
  local r = superseded(k[2], a[3], a[2])
  if r ~= 0 then return r end
  redis.call('PEXPIRE', k[1], a[2])
  return 1, true
end

-- extension(key, seq, ttl_ms) tells whether an extension whose marker
-- key is key may be applied: 0 if so, else the reply that it changed
-- nothing. seq is its sequence number (see superseded), or '0' for one
-- that never shortens the lease, a late copy once a numbered one was
-- applied (2, see numbered).
local function extension(key, seq, ttl_ms)
  if seq ~= '0' then return superseded(key, seq, ttl_ms) end
  return numbered(key) and 2 or 0
end

-- drives reports whether the Lock whose resumer id is id ('' or nil for the
-- Lock that took the lease; "<n>:<random>" for one that resumed it with
-- its extension numbered n, see resume.go) still drives the lease whose
-- marker is m (false: none): not once another Lock resumed it after this
-- one, whose numbered extension the marker then records ("e<n>.<its id>",
-- see superseded), numbered at or above this Lock's resume. A superseded
-- Lock may still hold the token; it must not be issued a fence, nor act
-- for the lease. A marker of the first Lock ("e<n>", no id), or of a Lock
-- this one resumed after, stops no resumer: a quorum node that a resume
-- missed still holds one. (The release scripts check it inline, on their
-- common path.)
local function drives(m, id)
  local n, by = string.match(m or '', '^e(%d+)%.(.+)$')
  return not by or by == id or tonumber(n) < (tonumber(string.match(id or '', '^(%d+):')) or -1)
end

-- expire_with_last makes the semaphore at key expire with its latest
-- permit (a key left without members is deleted by Redis).
local function expire_with_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', key, last)
  end
end

-- hold_call runs cmd (ZADD with its flags, ZREM or ZMSCORE) on the members
-- of a hold of w permits at key: its first member, then "<member> 2" to
-- "<member> w" (a token has no space), each with score if one is given. It
-- sends them 500 at a time, since unpack is bounded by Lua's stack (about
-- 8,000 values), and returns the sum of the replies (ZADD, ZREM) or, for
-- ZMSCORE, the scores in order (false for a missing member).
local function hold_call(key, member, w, score, cmd, ...)
  local sum, scores = 0, {}
  for from = 1, w, 500 do
    local args = {cmd, key, ...}
    for i = from, math.min(from + 499, w) do
      args[#args + 1] = score -- (nothing when score is nil)
      args[#args + 1] = i == 1 and member or (member .. ' ' .. i)
    end
    local r = redis.call(unpack(args))
    if type(r) == 'table' then
      for _, v in ipairs(r) do
        scores[#scores + 1] = v
      end
    else
      sum = sum + r
    end
  end
  return cmd == 'ZMSCORE' and scores or sum
end

-- serve_holds hands holds of the sorted set k[1] (a semaphore's permits,
-- a read-write lock's holds) to the live waiters at the head of its queue,
-- in arrival order, for as long as the head waiter may have one; waiters
-- whose entry lapsed are dropped. k are the keys {set, fence, queue,
-- waiters}, a the arguments {channel, publish command, fence window ms};
-- now is the server's clock. A waiter's entry is "deadline_ms:ttl_ms:x":
-- admit(x, head, granted) returns the member to add for the waiter head
-- and the permits it holds (granted were granted before it in this
-- call), false if it must wait, or nil if x is malformed (the entry is
-- dropped as if it had lapsed).
-- Each grant lasts the waiter's TTL, comes with a fence (none if the fence
-- key holds a foreign value) and is announced on the channel as
-- "<token> <fence>". It stops at the waiter me, left queued, and returns
-- the waiter left at the head (nil: nobody, me, or one that must wait) and
-- how many it granted.
local function serve_holds(k, now, me, a, admit)
  local granted = 0
  while true do
    local head = redis.call('LINDEX', k[3], 0)
    if not head or head == me then return head, granted end
    local deadline, ttl, x = string.match(redis.call('HGET', k[4], head) or '', '^(%d+):(%d+):(.+)$')
    if deadline and tonumber(deadline) > now then
      local member, w = admit(x, head, granted)
      if member == false then return head, granted end
      if member then
        hold_call(k[1], member, w, now + tonumber(ttl), 'ZADD')
        expire_with_last(k[1])
        granted = granted + w
        local fence = new_fence(k[2], a[3])
        redis.call(a[2], a[1], fence and head .. ' ' .. string.format('%d', fence) or head)
      end
    end
    redis.call('LPOP', k[3])
    redis.call('HDEL', k[4], head)
  end
end

-- serve_queue serves a semaphore's queue (see serve_holds): its waiters'
-- entries end in their N, and ":<w>" when they want w permits at once; a
-- waiter gets its w while that leaves no more than its own N held, or the
-- size stored in Redis if there is one (size, else nil): a waiter that
-- wants more than that size, or whose N is 0 while none is stored, is
-- dropped (its next attempt is refused). held is the number of live
-- permits; it returns the number held now and the waiter left at the head.
local function serve_queue(k, now, held, me, a, size)
  local head, granted = serve_holds(k, now, me, a, function(x, head, granted)
    local n, w = string.match(x, '^(%d+):?(%d*)$')
    n, w = size or tonumber(n), tonumber(w) or 1
    if not n or n == 0 or (size and w > size) then return nil end
    return held + granted + w <= n and head, w
  end)
  return held + granted, head
end

-- same_kind reports whether the sorted set at key, whose lapsed holds were
-- dropped, is of the kind of member (a read-write lock's members have ':'
-- second, a semaphore's never, '' stands for one): true when it is empty
-- or missing.
local function same_kind(key, member)
  local first = redis.call('ZRANGE', key, 0, 0)[1]
  return not first or (string.sub(first, 2, 2) == ':') == (string.sub(member, 2, 2) == ':')
end

-- not_hold_kind is the error of a request for a semaphore's permit (n, its
-- size) or a read-write lock's hold (n nil) at key, which holds another
-- kind. It reads the key's type: only on this path, never on a grant's.
local function not_hold_kind(key, n)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'zset' then
    kind = same_kind(key, '') and 'sem' or 'rw' -- ('': a semaphore's kind of member)
  end
  local what = ({string = 'a lock (a string)', hash = 'a reentrant lock (a hash)', rw = 'a read-write lock',
    sem = 'a semaphore'})[kind] or ('a ' .. kind)
  return redis.error_reply('WRONGTYPE dlock: the key holds ' .. what .. ', not ' .. (n and 'a semaphore' or 'a read-write lock'))
end

-- rw_admits reports whether a hold of kind ('r' or 'w') may be granted now
-- at the read-write lock at key, whose expired holds were dropped: a write
-- when nothing is held, a read when no write is.
local function rw_admits(key, kind)
  local first = redis.call('ZRANGE', key, 0, 0)[1]
  return first == nil or (kind == 'r' and string.sub(first, 1, 1) == 'r')
end

-- rw_serve_queue serves a read-write lock's queue (see serve_holds): its
-- waiters' entries end in 'r' or 'w', and the head waiter gets its hold
-- when rw_admits says it may (a run of readers at once, or one writer).
-- It returns the waiter left at the head and how many it granted.
local function rw_serve_queue(k, now, me, a)
  return serve_holds(k, now, me, a, function(x, head)
    if x ~= 'r' and x ~= 'w' then return nil end
    return rw_admits(k[1], x) and x .. ':' .. head, 1
  end)
end
