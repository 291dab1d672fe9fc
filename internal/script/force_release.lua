-- force_release.lua: delete a lock whoever holds it, as long as it is
-- still the holding the operator saw, and announce it free. For operators;
-- a holder learns of it at its next extension. Naming the holding makes a
-- re-sent copy harmless: it cannot delete the next holder's lock. A key
-- that is not a dlock lock is left alone.
-- KEYS[1] lock key
-- ARGV[1] the holding: a plain lock's token, a reentrant lock's
-- "<owner> <fence>", or a semaphore's live permits' tokens separated by
-- spaces, in any order   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH or SPUBLISH
-- KEYS[2...] the markers of the leases' tokens (see lib.lua), set ended
-- ('0') as a release sets them, for ARGV[4] ms beyond the lock key's TTL
-- (its longest lease's) or the marker's (a shortened lease's: see
-- superseded in lib.lua), if longer: a copy of a forced lease's request
-- still in flight, for as long as the lease could have lived, is refused,
-- and cannot give the lease back to a holder that would never learn of
-- the force.
-- Returns 1 if the lock was deleted, 0 if its holding is not ARGV[1] any
-- more, -1 if the lock is not there.
-- Errors: WRONGTYPE if the key holds something else.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return -1 end
local holding = types[kind] and types[kind].holding(KEYS[1], ARGV[1]) -- (see types.lua)
if holding == nil then return redis.error_reply('WRONGTYPE dlock: the lock key holds a ' .. kind .. ' that is not a dlock lock') end
if holding ~= ARGV[1] then return 0 end
local ms = math.max(redis.call('PTTL', KEYS[1]), 0) + ARGV[4]
for i = 2, #KEYS do -- (a lease released since the caller read it keeps its '1': a re-sent release reads it)
  if redis.call('GET', KEYS[i]) ~= '1' then redis.call('SET', KEYS[i], '0', 'PX', math.max(ms, redis.call('PTTL', KEYS[i]) + ARGV[4])) end
end
types[kind].forced(KEYS[1], ms) -- (a reentrant lock's holds taken since the caller read them)
redis.call('DEL', KEYS[1])
redis.call(ARGV[3], ARGV[2], '*')
return 1
