-- lib.lua: functions the scripts share. Each script is preceded by those it
-- calls, and only those (script.go, withLib); chunks are separated by blank
-- lines.
--
-- A plain lock is one string key per name, in one of two states:
--   held:  "<token>", or "<token> <notes>" where the notes are
--          "e<n>"   the sequence number of the latest extension applied
--                   (an older one, delayed in the network, is ignored: it
--                   must not cut short a lease a newer one set), and
--          "+<t>"   the leases that released the lock before (the latest
--                   three), passed on from the tombstone;
--   free:  "~ +<t> ...", a tombstone with PX expiry (the revocation window)
--          naming the lease that released it and the ones before.
-- A lease named by a "+" entry ended by its release: a request of it that
-- arrives late (delayed, or re-sent by the client after a lost reply) is
-- refused instead of taking the lock for nobody, and a re-sent release
-- reports what the first copy did. A lease that ended any other way (the
-- undo of an attempt whose outcome is unknown, a release after the lease
-- was lost, a release that handed the lock to a waiter) leaves a marker of
-- its own, "<lock>:r:<token>", for the revocation window: "1" if it held
-- the lock until then, "0" if not. (A handed-over value is the waiter's
-- token alone, and no note is ever added to another lease's value, so that
-- a client of the previous version, which compares the whole value, reads
-- its own lease right.)
-- Tokens are 22 characters of base64url, so a token found in a value is
-- a whole one, and the character before it says what it is.
-- The fence counter ("<lock>:fence") is written only when a fence is asked
-- for (fence.lua), and lives for the fence window after that.
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

-- owns reports whether the lock value v is held by token.
local function owns(v, token)
  return v == token or (v and string.find(v, token, 1, true) == 1 and string.byte(v, #token + 1) == 32) or false
end

-- holds reports whether id holds the lock at key: the lease's token of a
-- plain lock, or a reentrant lock's owner id.
local function holds(key, id)
  if redis.call('TYPE', key)['ok'] == 'hash' then
    return redis.call('HGET', key, 'owner') == id
  end
  return owns(redis.call('GET', key), id)
end

-- released reports whether the value v names the lease token as one that
-- ended by its release (a "+" entry).
local function released(v, token)
  local i = string.find(v, token, 2, true)
  return i ~= nil and string.byte(v, i - 1) == 43
end

-- ended returns what is known of the end of the lease token, from the
-- lock's value v and the lease's marker key: 1 ended holding the lock (a
-- release), 0 ended without holding it, nil not ended.
local function ended(v, token, marker)
  if v and released(v, token) then
    return 1
  end
  local m = redis.call('GET', marker)
  if m then
    return tonumber(m)
  end
  return nil
end

-- history returns the "+" entries of the value v that the key's next value
-- keeps: all of a tombstone's (it holds no other notes), the latest two of a
-- held value's, each with its leading space; '' for none.
local function history(v)
  if not v then
    return ''
  end
  if string.byte(v, 1) == 126 then
    return string.sub(v, 2)
  end
  local i = string.find(v, ' +', 1, true)
  if not i then
    return ''
  end
  return string.sub(v, i, i + 47) -- two entries of 24 characters
end

-- tombstone ends the lease token that holds the lock at key (value v): the
-- lock is free, and names token and the two leases before it.
local function tombstone(key, v, token, window_ms)
  redis.call('SET', key, '~ +' .. token .. history(v), 'PX', window_ms)
end

-- mark ends the lease token that does not hold the lock (or hands it over):
-- its marker says whether it held it until now ('1') or not ('0').
local function mark(marker, held, window_ms)
  redis.call('SET', marker, held, 'PX', window_ms)
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

-- A reentrant hold's own key ("<lock>:r:<token>") records what happened to
-- it: "e<n>" while held (the latest extension's sequence number), "1"/"0"
-- once it is ended ("1" when it was a hold until then), for the revocation
-- window.

-- revoke marks a reentrant hold ended: held is '1' if it was one until now.
local function revoke(key, held, window_ms)
  redis.call('SET', key, held, 'PX', window_ms)
end

-- revoked reports whether the reentrant hold of the key was ended.
local function revoked(key)
  local r = redis.call('GET', key)
  return r == '0' or r == '1'
end

-- superseded reports whether an extension of a reentrant hold with sequence
-- number seq comes too late: one with a number at least as high was
-- applied already. Otherwise it records seq, for ttl_ms (the hold's life).
local function superseded(key, seq, ttl_ms)
  local last = tonumber(string.sub(redis.call('GET', key) or '', 2))
  if last and last >= tonumber(seq) then
    return true
  end
  redis.call('SET', key, 'e' .. seq, 'PX', ttl_ms)
  return false
end
