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
-- holds ARGV[1] and KEYS[2] is a hash or nothing: the term is counted, the
-- expiry of KEYS[2] set, "C TERM N" then ARGV[5] published on ARGV[4]
-- (a refused PUBLISH fails nothing), once per term: a command that runs
-- again for a term counted already (a retry, a resend) writes and
-- publishes nothing and returns the same number. Else 0, and nothing is
-- written or published: a node where the leader does not hold the lock
-- (it never granted it, or the term is over: a late command) does not
-- announce it; observers hear it from the nodes that hold it, or read it.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'hash' and t ~= 'none' then
  return 0
end
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0') or 0
if redis.call('HGET', KEYS[2], 't') == ARGV[2] then
  return n
end
n = n + 1
redis.call('HSET', KEYS[2], 'n', string.format('%d', n), 't', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.pcall('PUBLISH', ARGV[4], 'C ' .. ARGV[2] .. ' ' .. string.format('%d', n))
redis.pcall('PUBLISH', ARGV[4], ARGV[5])
return n
