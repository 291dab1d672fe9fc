-- proclaim.lua: change the value a leader shows (Election.Leader) without
-- a new term: its lease, token and fence stay.
-- KEYS[1] lock key   KEYS[2] the value key   KEYS[3] fence key
-- KEYS[4] the lease's marker key
-- ARGV[1] the leader's lease token   ARGV[2] the value
-- ARGV[3] release channel   ARGV[4] publish command: PUBLISH or SPUBLISH
-- ARGV[5] the asking Lock's resumer id ('' for the Lock that took the lease)
-- ARGV[6] the Proclaim's sequence number, seq: "<n>", or from a resumed
--         Lock "<n>.<resumer id>"; each Proclaim of a Lock numbers above
--         its earlier ones
-- The value key holds "<token>{<seq>} <value>" (a token has no space nor
-- brace), and lives as long as the lease (campaign_extend.lua lengthens
-- it with the lease): a
-- reader takes the value only while the token is the lock's (it reads
-- "<token> <value>" too). A Proclaim that finds a higher number of its own
-- Lock stored is a late copy and changes nothing; a value of another Lock
-- of the token is older (only the Lock that drives the lease gets here).
-- Observers are told with "~", a message no waiter's token matches (see
-- internal/pubsub), also of a late copy: they re-read, and deliver only a
-- change.
-- Returns 1 if the lease holds the lock (the value is set), 2 if it does
-- but a later Proclaim of the Lock was applied (nothing changed), 0 if the
-- lease does not hold the lock, or -1 if another Lock resumed the lease
-- (see drives in lib.lua).
local v = redis.call('MGET', KEYS[1], KEYS[4], KEYS[2])
if v[1] ~= ARGV[1] then
  return 0
elseif not drives(v[2], ARGV[5]) then
  return -1
end
local mine = v[3] and string.sub(v[3], 1, #ARGV[1] + 1) == ARGV[1] .. '{' -- (the token's value: "<token>{...")
local n, id = string.match(mine and v[3] or '', '^(%d+)%.?([^} ]*)} ', #ARGV[1] + 2)
local late = n ~= nil and id == ARGV[5] and tonumber(n) > tonumber(string.match(ARGV[6], '^%d+'))
if not late then
  local set = {'SET', KEYS[2], ARGV[1] .. '{' .. ARGV[6] .. '} ' .. ARGV[2]}
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then set[4], set[5] = 'PX', pttl end -- (a lease without expiry: nor has its value)
  redis.call(unpack(set))
end
redis.call(ARGV[4], ARGV[3], '~')
return late and 2 or 1
