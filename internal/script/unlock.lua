-- unlock.lua: release a plain lock (limit 1, no metadata) that holds the
-- owner's token when nobody waits for it: the everyday path. It is
-- release.lua's path for that shape, on the same data (see base.lua's
-- header for what each key holds), for a lock whose TTL is at most the
-- fence counter's retention: the counter, whose life every acquisition and
-- renewal of such a lock set to the retention, needs no shortening.
--
-- KEYS, a run of the order that every script shares (see internal/keys):
-- KEYS[1] waiting set    prefix{K}:waiters
-- KEYS[2] lock key       prefix{K}
-- ARGV[1] token          the owner token
--
-- Returns 1 if the lock held ARGV[1] and was released; 0 if it holds
-- another value, or nothing (it had expired or was taken), or is not a
-- string (a plain lock's token is no member of shared holds or a
-- semaphore's permits): nothing is written then; -5 if it held ARGV[1] and
-- waiters are registered: nothing is written, and release.lua, which wakes
-- the next one, is the release to send.
if redis.pcall('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
if redis.call('ZCARD', KEYS[1]) > 0 then
  return -5
end
return redis.call('DEL', KEYS[2])
