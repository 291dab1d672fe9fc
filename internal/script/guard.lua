-- guard.lua: write a value to a fenced resource unless the writer's fence is stale.
-- KEYS[1] resource key (a hash: v = value, fence = highest fence, token = its lock token)
-- ARGV[1] value   ARGV[2] writer's fence   ARGV[3] writer's lock token
-- Returns {1, fence} when written, {0, highest} when rejected: the fence is
-- lower than the highest accepted, or equal to it with another lock token.
local cur = redis.call('HMGET', KEYS[1], 'fence', 'token')
local high = tonumber(cur[1] or '0') or 0
local fence = tonumber(ARGV[2])
if fence < high or (fence == high and cur[2] and cur[2] ~= ARGV[3]) then return {0, high} end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'fence', ARGV[2], 'token', ARGV[3])
return {1, fence}
