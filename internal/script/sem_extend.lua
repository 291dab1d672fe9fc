-- sem_extend.lua: reset a permit of a semaphore that we still hold to ttl
-- from now (shorter or longer than before), unless a newer extension was
-- applied; the key lasts until the latest permit's deadline.
-- KEYS[1] the semaphore   KEYS[2] the permit's marker key (see lib.lua)
-- ARGV[1] the permit's token   ARGV[2] ttl in ms
-- ARGV[3] the extension's sequence number
-- Returns 1 if the permit is ours (extended now, or already by a newer
-- extension), 0 if it is gone (released, expired, or the key is not a
-- semaphore).
if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then
  return 0
end
local now = now_ms()
if (tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) or 0) <= now then
  return 0
end
if superseded(KEYS[2], ARGV[3], ARGV[2]) then
  return 1
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_with_last(KEYS[1])
return 1
