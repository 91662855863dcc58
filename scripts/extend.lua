-- extend.lua: reset the lock's TTL if the caller still owns it.
--
-- KEYS[1] lock key   prefix{K}
-- ARGV[1] token      the owner token
-- ARGV[2] ttl        new TTL in milliseconds, counted from now
--
-- Returns 1 if the lock held ARGV[1] and its TTL was set, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
