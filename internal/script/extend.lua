-- extend.lua: push out the expiry of a lock we still own to ttl from now.
-- KEYS[1] lock key   KEYS[2] the lease's own key (see lib.lua)
-- KEYS[3] (a leadership campaign's lease only) the fence counter, which
--         then lives at least as long as the lease: it names the leader's term
-- KEYS[4] (a campaign's only) the leader's value key (proclaim.lua), which
--         lives as long as the lease too
-- ARGV[1] owner token   ARGV[2] ttl in ms
-- ARGV[3] 0 for an extension that never shortens the lease (PEXPIRE GT:
--         copies applied in any order leave the latest deadline), else the
--         extension's sequence number: the expiry is set to ttl from now,
--         shorter or longer, unless an extension with a number at least as
--         high was applied already (a late copy must not undo a newer one).
-- Returns 1 if the lease is ours (extended now, or already by a newer
-- extension), 0 if the key is missing or owned by someone else.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[3] == '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
elseif not superseded(KEYS[2], ARGV[3], ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return 1
end
if KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], ARGV[2], 'GT')
end
if KEYS[4] then
  redis.call('PEXPIRE', KEYS[4], ARGV[2], 'GT')
end
return 1
