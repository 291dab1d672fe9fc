-- hold_acquire.lua: take a hold of a sorted-set kind, in arrival order, or
-- confirm one we already hold: a permit of a semaphore, or a read or write
-- hold of a read-write lock (see lib.lua).
-- KEYS[1] the set (member -> deadline ms)   KEYS[2] fence key
-- KEYS[3] queue (list of waiter tokens)
-- KEYS[4] waiters (hash: token -> "deadline_ms:ttl_ms:<what>")
-- KEYS[5] the hold's marker key (see lib.lua)
-- ARGV[1] the hold's token   ARGV[2] ttl in ms
-- ARGV[3] 1 to queue up if it may not have the hold now, 0 to try only
-- ARGV[4] how long a queue entry lives without being renewed, in ms (the
--         hold's revocation window, see lib.lua)
-- ARGV[5] release channel   ARGV[6] publish command: PUBLISH or SPUBLISH
-- ARGV[7] how long the fence counter lives, in ms (the fence window)
-- ARGV[8] what is asked for: N, a permit of a semaphore of N permits
--         (member: the token); 'r' a read, 'w' a write (member
--         "r:<token>" or "w:<token>")
-- ARGV[9] (a semaphore's) how many permits the hold takes at once, w: its
--         members are the token and "<token> 2" to "<token> w" (absent: 1)
-- KEYS[6] (a semaphore's) the size kept in Redis (permits.lua): when it is
--         there, it is N for every caller, whatever N they ask with
-- A permit is granted while fewer than the caller's N are held (by anyone,
-- whatever N they asked with); a read while no write is held; a write while
-- nothing is; and each only if no live waiter is ahead of the caller: a
-- try never queues and never jumps the queue. Waiters at the head of the
-- queue that may have their hold get it first (serve_holds), each
-- announced on the channel as "<token> <fence>".
-- Returns 0 when the hold is ours (taken now, handed to us earlier, or
-- already ours: a re-sent request, whose hold then lasts at least ttl from
-- now), else -2 - the ms until the earliest held hold's deadline (< 0; -1
-- if none is held), as one integer.
-- Errors: REVOKED if this hold's lease was already ended (nothing is
-- written, no queue entry made); WRONGTYPE if the key holds another kind
-- (nothing is written); DLOCK_TOOMANY if the hold asks more permits than
-- the stored size, or without one the caller's N (nothing is written, a
-- queue entry of the caller's stays for its undo to take out);
-- DLOCK_NOSIZE if the caller's N is 0 and no size is stored (the same).
local token, ttl, what = ARGV[1], tonumber(ARGV[2]), ARGV[8]
local n, w = tonumber(what), tonumber(ARGV[9]) or 1
local member = n and token or (what .. ':' .. token)
-- One EXISTS over the marker and the queue: on the common path (this hold
-- never ended, nobody queued, nobody else holds) the hold is added, the
-- live ones counted and the key's expiry set, and nothing else.
local quiet
if KEYS[6] then -- a semaphore: a stored size takes the way below, which reads it
  -- So does a hold of more than 500 permits, which hold_call adds in
  -- batches (one ZADD here would unpack more than Lua's stack allows).
  quiet = w <= n and w <= 500 and redis.call('EXISTS', KEYS[5], KEYS[3], KEYS[6]) == 0
else
  quiet = redis.call('EXISTS', KEYS[5], KEYS[3]) == 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) -- as now_ms in lib.lua
local added -- 1 when added below as the set's possibly only member (a key of another type: WRONGTYPE, nothing written)
if quiet then
  if w == 1 then
    added = redis.call('ZADD', KEYS[1], 'NX', now + ttl, member)
  else
    local args = {'ZADD', KEYS[1], 'NX'}
    for i = 1, w do
      args[2 * i + 2], args[2 * i + 3] = now + ttl, i == 1 and member or (member .. ' ' .. i)
    end
    added = redis.call(unpack(args))
  end
  -- The only member, lapsed ones included: the key lasts as long as this
  -- hold. (With lapsed members it goes the way below, which drops them: a
  -- hold is never granted past one that lapsed without dropping it, so
  -- hold_release.lua's ZREM tells a lapsed hold that lost its place from
  -- one that did not.)
  if added == w and redis.call('ZCARD', KEYS[1]) == w then
    redis.call('PEXPIREAT', KEYS[1], now + ttl)
    return 0
  end
end
-- (the shared functions are defined here)
if added and added > 0 then
  hold_call(KEYS[1], member, w, nil, 'ZREM') -- others hold: the rules below decide
end
if not quiet and revoked(KEYS[5]) then return revoked_reply() end
if type(redis.pcall('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)) ~= 'number' or not same_kind(KEYS[1], member) then
  return redis.error_reply('WRONGTYPE dlock: the key holds a value of another kind')
end
-- A write's request that finds its token's read held is a late copy of a
-- write since downgraded (hold_downgrade.lua): the hold is ours, as a read,
-- and the copy takes nothing (no queue entry that would wait for that read
-- and be handed the lock once it ends).
if what == 'w' and redis.call('ZSCORE', KEYS[1], 'r:' .. token) then return 0 end
-- The hold's scores: a hold of more than 500 permits (more than one
-- ZMSCORE) is read whole only if its first member is there.
local mine = hold_call(KEYS[1], member, w > 500 and 1 or w, nil, 'ZMSCORE')
if w > 500 and mine[1] then
  mine = hold_call(KEYS[1], member, w, nil, 'ZMSCORE')
end
local whole = mine[1]
for i = 2, w do
  whole = whole and mine[i]
end
if whole then
  -- Handed over earlier, or a re-sent request: the caller counts its
  -- validity from when it sent this one; never shortened (GT). Not once a
  -- numbered extension was applied (see extend.lua): a late copy then.
  if quiet or not numbered(KEYS[5]) then
    hold_call(KEYS[1], member, w, now + ttl, 'ZADD', 'GT')
    expire_with_last(KEYS[1])
  end
  return 0
elseif mine[1] then
  -- Part of this hold lapsed and was dropped: what is left goes, and the
  -- request is weighed as a new one.
  hold_call(KEYS[1], member, w, nil, 'ZREM')
end
local a = {ARGV[5], ARGV[6], ARGV[7]}
local head, admitted
if n then
  local size = KEYS[6] and tonumber(redis.call('GET', KEYS[6]) or '')
  if not size and n == 0 then
    return redis.error_reply('DLOCK_NOSIZE no size is kept in Redis for this semaphore of 0 permits')
  end
  if w > (size or n) then
    return redis.error_reply(string.format('DLOCK_TOOMANY asks %d permits of a semaphore of %d%s', w, size or n, size and ' (its size kept in Redis)' or ''))
  end
  local held
  held, head = serve_queue(KEYS, now, redis.call('ZCARD', KEYS[1]), token, a, size)
  admitted = held + w <= (size or n)
else
  head = rw_serve_queue(KEYS, now, token, a)
  admitted = rw_admits(KEYS[1], what)
end
if (not head or head == token) and admitted then
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], token)
  end
  hold_call(KEYS[1], member, w, now + ttl, 'ZADD')
  expire_with_last(KEYS[1])
  return 0
end
if ARGV[3] == '1' then
  queue_up(KEYS, token, now, ARGV[4], string.format('%d:%s', ttl, what) .. (w > 1 and ':' .. w or ''))
  -- The marker says the hold is queued, so that its release takes the
  -- entry out of the queue (hold_release.lua) without looking on its own.
  redis.call('SET', KEYS[5], 'q', 'PX', ARGV[4])
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
if not first then return -1 end
return -2 - math.max(tonumber(first) - now, 0)
