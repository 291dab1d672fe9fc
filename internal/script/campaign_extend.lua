-- campaign_extend.lua: extend a leader's lease as extend.lua does (its
-- arguments, reply and clock), and keep what names the leader's term alive
-- with it: the fence counter lives at least as long as the lease, and the
-- leader's value (proclaim.lua) ends with the lease, also one this shortens.
-- KEYS[1] lock key   KEYS[2] the lease's own key (see lib.lua)
-- KEYS[3] the fence counter   KEYS[4] the leader's value key
-- ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] 0, or the extension's
-- sequence number   ARGV[4] (optional) 1: the reply carries the server's
-- clock (see extend.lua)
local r, now = extend_lease(KEYS, ARGV)
if now then
  redis.call('PEXPIRE', KEYS[3], ARGV[2], 'GT')
  local value = {'PEXPIRE', KEYS[4], ARGV[2]}
  if ARGV[3] == '0' then value[4] = 'GT' end -- (as the lease: an unnumbered extension never shortens it)
  redis.call(unpack(value))
end
if ARGV[4] ~= '1' then return r end
local t = redis.call('TIME')
return {r, tonumber(t[1]) * 1000000 + tonumber(t[2])}
