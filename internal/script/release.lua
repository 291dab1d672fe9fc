-- release.lua: delete a lock we own, announce that it is free if someone
-- waits, and end the lease (or undo an attempt whose outcome is unknown).
-- KEYS[1] lock key   KEYS[2] the wake key, set by a waiter's attempt
-- (acquire.lua)   KEYS[3] the lease's marker key
-- ARGV[1] owner token
-- ARGV[2] publish command: SPUBLISH on a Redis Cluster, else PUBLISH
-- (absent: PUBLISH)
-- ARGV[3] (a marked lease's only) how long the marker lives, in ms
-- ARGV[4] (a resumed Lock's only) its resumer id (see drives in lib.lua)
-- A clean lease (every request of it answered on its one send, so none can
-- land after this: see Node.Release) passes no ARGV[3], and no marker is
-- written: the common path reads one MGET (the lock and the marker) and
-- writes one DEL, with the token the only argument (each argument costs
-- the server its own string, and its place in ARGV).
-- Returns 1 if it was ours and is now deleted (also, with a marker, for a
-- re-sent request whose first copy deleted it), 0 if it was missing or
-- someone else's, -1 if another Lock resumed the lease (nothing is done).
-- The release deletes the wake key with the lock, and is announced on the
-- lock's channel ("<lock key>:ch") only if the wake key existed: the DEL's
-- count tells, cheaper than a third key in the MGET.
local v = redis.call('MGET', KEYS[1], KEYS[3])
local n, by
if v[2] then n, by = string.match(v[2], '^e(%d+)%.(.+)$') end
if by and by ~= ARGV[4] and tonumber(n) >= (tonumber(string.match(ARGV[4] or '', '^(%d+):')) or -1) then
  return -1 -- not drives (lib.lua)
end
if v[1] == ARGV[1] then
  if ARGV[3] then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[3]) -- see revoke in lib.lua
  end
  if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then -- (the lock, and the wake key: a waiter listens)
    redis.call(ARGV[2] or 'PUBLISH', KEYS[1] .. ':ch', '*')
  end
  return 1
end
if not ARGV[3] then
  return 0
elseif v[2] == '1' then
  return 1
end
if v[2] ~= '0' then redis.call('SET', KEYS[3], '0', 'PX', ARGV[3]) end -- (see revoke in lib.lua)
return 0
