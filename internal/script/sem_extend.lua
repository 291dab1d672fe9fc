-- sem_extend.lua: reset a permit of a semaphore that we still hold to ttl
-- from now (shorter or longer than before), unless a newer extension was
-- applied; the key lasts until the latest permit's deadline.
-- KEYS[1] the semaphore   KEYS[2] the permit's marker key (see lib.lua)
-- ARGV[1] the permit's token   ARGV[2] ttl in ms
-- ARGV[3] 0 for an extension that never shortens the permit (ZADD GT),
--         else the extension's sequence number (see extend.lua)
-- Returns 1 if the permit is ours (extended now, or already by a newer
-- extension), 0 if it is gone (released, expired, or the key is not a
-- semaphore).
local now = now_ms()
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(score) ~= 'string' or tonumber(score) <= now then
  return 0 -- gone, or the key is not a semaphore or read-write lock
end
local until_ms = now + tonumber(ARGV[2])
if ARGV[3] == '0' then
  if until_ms <= tonumber(score) then
    return 1
  end
  redis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[1])
  redis.call('PEXPIREAT', KEYS[1], until_ms, 'GT')
  return 1
end
if superseded(KEYS[2], ARGV[3], ARGV[2]) then
  return 1
end
redis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[1])
expire_with_last(KEYS[1])
return 1
