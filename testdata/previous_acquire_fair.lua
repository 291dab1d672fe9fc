-- previous_acquire_fair.lua: the previous version's acquire_fair.lua with
-- the lib.lua functions it calls, as that version sent it: a fair client
-- of the previous version, for the rolling-upgrade tests (model_test.go).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters
-- KEYS[5] the lease's revocation key
-- ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] 1 to queue up, 0 to try
-- ARGV[4] queue entry life in ms   ARGV[5] release channel   ARGV[6] PUBLISH or SPUBLISH
-- Returns the fence (>= 0) when the lock is ours, else -2 - pttl.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function new_fence(key)
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.pcall('SET', key, string.format('%d', fence), 'GET')
  if type(last) == 'table' then
    return nil
  end
  last = tonumber(last or '0')
  if last and last >= fence then
    fence = last + 1
    redis.call('SET', key, string.format('%d', fence))
  end
  return fence
end

local function revoked_reply()
  return redis.error_reply('REVOKED dlock: this lease was already ended')
end

local function fence_type_reply()
  return redis.error_reply('WRONGTYPE dlock: the fence key holds a value of another type')
end

local function revoked(key)
  local r = redis.call('GET', key)
  return r == '0' or r == '1'
end

local function take_free(key, fence_key, token, ttl)
  local holder = redis.call('SET', key, token, 'NX', 'PX', ttl, 'GET')
  if holder then
    return false, holder
  end
  local fence = new_fence(fence_key)
  if not fence then
    redis.call('DEL', key)
    return fence_type_reply()
  end
  return fence
end

if revoked(KEYS[5]) then
  return revoked_reply()
end
local token = ARGV[1]
local holder
if not redis.call('LINDEX', KEYS[3], 0) then
  local taken
  taken, holder = take_free(KEYS[1], KEYS[2], token, ARGV[2])
  if taken then
    return taken
  end
else
  holder = redis.call('GET', KEYS[1])
end
if holder == token then
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
if not holder then
  local now
  local head
  while true do
    head = redis.call('LINDEX', KEYS[3], 0)
    if not head then break end
    now = now or now_ms()
    local entry = redis.call('HGET', KEYS[4], head)
    local deadline, ttl = string.match(entry or '', '^(%d+):(%d+)$')
    if deadline and tonumber(deadline) > now then
      if head ~= token then
        local fence = new_fence(KEYS[2])
        if not fence then return fence_type_reply() end
        redis.call('LPOP', KEYS[3])
        redis.call('HDEL', KEYS[4], head)
        redis.call('SET', KEYS[1], head, 'PX', ttl)
        redis.call(ARGV[6], ARGV[5], head .. ' ' .. string.format('%d', fence))
      end
      break
    end
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], head)
  end
  if not head or head == token then
    local fence = new_fence(KEYS[2])
    if not fence then return fence_type_reply() end
    if head then
      redis.call('LPOP', KEYS[3])
      redis.call('HDEL', KEYS[4], token)
    end
    redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
    return fence
  end
end
if ARGV[3] == '1' then
  local entry = string.format('%d', now_ms() + tonumber(ARGV[4])) .. ':' .. ARGV[2]
  if redis.call('HSET', KEYS[4], token, entry) == 1 then
    redis.call('RPUSH', KEYS[3], token)
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
end
return -2 - math.max(redis.call('PTTL', KEYS[1]), -1)
