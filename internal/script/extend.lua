-- extend.lua: push out the expiry of a lock we still own to ttl from now.
-- KEYS[1] lock key   KEYS[2] the lease's own key (see lib.lua)
-- ARGV[1] owner token   ARGV[2] ttl in ms
-- ARGV[3] 0 for an extension that never shortens the lease (PEXPIRE GT:
--         copies applied in any order leave the latest deadline), else the
--         extension's sequence number: the expiry is set to ttl from now,
--         shorter or longer, unless an extension with a number at least as
--         high was applied already (a late copy must not undo a newer one).
--         A Lock numbers every extension after its first numbered one, so
--         an unnumbered request that finds one applied is a late copy.
-- ARGV[4] (optional) 1: the reply carries the server's clock that keys
--         expire by (TIME, in µs): {reply, µs} instead of the reply.
-- Returns 1 if the lease is ours (extended now, or by this request's
-- earlier copy), 0 if the key is missing or owned by someone else, 2 if the
-- lease is ours but a newer extension was applied (see superseded in
-- lib.lua): this request changed nothing.
local r = extend_lease(KEYS, ARGV)
if ARGV[4] ~= '1' then return r end
local t = redis.call('TIME')
return {r, tonumber(t[1]) * 1000000 + tonumber(t[2])}
