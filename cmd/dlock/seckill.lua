-- seckill.lua: sell one item to a user, atomically, without any lock.
-- KEYS[1] stock counter   KEYS[2] set of buyers
-- ARGV[1] user id
-- Returns 1 if sold, 0 if sold out, 2 if this user already bought one.
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock <= 0 then
  return 0
end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
