-- force_release.lua: delete a lock whoever holds it, as long as it is
-- still the holding the operator saw, and announce it free. For operators;
-- a holder learns of it at its next extension. Naming the holding makes a
-- re-sent copy harmless: it cannot delete the next holder's lock. A key
-- that is not a dlock lock is left alone.
-- KEYS[1] lock key
-- ARGV[1] the holding: a plain lock's token, a reentrant lock's
-- "<owner> <fence>", or a semaphore's live permits' tokens separated by
-- spaces, in any order   ARGV[2] release channel
-- ARGV[3] publish command: PUBLISH or SPUBLISH
-- Returns 1 if the lock was deleted, 0 if it was not there (any more).
-- Errors: WRONGTYPE if the key holds something else.
local kind = redis.call('TYPE', KEYS[1])['ok']
local holding
if kind == 'none' then
  return 0
elseif kind == 'string' then
  holding = redis.call('GET', KEYS[1])
elseif kind == 'hash' and redis.call('HEXISTS', KEYS[1], 'owner') == 1 then
  local h = redis.call('HMGET', KEYS[1], 'owner', 'fence')
  holding = h[1] .. ' ' .. (h[2] or '')
elseif kind == 'zset' then -- a semaphore: the same live permits, as a set
  -- ARGV[1] names as many tokens as there are live holds (a hold of
  -- several permits at once is its token and "<token> 2", ...: one hold),
  -- each of them a live hold's.
  local live, n = {}, 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms(), '+inf')) do
    if not string.find(m, ' ', 1, true) then
      live[m], n = true, n + 1
    end
  end
  for token in string.gmatch(ARGV[1], '%S+') do
    if not live[token] then return 0 end -- (not a live permit: another holding)
    n = n - 1
  end
  holding = n == 0 and next(live) and ARGV[1] -- (every live permit, and one at least)
else
  return redis.error_reply('WRONGTYPE dlock: the lock key holds a ' .. kind .. ' that is not a dlock lock')
end
if holding ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call(ARGV[3], ARGV[2], '*')
return 1
