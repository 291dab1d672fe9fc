-- campaign_release.lua: end a leader's term, or a candidate's wait: a fair
-- lock's release (release_fair.lua, whose keys and arguments it takes)
-- that deletes the leader's value with the lease and announces a plain
-- release as "*" even with nobody queued: those who watch the leadership
-- listen on the channel.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters hash
-- KEYS[5] the lease's marker key   KEYS[6] the leader's value key (proclaim.lua)
-- ARGV[1] owner token   ARGV[2] "<publish> <fence_ms>"
-- ARGV[3] (a marked lease's only) how long the revocation marker lives, in ms
-- ARGV[4] (a resumed Lock's only) its resumer id (see drives in lib.lua)
-- Returns as release_fair.lua.
local v = redis.call('MGET', KEYS[1], KEYS[5])
-- (the shared functions are defined here)
if not drives(v[2], ARGV[4]) then
  return -1
elseif v[1] ~= ARGV[1] then
  return leave_queue(KEYS, ARGV, v[2])
elseif ARGV[3] then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[3]) -- ended, holding the lock
end
redis.call('DEL', KEYS[6])
return hand_over(KEYS, ARGV, redis.call('LPOP', KEYS[3]))
