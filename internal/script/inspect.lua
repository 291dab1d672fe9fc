-- inspect.lua: read a lock's state without changing it.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] the queue (list of waiter tokens)
-- KEYS[4] the waiters (hash: token -> "deadline_ms:ttl_ms[:x]", see lib.lua)
-- KEYS[5] a leader's value key (see proclaim.lua)
-- Returns {type, holder, pttl, fence, owners, now, queued, value}: value is
-- KEYS[5]'s, '' if none; type is the lock key's Redis
-- type ('none' when free), holder the token of a plain lock ('' for other
-- types), pttl the remaining ms (-2 missing, -1 no expiry), fence the
-- last fence issued within the fence window (0 if none), owners a reentrant lock's flat list of
-- hash fields and values, or a semaphore's flat list of permit tokens and
-- deadlines, soonest first (empty for other types), now the server's clock
-- in ms (a reentrant hold's and a permit's deadline are on it), queued the
-- number of live waiters in the queue: those whose entry's deadline is
-- ahead of now (a waiter that died counts until its entry lapses, not
-- until someone serving the queue drops it; 0 if a queue key holds a value
-- of another type); fence is 0 too if the fence key holds one.
-- Errors: none of its own.
local kind = redis.call('TYPE', KEYS[1])['ok']
local holder, owners = '', {}
if types[kind] then holder, owners = types[kind].inspect(KEYS[1]) end -- (see types.lua)
local f = redis.pcall('GET', KEYS[2]) -- (a fence key of another type reads 0)
local fence = type(f) == 'string' and tonumber(f) or 0
local now = now_ms()
local queued = 0
local waiting = redis.pcall('LRANGE', KEYS[3], 0, -1) -- (an error is a table of length 0: none)
for i = 1, #waiting, 1000 do -- HMGET in batches: unpack is bounded by Lua's stack
  local entries = redis.pcall('HMGET', KEYS[4], unpack(waiting, i, math.min(i + 999, #waiting)))
  if type(entries) ~= 'table' or entries.err then break end
  for j = 1, #entries do
    local deadline = tonumber(string.match(entries[j] or '', '^(%d+):'))
    if deadline and deadline > now then
      queued = queued + 1
    end
  end
end
local v = redis.pcall('GET', KEYS[5]) -- (a value key of another type reads '')
local value = type(v) == 'string' and v or ''
return {kind, holder, redis.call('PTTL', KEYS[1]), fence, owners, now, queued, value}
