-- proclaim.lua: a leader's new value (Lock.Proclaim), owner-checked.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] metadata       prefix{K}:meta (hash: owner token -> its value)
-- ARGV[1] token          the leader's owner token
-- ARGV[2] value          the new value
--
-- Returns 1 when the lock holds ARGV[1] and its value is now ARGV[2], 0
-- when it does not hold ARGV[1] (another leader, none, a reservation, or a
-- key of another shape): then nothing is written, so that a Proclaim that
-- runs late, after its leadership ended, cannot set the value of the
-- next leader. A metadata key of another type fails before anything is
-- written. A metadata key that was lost (an eviction) is made again, to
-- live as long as the lock.
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then
  return 0
end
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'hash' and t ~= 'none' then
  return redis.error_reply('WRONGTYPE dlock: the metadata key ' .. KEYS[2] .. ' holds another type')
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if t == 'none' then
  local ttl = redis.call('PTTL', KEYS[1])
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
