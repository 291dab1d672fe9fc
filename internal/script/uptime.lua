-- uptime.lua: how long the server that keeps a lock has been running.
-- KEYS[1] the lock key (not read: it routes the call to the lock's server
--         on a Redis Cluster)
-- Returns the server's uptime in whole seconds (INFO's uptime_in_seconds).
-- A release whose reply was lost asks it when it finds a clean lease gone
-- (see Node.release): a server restarted since the lease began may have
-- forgotten the lease before the release arrived.
local info = redis.call('INFO', 'server')
return tonumber(string.match(info, 'uptime_in_seconds:(%d+)')) or 0
