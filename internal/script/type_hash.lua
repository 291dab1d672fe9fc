-- type_hash.lua: the key of a reentrant lock, a hash with its owner's id,
-- the owner's first fence and its holds' deadlines (see acquire_reentrant.lua,
-- and types.lua for the functions).
types.hash = {}

function types.hash.inspect(key) return '', redis.call('HGETALL', key) end

-- "<owner> <fence>"; a hash without an owner is no dlock lock.
function types.hash.holding(key)
  local h = redis.call('HMGET', key, 'owner', 'fence')
  if h[1] then return h[1] .. ' ' .. (h[2] or '') end
end

function types.hash.holds(key, id, marker)
  return redis.pcall('HGET', key, 'owner') == id, marker and redis.call('GET', marker)
end

-- The owner's id outlives a lease: its first hold's fence stays current.
function types.hash.current(key, fence) return redis.call('HGET', key, 'fence') == fence end

-- The holding names the owner, not its holds: those it took since the
-- force's caller read them are marked here.
function types.hash.forced(key, ms)
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local m = key .. ':r:' .. string.sub(f, 3)
    if string.sub(f, 1, 2) == 'h:' and redis.call('GET', m) ~= '0' then redis.call('SET', m, '0', 'PX', ms) end
  end
end
