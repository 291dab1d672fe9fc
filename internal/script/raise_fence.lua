-- raise_fence.lua: make a node's fence counter at least a given value, so
-- that a later majority sees the fence a quorum lease was issued with.
-- KEYS[1] fence key
-- ARGV[1] fence
-- Returns the node's fence counter afterwards.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
