-- type_zset.lua: the key of a semaphore or a read-write lock, a sorted set of
-- its holds scored by their deadlines (see lib.lua, and types.lua for the
-- functions).
types.zset = {}

function types.zset.inspect(key) return '', redis.call('ZRANGE', key, 0, -1, 'WITHSCORES') end

-- A semaphore's holding is its live permits, as a set: seen names as many
-- tokens as there are live holds (a hold of several permits at once is its
-- token and "<token> 2", ...: one hold), each of them a live hold's.
function types.zset.holding(key, seen)
  local live, n = {}, 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. now_ms(), '+inf')) do
    if not string.find(m, ' ', 1, true) then live[m], n = true, n + 1 end
  end
  for token in string.gmatch(seen, '%S+') do
    if not live[token] then return false end -- (not a live permit: another holding)
    n = n - 1
  end
  return n == 0 and next(live) ~= nil and seen -- (every live permit, and one at least)
end

-- id is a live member (see hold_member).
function types.zset.holds(key, id, marker)
  local score = redis.pcall('ZSCORE', key, hold_member(key, id))
  return type(score) == 'string' and tonumber(score) > now_ms(), marker and redis.call('GET', marker)
end

function types.zset.current(_, fence) return clock_passed(fence) end

-- The holding names every lease: the caller read them all (KEYS[2...]).
function types.zset.forced() end
