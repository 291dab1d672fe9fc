-- announce.lua: publish a message on a lock's channel, routed as the lock's
-- scripts are (a Cluster's SPUBLISH must run on the slot's shard).
-- KEYS[1] lock key (the channel shares its hash tag)
-- ARGV[1] channel   ARGV[2] PUBLISH or SPUBLISH   ARGV[3] the message
-- Returns how many subscribers received it.
return redis.call(ARGV[2], ARGV[1], ARGV[3])
