-- release.lua: end a lease: free the lock if the lease holds it, leaving a
-- tombstone, and announce that it is free; otherwise mark the lease ended
-- (see lib.lua). Either way a request of the lease still in flight cannot
-- take the lock later. The undo of an attempt whose outcome is unknown is a
-- release too.
-- KEYS[1] lock key   KEYS[2] the lease's marker key
-- ARGV[1] the lease's token   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[4] how long the tombstone or marker lives (the revocation window), in ms
-- Returns 1 if the lease held the lock and it is now free (also for a
-- re-sent request whose first copy freed it), 0 if it did not hold it.
-- Errors: WRONGTYPE if the key holds a foreign value.
local v = redis.call('GET', KEYS[1])
if owns(v, ARGV[1]) then
  tombstone(KEYS[1], v, ARGV[1], ARGV[4])
  redis.call(ARGV[3], ARGV[2], '*')
  return 1
end
local e = ended(v, ARGV[1], KEYS[2])
if e then
  return e
end
mark(KEYS[2], '0', ARGV[4])
return 0
