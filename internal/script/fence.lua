-- fence.lua: prepended to every script that issues fences.
-- new_fence(key) returns the next fence for the counter at key and stores it:
-- max(last + 1, server time in µs), so fences keep rising even when the
-- counter was lost (an empty restart, a failover to a stale replica).
-- The clock's value is written first and corrected in the rare case that the
-- counter was already ahead of it: two commands on the common path.
-- string.format('%d') keeps all digits (tostring would round to 14).
local function new_fence(key)
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('SET', key, string.format('%d', fence), 'GET') or '0')
  if last and last >= fence then
    fence = last + 1
    redis.call('SET', key, string.format('%d', fence))
  end
  return fence
end
