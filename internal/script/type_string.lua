-- type_string.lua: the key of a plain lock (a fair lock's, a leader's term),
-- a string holding its lease's token (see lib.lua, and types.lua for the
-- functions).
types.string = {
  inspect = function(key) return redis.call('GET', key), {} end,
  holding = function(key) return redis.call('GET', key) end,
  holds = function(key, id, marker) -- (one read: MGET, which reads nil for a key of another type)
    local v = redis.call('MGET', key, marker or key) -- (no marker: key twice)
    return v[1] == id, v[2]
  end,
  current = function(_, fence) return clock_passed(fence) end,
}
