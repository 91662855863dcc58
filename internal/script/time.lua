-- time.lua: the server's time, read on the master of a lock's slot.
--
-- KEYS[1] lock key  prefix{K} (not used; the command is routed by it)
--
-- Returns TIME's reply: the seconds and microseconds, as two decimal strings.
-- Status pipelines it with its reads of the lock's keys: a keyless TIME goes
-- to any master of a Cluster (go-redis picks a random slot), and a master
-- that does not serve the key, frozen or down, would then fail the read
-- although the key's own master answers. It writes nothing.
return redis.call('TIME')
