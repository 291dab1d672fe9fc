-- lib.lua: functions the scripts share. Each script is preceded by those it
-- calls, and only those (script.go, withLib); chunks are separated by blank
-- lines.
--
-- A plain lock is a string key holding its lease's token, with PX expiry.
-- Each lease has a key of its own, "<lock>:r:<token>" (its marker), that
-- records what happened to it, so that a request of it that arrives late
-- or twice does no harm:
--   "e<n>" while it is held: the sequence number of the latest extension
--          applied (an older one, delayed in the network, is ignored: it
--          must not cut short a lease a newer extension set);
--   "1"/"0" once it is ended (released, handed over, or the undo of an
--          attempt whose outcome is unknown): "1" when it held the lock
--          until then, "0" when not. An acquire of the lease still in
--          flight (delayed, or re-sent by the client after a lost reply) is
--          refused instead of taking the lock for nobody; a re-sent release
--          reports what the first copy did. The marker lives for the
--          revocation window, min(TTL, 1 min), whatever happens to the lock.
-- The fence counter ("<lock>:fence") is written only when a fence is asked
-- for (fence.lua) or a lock is handed to a fair waiter, and lives for the
-- fence window after that.
--
-- now_ms() is the server's clock in ms.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- new_fence(key, window_ms) returns the next fence for the counter at key
-- and stores it for window_ms: max(last + 1, server time in µs), so fences
-- keep rising even when the counter was lost (it expired, an empty restart,
-- a failover to a stale replica). The clock's value is written first and
-- corrected in the rare case that the counter was already ahead of it: two
-- commands on the common path. string.format('%d') keeps all digits
-- (tostring would round to 14). It returns nil, writing nothing, when key
-- holds a value of another type.
local function new_fence(key, window_ms)
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.pcall('SET', key, string.format('%d', fence), 'PX', window_ms, 'GET')
  if type(last) == 'table' then
    return nil
  end
  last = tonumber(last or '0')
  if last and last >= fence then
    fence = last + 1
    redis.call('SET', key, string.format('%d', fence), 'PX', window_ms)
  end
  return fence
end

local function revoked_reply()
  return redis.error_reply('REVOKED dlock: this lease was already ended')
end

local function fence_type_reply()
  return redis.error_reply('WRONGTYPE dlock: the fence key holds a value of another type')
end

-- holds reports whether id holds the lock at key: the lease's token of a
-- plain lock, or a reentrant lock's owner id.
local function holds(key, id)
  if redis.call('TYPE', key)['ok'] == 'hash' then
    return redis.call('HGET', key, 'owner') == id
  end
  return redis.call('GET', key) == id
end

-- take_free takes the lock at key for token if it is free (SET NX GET, one
-- command): it returns true, or false and the holder's token when the lock
-- is taken.
local function take_free(key, token, ttl)
  local holder = redis.call('SET', key, token, 'NX', 'PX', ttl, 'GET')
  if holder then
    return false, holder
  end
  return true
end

-- extend_queue makes the fair queue's keys live at least ms from now (never
-- shorter: a waiter with a short TTL must not cut short the entry of one
-- with a longer TTL).
local function extend_queue(queue, waiters, ms)
  for _, key in ipairs({queue, waiters}) do
    if redis.call('PTTL', key) < tonumber(ms) then
      redis.call('PEXPIRE', key, ms)
    end
  end
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

-- revoke marks a lease (or a reentrant hold) ended: held is '1' if it held
-- the lock until now.
local function revoke(key, held, window_ms)
  redis.call('SET', key, held, 'PX', window_ms)
end

-- revoked reports whether the lease (or hold) of the marker key was ended.
local function revoked(key)
  local r = redis.call('GET', key)
  return r == '0' or r == '1'
end

-- superseded reports whether an extension with sequence number seq comes
-- too late: one with a number at least as high was applied already.
-- Otherwise it records seq in the marker key, for ttl_ms (the lease's life).
local function superseded(key, seq, ttl_ms)
  local last = tonumber(string.sub(redis.call('GET', key) or '', 2))
  if last and last >= tonumber(seq) then
    return true
  end
  redis.call('SET', key, 'e' .. seq, 'PX', ttl_ms)
  return false
end
