-- lib_rw.lua: a read-write lock's own functions (see lib.lua and
-- lib_hold.lua). A function is defined after those it calls, here or in a
-- file read before this one (script.go, withLib).

-- rw_admits reports whether a hold of kind ('r' or 'w') may be granted now
-- at the read-write lock at key, whose expired holds were dropped: a write
-- when nothing is held, a read when no write is.
local function rw_admits(key, kind)
  local first = redis.call('ZRANGE', key, 0, 0)[1]
  return first == nil or (kind == 'r' and string.sub(first, 1, 1) == 'r')
end

-- rw_serve_queue serves a read-write lock's queue (see serve_holds): its
-- waiters' entries end in 'r' or 'w', and the head waiter gets its hold
-- when rw_admits says it may (a run of readers at once, or one writer).
-- It returns the waiter left at the head and how many it granted.
local function rw_serve_queue(k, now, me, a)
  return serve_holds(k, now, me, a, function(x, head)
    if x ~= 'r' and x ~= 'w' then return nil end
    return rw_admits(k[1], x) and x .. ':' .. head, 1
  end)
end
