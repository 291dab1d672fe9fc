-- lib.lua: functions the scripts share. Each script is preceded by those it
-- calls, and only those (script.go, withLib); chunks are separated by blank
-- lines.
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
-- The lease's own key ("<lock>:r:<token>") records what happened to the
-- lease, so that a request of it that arrives late or twice does no harm:
--   "e<n>" while it is held: the sequence number of the latest extension
--          applied (an older one, delayed in the network, is ignored: it
--          must not cut short a lease a newer extension set);
--   "1"/"0" once it is ended (released, or the undo of an attempt whose
--          outcome is unknown): "1" when it was ours until then, "0" when
--          not. An acquire of the lease still in flight (delayed, or
--          re-sent by the client after a lost reply) is refused instead of
--          taking the lock for nobody; a re-sent release reports what the
--          first copy did. The marker lives for the revocation window.

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

-- revoked reports whether the lease of the revocation key was ended.
local function revoked(key)
  local r = redis.call('GET', key)
  return r == '0' or r == '1'
end

-- superseded reports whether an extension with sequence number seq comes
-- too late: one with a number at least as high was applied already.
-- Otherwise it records seq, for ttl_ms (the lease's life).
local function superseded(key, seq, ttl_ms)
  local last = tonumber(string.sub(redis.call('GET', key) or '', 2))
  if last and last >= tonumber(seq) then
    return true
  end
  redis.call('SET', key, 'e' .. seq, 'PX', ttl_ms)
  return false
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

-- take_free takes the lock at key for token if it is free (SET NX GET, one
-- command) and issues its fence at fence_key. It returns the fence, or
-- false and the holder's token when the lock is taken; a fence key of a
-- foreign type gives an error reply and leaves nothing written.
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
