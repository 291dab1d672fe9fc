-- hold_release.lua: give back a hold of a sorted-set kind (a semaphore's
-- permit, a read-write lock's read or write) and grant what it frees to the
-- waiters at the head of the queue, or take a waiter that gives up out of
-- the queue; either way the hold's lease is ended (see revoke in lib.lua).
-- KEYS[1] the set   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters
-- hash   KEYS[5] the hold's marker key (see lib.lua)
-- ARGV[1] the hold's member (a permit: its token; a read or write:
--         "r:<token>" or "w:<token>"; "?:<token>" after a downgrade of
--         unknown outcome: either)
-- ARGV[2] release channel   ARGV[3] publish command: PUBLISH or SPUBLISH
-- ARGV[4] how long the fence counter lives, in ms (the fence window)
-- ARGV[5] (a semaphore's) how many permits the hold has, w (absent: 1)
-- ARGV[6] (a marked lease's only) how long the revocation marker lives, in
--         ms (see release.lua)
-- ARGV[7] (a resumed Lock's only) its resumer id (see drives in lib.lua)
-- (The hold's token is its member, or the member after its "r:", "w:" or
-- "?:": no argument of its own.)
-- KEYS[6] (a semaphore's) its size kept in Redis, if any (permits.lua)
-- Grants (serve_holds) are announced as "<token> <fence>". Nothing is
-- announced when nobody queued: the kinds' waiters are all in the queue.
-- Returns 1 if the hold was ours (it is now given back; also for a re-sent
-- request whose first copy gave it back), 0 if it was not (a waiter's queue
-- entry, if any, is removed), -1 if another Lock resumed the hold (nothing
-- is done). A key of another kind is left alone. A hold
-- past its deadline that nobody dropped yet counts as ours: no other hold
-- was granted past it (hold_acquire.lua drops lapsed holds before it grants
-- one among them), and the caller's own clock tells it was late.
local m = redis.call('GET', KEYS[5])
local n, by
if m then n, by = string.match(m, '^e(%d+)%.(.+)$') end
if by and by ~= ARGV[7] and tonumber(n) >= (tonumber(string.match(ARGV[7] or '', '^(%d+):')) or -1) then
  return -1 -- not drives (lib.lua)
end
local w = tonumber(ARGV[5]) or 1
local removed
if string.sub(ARGV[1], 1, 2) == '?:' then -- the hold is its read or its write
  local token = string.sub(ARGV[1], 3)
  removed = redis.pcall('ZREM', KEYS[1], 'r:' .. token, 'w:' .. token)
elseif w == 1 then
  removed = redis.pcall('ZREM', KEYS[1], ARGV[1])
else -- 500 members at a time: unpack is bounded by Lua's stack
  removed = 0
  for from = 1, w, 500 do
    local args = {'ZREM', KEYS[1]}
    for i = from, math.min(from + 499, w) do
      args[#args + 1] = i == 1 and ARGV[1] or (ARGV[1] .. ' ' .. i)
    end
    local r = redis.pcall(unpack(args))
    if type(r) ~= 'number' then break end -- (the first batch's error: the key is another kind's)
    removed = removed + r
  end
end
removed = type(removed) == 'number' and math.min(removed, 1) or 0 -- (not a number: the key is another kind's)
-- The marker read: a waiter's "q" says it has a queue entry to take out
-- (a hold that was removed has none: it left the queue when granted).
local was
if ARGV[6] then
  was = redis.call('GET', KEYS[5])
  if removed == 0 and was == '1' then return 1 end -- a re-sent release: the first copy's answer
  if removed == 1 or was ~= '0' then redis.call('SET', KEYS[5], removed == 1 and '1' or '0', 'PX', ARGV[6]) end -- (see revoke in lib.lua)
elseif removed == 0 then
  was = redis.call('GET', KEYS[5])
end
local token = was == 'q' and (string.sub(ARGV[1], 2, 2) == ':' and string.sub(ARGV[1], 3) or ARGV[1])
if token and redis.call('HDEL', KEYS[4], token) == 1 then
  redis.call('LREM', KEYS[3], 1, token)
end
if not redis.call('LINDEX', KEYS[3], 0) then return removed end -- nobody waits (the common case)
-- (the shared functions are defined here)
-- Someone waits: serve the queue (a waiter that left may have been the
-- one blocking the others), unless the key is another kind's.
local now = now_ms()
if type(redis.pcall('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)) == 'number' and same_kind(KEYS[1], ARGV[1]) then
  local a = {ARGV[2], ARGV[3], ARGV[4]}
  if string.sub(ARGV[1], 2, 2) == ':' then
    rw_serve_queue(KEYS, now, nil, a)
  else
    local size = KEYS[6] and tonumber(redis.call('GET', KEYS[6]) or '')
    serve_queue(KEYS, now, redis.call('ZCARD', KEYS[1]), nil, a, size)
  end
  expire_with_last(KEYS[1])
end
return removed
