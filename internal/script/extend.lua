-- extend.lua: reset the expiry of a lock we still own to ttl from now
-- (shorter or longer than before), unless a newer extension was applied.
-- KEYS[1] lock key
-- ARGV[1] the lease's token   ARGV[2] ttl in ms   ARGV[3] the extension's sequence number
-- Returns 1 if the lease is ours (extended now, or already by a newer
-- extension), 0 if it is not (expired, released, or another lease's).
-- The sequence number is kept in the lock's value ("<token> e<n>", see
-- lib.lua); the value and the expiry are set by one SET.
local v = redis.call('GET', KEYS[1])
if not owns(v, ARGV[1]) then
  return 0
end
local last = tonumber(string.match(v, ' e(%d+)') or '0')
if last >= tonumber(ARGV[3]) then
  return 1
end
redis.call('SET', KEYS[1], ARGV[1] .. ' e' .. ARGV[3] .. history(v), 'PX', ARGV[2])
return 1
