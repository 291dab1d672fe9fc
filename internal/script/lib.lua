-- lib.lua: the functions every family of scripts shares; a family's own are
-- in its lib_<family>.lua, read after this file, by name. Each script is
-- preceded by those it calls, and only those (script.go, withLib); chunks
-- are separated by blank lines, and a function is defined after those it
-- calls, in its file or in a file read before.
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

local function revoked_reply()
  return redis.error_reply('REVOKED dlock: this lease was already ended')
end

local function fence_type_reply()
  return redis.error_reply('WRONGTYPE dlock: the fence key holds a value of another type')
end

-- clock_passed reports whether the server's clock (µs) is at or past fence.
local function clock_passed(fence)
  local t = redis.call('TIME')
  return tonumber(fence) <= tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- revoke marks a lease (or a reentrant hold) ended: held is '1' if it held
-- the lock until now. A window of '0' writes nothing: every request of the
-- lease was answered on its one send, so none can land later (see
-- Node.Release). A '0' already there stays as it is: a force's outlives
-- the lease (see force_release.lua), a release's window may not.
local function revoke(key, held, window_ms)
  if window_ms ~= '0' and (held == '1' or redis.call('GET', key) ~= '0') then
    redis.call('SET', key, held, 'PX', window_ms)
  end
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

-- superseded tells whether an extension with sequence number seq may be
-- applied: 0 if it is the newest (seq is then recorded in the marker key,
-- for ttl_ms, the lease's life, or as long as the lock key lock or the
-- marker had left if longer: a late copy of the lease's acquire may land
-- while the lease could have lived as asked, and a force reads it there,
-- see force_release.lua), 1 if it was applied already (a re-sent
-- copy), 2 if a higher number was (a late copy, or the lease was resumed
-- by another Lock, which numbers its extensions above: see resume.go).
-- seq is "<n>", or "<n>.<id>" from a resumed Lock (its id tells its copies
-- from another resumer's that picked the same number).
local function superseded(key, seq, ttl_ms, lock)
  local m = redis.call('GET', key)
  local last = m and tonumber(string.match(m, '^e(%d+)'))
  local n = tonumber(string.match(seq, '^(%d+)'))
  if last and (last > n or (last == n and m ~= 'e' .. seq)) then
    return 2
  elseif last == n then
    return 1
  end
  redis.call('SET', key, 'e' .. seq, 'PX', math.max(tonumber(ttl_ms), redis.call('PTTL', key), redis.call('PTTL', lock)))
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
  local r = superseded(k[2], a[3], a[2], k[1])
  if r ~= 0 then return r end
  redis.call('PEXPIRE', k[1], a[2])
  return 1, true
end

-- extension(key, seq, ttl_ms) tells whether an extension whose marker
-- key is key may be applied: 0 if so, else the reply that it changed
-- nothing. seq is its sequence number (see superseded), or '0' for one
-- that never shortens the lease, a late copy once a numbered one was
-- applied (2, see numbered).
local function extension(key, seq, ttl_ms, lock)
  if seq ~= '0' then return superseded(key, seq, ttl_ms, lock) end
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
