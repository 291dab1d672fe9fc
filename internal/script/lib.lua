-- lib.lua: the prelude prepended to every script that writes a lock.
--
-- now_ms() is the server's clock in ms.
--
-- new_fence(key) returns the next fence for the counter at key and stores
-- it: max(last + 1, server time in µs), so fences keep rising even when the
-- counter was lost (an empty restart, a failover to a stale replica). The
-- clock's value is written first and corrected in the rare case that the
-- counter was already ahead of it: two commands on the common path.
-- string.format('%d') keeps all digits (tostring would round to 14). It
-- returns nil, writing nothing, when key holds a value of another type, so
-- that the caller can undo what it wrote before (Lua does not roll back).
--
-- Revocation markers: ending a lease (release, or the undo of an attempt
-- whose outcome is unknown) leaves a marker at the lease's revocation key,
-- "1" when the lease was ours until then and "0" when it was not, living
-- for the lease time. A request of that lease still in flight in the
-- network (delayed, or re-sent by the client after a lost reply) finds the
-- marker and is refused instead of taking the lock for nobody; a re-sent
-- release finds "1" and reports what the first one did.
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

-- revoke marks a lease ended: held is '1' if it was ours until now.
local function revoke(key, held, window_ms)
  redis.call('SET', key, held, 'PX', window_ms)
end

-- live_holds(key, now) drops the holds of the reentrant lock at key whose
-- deadline has passed and returns how many are left and the latest
-- deadline among them (ms, server clock). The key must outlive that
-- deadline and need not outlive it: each hold is a lease of its own.
local function live_holds(key, now)
  local all = redis.call('HGETALL', key)
  local n, last = 0, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'h:' then
      local d = tonumber(all[i + 1]) or 0
      if d > now then
        n = n + 1
        if d > last then last = d end
      else
        redis.call('HDEL', key, all[i])
      end
    end
  end
  return n, last
end
