-- keepterms.lua: keeps an election's count of terms (elected.lua's) while
-- its leader holds: the leader runs it every half of the count's life,
-- since the renewals that keep the lock and its fence counter leave the
-- count alone.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] terms          prefix{K}:terms (elected.lua's hash)
-- ARGV[1] token          the leader's owner token
-- ARGV[2] life           ms KEYS[2] lives from now (the fence counter's
--                        retention, at least the TTL: elected.lua's ARGV[3])
--
-- Returns 1 when the lock holds ARGV[1] and KEYS[2] is a hash: its expiry
-- is then set ARGV[2] ms from now; else 0, and nothing is written. The
-- count itself is never changed (a late or repeated run changes nothing
-- but the expiry; a count that expired stays gone until the next term).
if redis.pcall('GET', KEYS[1]) == ARGV[1] and redis.call('TYPE', KEYS[2])['ok'] == 'hash' then
  return redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 0
