-- lib_reentrant.lua: a reentrant lock's functions (see lib.lua). A function
-- is defined after those it calls, here or in a file read before this one
-- (script.go, withLib).

-- live_holds(key, now, expire) drops the holds of the reentrant lock at
-- key whose deadline has passed and returns how many are left. With expire,
-- the key is set to expire with the latest deadline among them (ms, server
-- clock), if any is left: it must outlive that deadline and need not
-- outlive it, each hold being a lease of its own.
local function live_holds(key, now, expire)
  local all = redis.call('HGETALL', key)
  local n, last = 0, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'h:' then
      local d = tonumber(all[i + 1]) or 0
      if d > now then
        n, last = n + 1, math.max(last, d)
      else
        redis.call('HDEL', key, all[i])
      end
    end
  end
  if expire and n > 0 then
    redis.call('PEXPIRE', key, last - now)
  end
  return n
end
