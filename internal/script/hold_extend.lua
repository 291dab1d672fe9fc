-- hold_extend.lua: reset a hold of a sorted-set kind that we still have (a
-- semaphore's permit, a read-write lock's read or write) to ttl from now;
-- the key lasts until the latest hold's deadline.
-- KEYS[1] the set   KEYS[2] the hold's marker key (see lib.lua)
-- ARGV[1] the hold's member (a permit: its token; "r:<token>", "w:<token>",
--         or "?:<token>" after a downgrade of unknown outcome: see
--         hold_member in lib_hold.lua)
-- ARGV[2] ttl in ms
-- ARGV[3] 0 for an extension that never shortens the permit (ZADD GT),
--         else the extension's sequence number (see extend.lua)
-- ARGV[4] (a semaphore's) how many permits the hold has, w (absent: 1)
-- Returns 1 if the hold is ours (extended now, or by this request's
-- earlier copy), 0 if it is gone (released, expired, the key is another
-- kind's, or, for a numbered extension, the hold has more than w permits:
-- a resume of a hold of k permits must ask for k), 2 if it is ours but a
-- newer extension was applied (as in extend.lua): this changed nothing.
local now = now_ms()
local w = tonumber(ARGV[4]) or 1
local member = hold_member(KEYS[1], ARGV[1])
local score = redis.pcall('ZSCORE', KEYS[1], member)
if type(score) ~= 'string' or tonumber(score) <= now then return 0 end -- gone, or the key is not a semaphore or read-write lock
if w > 1 then -- every permit of the hold must be live: none lapsed on its own
  local scores = hold_call(KEYS[1], member, w, nil, 'ZMSCORE')
  for i = 1, w do
    if not scores[i] or tonumber(scores[i]) <= now then return 0 end
  end
end
if ARGV[3] ~= '0' and redis.call('ZSCORE', KEYS[1], member .. ' ' .. (w + 1)) then return 0 end
local s = extension(KEYS[2], ARGV[3], ARGV[2], KEYS[1])
if s ~= 0 then return s end
local until_ms = now + tonumber(ARGV[2])
if ARGV[3] == '0' then
  hold_call(KEYS[1], member, w, until_ms, 'ZADD', 'XX', 'GT')
  redis.call('PEXPIREAT', KEYS[1], until_ms, 'GT')
else
  hold_call(KEYS[1], member, w, until_ms, 'ZADD', 'XX')
  expire_with_last(KEYS[1])
end
return 1
