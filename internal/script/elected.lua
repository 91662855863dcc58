-- elected.lua: a new leader's announcement (Campaign), and the count of
-- the election's terms.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] terms          prefix{K}:terms (hash: "n" -> the number of terms
--                        begun, "t" -> the last term counted)
-- ARGV[1] token          the leader's owner token
-- ARGV[2] term           its term (fence), a decimal string
-- ARGV[3] life           ms KEYS[2] lives after this term began (the fence
--                        counter's retention)
-- ARGV[4] channel        the election's channel, prefix .. "leader:" .. K
-- ARGV[5] announcement   "L TERM TOKEN VALUE", published on ARGV[4]
--
-- Returns the number of terms begun, this one included, when the lock
-- holds ARGV[1]: counted once per term (a retried command counts nothing
-- twice), and published first as "C TERM N" on ARGV[4]; else 0, and
-- nothing is counted. The announcement is published either way, as a
-- PUBLISH of the client would (a refused PUBLISH fails nothing).
local n = 0
local t = redis.call('TYPE', KEYS[2])['ok']
if redis.pcall('GET', KEYS[1]) == ARGV[1] and (t == 'hash' or t == 'none') then
  n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0') or 0
  if redis.call('HGET', KEYS[2], 't') ~= ARGV[2] then
    n = n + 1
    redis.call('HSET', KEYS[2], 'n', string.format('%d', n), 't', ARGV[2])
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.pcall('PUBLISH', ARGV[4], 'C ' .. ARGV[2] .. ' ' .. string.format('%d', n))
end
redis.pcall('PUBLISH', ARGV[4], ARGV[5])
return n
