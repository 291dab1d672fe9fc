-- release_fair.lua: release a lock and hand it to the first live waiter, or
-- take a waiter that gives up out of the queue (fair mode).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters hash
-- ARGV[1] owner token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- A handover is announced on the channel as "<token> <fence>", a plain
-- release as "*".
-- Fences come from new_fence (fence.lua, prepended).
-- Returns 1 if the lock was ours (it is now handed over or deleted), 0 if it
-- was not (a waiter's queue entry, if any, is removed).
local token = ARGV[1]
if redis.call('GET', KEYS[1]) ~= token then
  if redis.call('HDEL', KEYS[4], token) == 1 then
    redis.call('LREM', KEYS[3], 1, token)
  end
  return 0
end
local now
while true do
  local head = redis.call('LPOP', KEYS[3])
  if not head then
    redis.call('DEL', KEYS[1])
    redis.call(ARGV[3], ARGV[2], '*')
    return 1
  end
  if not now then -- the clock is read only when someone waits
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local entry = redis.call('HGET', KEYS[4], head)
  redis.call('HDEL', KEYS[4], head)
  local deadline, ttl = string.match(entry or '', '^(%d+):(%d+)$')
  if deadline and tonumber(deadline) > now then
    redis.call('SET', KEYS[1], head, 'PX', ttl)
    redis.call(ARGV[3], ARGV[2], head .. ' ' .. string.format('%d', new_fence(KEYS[2])))
    return 1
  end
end
