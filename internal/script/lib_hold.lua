-- lib_hold.lua: the functions of the holds in a sorted set, which semaphores
-- and read-write locks share (see lib.lua). A function is defined after
-- those it calls, here or in a file read before this one (script.go,
-- withLib).

-- hold_member returns the member of the sorted set at key that a hold's
-- member names: itself, or for a read-write hold whose downgrade has an
-- unknown outcome ("?:<token>") its read if the set has it, else its write.
local function hold_member(key, member)
  if string.sub(member, 1, 2) ~= '?:' then return member end
  local read = 'r:' .. string.sub(member, 3)
  if type(redis.pcall('ZSCORE', key, read)) == 'string' then return read end
  return 'w:' .. string.sub(member, 3)
end

-- expire_with_last makes the semaphore at key expire with its latest
-- permit (a key left without members is deleted by Redis).
local function expire_with_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', key, last)
  end
end

-- hold_call runs cmd (ZADD with its flags, ZREM or ZMSCORE) on the members
-- of a hold of w permits at key: its first member, then "<member> 2" to
-- "<member> w" (a token has no space), each with score if one is given. It
-- sends them 500 at a time, since unpack is bounded by Lua's stack (about
-- 8,000 values), and returns the sum of the replies (ZADD, ZREM) or, for
-- ZMSCORE, the scores in order (false for a missing member).
local function hold_call(key, member, w, score, cmd, ...)
  local sum, scores = 0, {}
  for from = 1, w, 500 do
    local args = {cmd, key, ...}
    for i = from, math.min(from + 499, w) do
      args[#args + 1] = score -- (nothing when score is nil)
      args[#args + 1] = i == 1 and member or (member .. ' ' .. i)
    end
    local r = redis.call(unpack(args))
    if type(r) == 'table' then
      for _, v in ipairs(r) do
        scores[#scores + 1] = v
      end
    else
      sum = sum + r
    end
  end
  return cmd == 'ZMSCORE' and scores or sum
end

-- serve_holds hands holds of the sorted set k[1] (a semaphore's permits,
-- a read-write lock's holds) to the live waiters at the head of its queue,
-- in arrival order, for as long as the head waiter may have one; waiters
-- whose entry lapsed are dropped. k are the keys {set, fence, queue,
-- waiters}, a the arguments {channel, publish command, fence window ms};
-- now is the server's clock. A waiter's entry is "deadline_ms:ttl_ms:x":
-- admit(x, head, granted) returns the member to add for the waiter head
-- and the permits it holds (granted were granted before it in this
-- call), false if it must wait, or nil if x is malformed (the entry is
-- dropped as if it had lapsed).
-- Each grant lasts the waiter's TTL, comes with a fence (none if the fence
-- key holds a foreign value) and is announced on the channel as
-- "<token> <fence>". It stops at the waiter me, left queued, and returns
-- the waiter left at the head (nil: nobody, me, or one that must wait) and
-- how many it granted.
local function serve_holds(k, now, me, a, admit)
  local granted = 0
  while true do
    local head = redis.call('LINDEX', k[3], 0)
    if not head or head == me then return head, granted end
    local deadline, ttl, x = string.match(redis.call('HGET', k[4], head) or '', '^(%d+):(%d+):(.+)$')
    if deadline and tonumber(deadline) > now then
      local member, w = admit(x, head, granted)
      if member == false then return head, granted end
      if member then
        hold_call(k[1], member, w, now + tonumber(ttl), 'ZADD')
        expire_with_last(k[1])
        granted = granted + w
        local fence = new_fence(k[2], a[3])
        redis.call(a[2], a[1], fence and head .. ' ' .. string.format('%d', fence) or head)
      end
    end
    redis.call('LPOP', k[3])
    redis.call('HDEL', k[4], head)
  end
end

-- serve_queue serves a semaphore's queue (see serve_holds): its waiters'
-- entries end in their N, and ":<w>" when they want w permits at once; a
-- waiter gets its w while that leaves no more than its own N held, or the
-- size stored in Redis if there is one (size, else nil): a waiter that
-- wants more than that size, or whose N is 0 while none is stored, is
-- dropped (its next attempt is refused). held is the number of live
-- permits; it returns the number held now and the waiter left at the head.
local function serve_queue(k, now, held, me, a, size)
  local head, granted = serve_holds(k, now, me, a, function(x, head, granted)
    local n, w = string.match(x, '^(%d+):?(%d*)$')
    n, w = size or tonumber(n), tonumber(w) or 1
    if not n or n == 0 or (size and w > size) then return nil end
    return held + granted + w <= n and head, w
  end)
  return held + granted, head
end

-- same_kind reports whether the sorted set at key, whose lapsed holds were
-- dropped, is of the kind of member (a read-write lock's members have ':'
-- second, a semaphore's never, '' stands for one): true when it is empty
-- or missing.
local function same_kind(key, member)
  local first = redis.call('ZRANGE', key, 0, 0)[1]
  return not first or (string.sub(first, 2, 2) == ':') == (string.sub(member, 2, 2) == ':')
end
