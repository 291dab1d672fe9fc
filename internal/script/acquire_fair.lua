-- acquire_fair.lua: take a lock in arrival order (fair mode).
-- KEYS[1] lock key   KEYS[2] queue (list of waiter tokens)
-- KEYS[3] waiters (hash: token -> "deadline_ms:ttl_ms")
-- KEYS[4] the lease's marker key (see lib.lua)
-- ARGV[1] the lease's token   ARGV[2] ttl in ms   ARGV[3] 1 to queue up if taken, 0 to try only
-- ARGV[4] how long a queue entry lives without being renewed, in ms   ARGV[5] release channel
-- ARGV[6] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- Returns 0 when the lock is ours (taken now, handed to us by a release,
-- or already ours), else -2 - pttl (< 0; -1: no expiry), as one integer
-- rather than a pair. The lock goes to the caller only if no live waiter is
-- ahead of it; a try never queues and never jumps the queue. A free lock
-- with live waiters (its holder expired without releasing) is handed to the
-- first of them. A handover is announced on the channel as "<token>".
-- Errors: REVOKED if this lease was already ended (nothing is written, no
-- queue entry made); WRONGTYPE if a key holds a foreign value.
local token = ARGV[1]
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) ~= 126 and owns(v, token) then
  -- Handed over earlier, or a re-sent request: the caller counts its
  -- validity from when it sent this one, so the lease must last ttl from
  -- now; it is never shortened (GT).
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  return 0
end
if ended(v, token, KEYS[4]) then
  return revoked_reply()
end
if not v or string.byte(v, 1) == 126 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  local now
  while head do -- drop waiters that died or gave up without saying so
    now = now or now_ms()
    local deadline = string.match(redis.call('HGET', KEYS[3], head) or '', '^(%d+):')
    if deadline and tonumber(deadline) > now then
      break
    end
    redis.call('LPOP', KEYS[2])
    redis.call('HDEL', KEYS[3], head)
    head = redis.call('LINDEX', KEYS[2], 0)
  end
  if not head or head == token then -- nobody queued (the common case), or we are first
    if head then
      redis.call('LPOP', KEYS[2])
      redis.call('HDEL', KEYS[3], token)
    end
    redis.call('SET', KEYS[1], token .. history(v), 'PX', ARGV[2])
    return 0
  end
  -- Hand it to the first live waiter: its value is its token alone (see
  -- lib.lua).
  local ttl = string.match(redis.call('HGET', KEYS[3], head), ':(%d+)$')
  redis.call('LPOP', KEYS[2])
  redis.call('HDEL', KEYS[3], head)
  redis.call('SET', KEYS[1], head, 'PX', ttl)
  redis.call(ARGV[6], ARGV[5], head)
end
if ARGV[3] == '1' then
  local entry = string.format('%d', now_ms() + tonumber(ARGV[4])) .. ':' .. ARGV[2]
  if redis.call('HSET', KEYS[3], token, entry) == 1 then
    redis.call('RPUSH', KEYS[2], token)
  end
  -- The queue lives as long as its longest-lived entry: never shortened.
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[4]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[4])
    end
  end
end
return -2 - math.max(redis.call('PTTL', KEYS[1]), -1)
