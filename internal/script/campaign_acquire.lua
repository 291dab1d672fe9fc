-- campaign_acquire.lua: take a leadership campaign's lock (election.go):
-- a fair lock (acquire_fair.lua, whose keys and arguments it takes) whose
-- lease is fenced as it takes the lock, so that the fence counter always
-- names the current leader's term.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] waiters
-- KEYS[5] the lease's marker key   KEYS[6] the wake key
-- ARGV[1] the lease's token   ARGV[2] ttl in ms
-- ARGV[3] "<qttl> <publish> <fence_ms>" (see acquire_fair.lua)
-- ARGV[4] (a waiter's only) 1: queue up if taken (absent: a try)
-- Returns the fence (> 0) when the lock is ours: for a lease that already
-- held it, the counter's value (0 if it is gone), whose life a renewal
-- makes at least the lease's. A lock taken rather than handed over is
-- announced on the channel as "<token> <fence>", as a handover is, for
-- those who watch the leadership. Else {pttl, holder}, as acquire_fair.lua.
-- Errors: as acquire_fair.lua's.
local r, how = take_queued(KEYS, ARGV, redis.call('EXISTS', KEYS[5], KEYS[3]) == 0)
if r then
  return r
elseif how == 'taken' then
  local pub, fence_ms = string.match(ARGV[3], '^%d+ (%S+) (%d+)')
  return fenced(KEYS, ARGV[1], ARGV[2], pub, fence_ms) or fence_type_reply()
elseif how == 'kept' then
  redis.call('PEXPIRE', KEYS[2], ARGV[2], 'GT')
end
return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
