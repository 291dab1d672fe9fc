-- acquire.lua: take a lock that is free, or confirm one we already hold.
-- KEYS[1] lock key   KEYS[2] the lease's marker key (see lib.lua)
-- KEYS[3] (only from a caller that waits for a release when the lock is
--         taken) the wake key: exists while a waiter listens (release.lua)
-- ARGV[1] the lease's token   ARGV[2] ttl in ms
-- Returns 0 when the lock is ours: taken now, or already ours (a re-sent
-- request). Returns {pttl, holder} when another lease holds it: its
-- remaining ms (-1 if the key has no expiry) and its token, which carries
-- the holder's metadata; the common, uncontended reply stays one integer.
-- A caller that waits sets the wake key for the holder's remaining lease,
-- at most a minute (WakeWindow in internal/backend, as a marker at most:
-- behind a long lease it does not outlive the release by hours; an unfair
-- waiter sleeps no longer before it sets the key again), unless it already
-- lives longer (a waiter with a longer lease set it), so that the release
-- announces itself. The minute is written here, not sent: an argument
-- costs every call, and only a refused one reads it.
-- Errors: REVOKED if this lease was already ended (the request arrived after
-- its caller gave up, or after a re-sent copy's lease was released);
-- WRONGTYPE if the key holds a foreign value.
-- SET NX GET (Redis 7.0+) takes a free lock and names the holder of a taken
-- one in a single command. When the lock is already ours (a re-sent request),
-- the expiry is pushed out to ttl from now if it is sooner (PEXPIRE GT:
-- never shortened, so a late copy cannot cut short a lease an extension
-- lengthened): the caller counts its validity from when it sent this request;
-- but not once a numbered extension was applied (see extend.lua): the
-- request is then a late copy, and the lease may have been shortened since.
local mark = redis.call('GET', KEYS[2])
if mark ~= '0' and mark ~= '1' then -- not ended (see revoked in lib.lua)
  local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if not holder then return 0 end
  if holder == ARGV[1] then
    if not mark then -- (a numbered extension's mark: it may have shortened the lease, which this copy must not undo)
      redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
    end
    return 0
  end
  local pttl = math.max(redis.call('PTTL', KEYS[1]), -1)
  if KEYS[3] then -- (lengthened, never shortened: another waiter's may live longer)
    -- (PTTL 0: the holder's lease ends within this ms; no key to set)
    local px = pttl < 0 and 60000 or math.min(pttl, 60000) -- (WakeWindow)
    if px > 0 and redis.call('PTTL', KEYS[3]) < px then
      redis.call('SET', KEYS[3], '1', 'PX', px)
    end
  end
  return {pttl, holder}
end
-- (the shared functions are defined here)
return revoked_reply()
