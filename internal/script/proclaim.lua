-- proclaim.lua: change the value a leader shows (Election.Leader) without
-- a new term: its lease, token and fence stay.
-- KEYS[1] lock key   KEYS[2] the value key   KEYS[3] fence key
-- KEYS[4] the lease's marker key
-- ARGV[1] the leader's lease token   ARGV[2] the value
-- ARGV[3] release channel   ARGV[4] publish command: PUBLISH or SPUBLISH
-- ARGV[5] the asking Lock's resumer id ('' for the Lock that took the lease)
-- The value key holds "<token> <value>" (a token has no space) and lives as
-- long as the lease (extend.lua lengthens it with the lease): a reader
-- takes the value only while the token is the lock's. Observers are told
-- with "~", a message no waiter's token matches (see internal/pubsub).
-- Returns 1 if the lease holds the lock (the value is set), else 0, or -1
-- if another Lock resumed the lease (see drives in lib.lua).
local v = redis.call('MGET', KEYS[1], KEYS[4])
if v[1] ~= ARGV[1] then
  return 0
elseif not drives(v[2], ARGV[5]) then
  return -1
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 'PX', pttl)
else
  redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
end
redis.call(ARGV[4], ARGV[3], '~')
return 1
