-- type_string.lua: the key of a plain lock (a fair lock's, a leader's term),
-- a string holding its lease's token (see lib.lua, and types.lua for the
-- functions).
types.string = {}

function types.string.inspect(key) return redis.call('GET', key), {} end

function types.string.holding(key) return redis.call('GET', key) end

-- (one read: MGET, which reads nil for a key of another type; no marker: key twice)
function types.string.holds(key, id, marker)
  local v = redis.call('MGET', key, marker or key)
  return v[1] == id, v[2]
end

function types.string.current(_, fence) return clock_passed(fence) end

-- The holding names every lease: the caller read them all (KEYS[2...]).
function types.string.forced() end
