-- permits.lua: read or change a semaphore's size kept in Redis.
-- KEYS[1] the set (see lib.lua)   KEYS[2] the size key   KEYS[3] the queue
-- KEYS[4] the request's key: "<size key>:<request id>", for a change
-- ARGV[1] what to do: 'get'; 'set' stores ARGV[2] unless a size is stored;
--         'add' adds ARGV[2] (negative: takes away) to the stored size, or
--         to ARGV[3] when none is stored; 'unset' deletes the stored size
-- ARGV[3] the caller's N: the size while none is stored
-- ARGV[4] release channel   ARGV[5] publish command: PUBLISH or SPUBLISH
-- ARGV[6] how long the request's key lives, in ms
-- A change ('set', 'add', 'unset') is applied once: the request's key keeps
-- its answer, "<size> <changed>", or "!<error>" if it was refused, and a
-- copy of the request that lands while it lives (asked again after a lost
-- reply, or late in the network) gets that answer and changes nothing but
-- the key, written again so that a WAIT after the copy covers the first
-- one's write.
-- The size key has no expiry: it is the semaphore's configuration, not a
-- lease's state. Holds above a size that shrank keep their permits until
-- they end; none is granted until fewer than the size are held. A change
-- wakes the waiters, if any, with '*' (see internal/pubsub): a bigger size
-- may admit them, a smaller one refuses those who ask more than it, and
-- with none stored those who ask with N = 0 are refused.
-- Returns {size, held, changed}: the size after the call, the permits
-- held now (live members of the set), 1 if the call changed the size.
-- Errors: WRONGTYPE if the set is another kind's (not to a copy of an
-- applied change: its answer stands, held 0); DLOCK_RANGE if 'add' would
-- leave the size outside [1, 2^31-1] (only the request's key is written).
local seen = ARGV[1] ~= 'get' and redis.call('GET', KEYS[4])
local function refuse(err) -- (a change's refusal is its answer too)
  if ARGV[1] ~= 'get' then redis.call('SET', KEYS[4], '!' .. err, 'PX', ARGV[6]) end
  return redis.error_reply(err)
end
if seen and string.sub(seen, 1, 1) == '!' then return refuse(string.sub(seen, 2)) end
local held = redis.pcall('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
local foreign = type(held) ~= 'number' or not same_kind(KEYS[1], '') -- ('': a semaphore's member)
if foreign and not seen then return refuse('WRONGTYPE dlock: the key holds a value of another kind') end
local stored = tonumber(redis.call('GET', KEYS[2]) or '')
local size, changed = stored or tonumber(ARGV[3]), 0
if seen then
  size, changed = tonumber(string.match(seen, '^%d+')), tonumber(string.match(seen, '%d$'))
elseif ARGV[1] == 'set' and not stored then
  size, changed = tonumber(ARGV[2]), 1
  redis.call('SET', KEYS[2], string.format('%d', size))
elseif ARGV[1] == 'add' then
  size, changed = size + tonumber(ARGV[2]), 1
  if size < 1 or size > 2147483647 then
    return refuse(string.format('DLOCK_RANGE the size would be %d, outside 1 to 2147483647', size))
  end
  redis.call('SET', KEYS[2], string.format('%d', size))
elseif ARGV[1] == 'unset' and stored then
  size, changed = tonumber(ARGV[3]), 1
  redis.call('DEL', KEYS[2])
end
if ARGV[1] ~= 'get' then redis.call('SET', KEYS[4], string.format('%d %d', size, changed), 'PX', ARGV[6]) end
if changed == 1 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call(ARGV[5], ARGV[4], '*')
end
return {size, foreign and 0 or held, changed}
