-- raise.lua: raise the fence counter to at least a value (never lower it).
--
-- KEYS[1] fence counter  prefix{K}:fence
-- ARGV[1] value          the fence a Redlock holder was granted (a decimal string)
-- ARGV[2] retention      ms the counter lives from now, as after an acquisition
--
-- Returns the counter after the call, as a decimal string. Used after a quorum
-- acquisition whose nodes returned different counters, so that every node of
-- the quorum holds at least the holder's fence and the next holder's quorum
-- (which shares a node with this one) is given a larger one. The comparison
-- is on decimal strings (length first), exact for any 64-bit value; a counter
-- that is not a positive integer is an error, and nothing is written then.
local c = redis.call('GET', KEYS[1])
if c and not string.match(c, '^[1-9]%d*$') then
  return redis.error_reply('dlock: fence counter ' .. KEYS[1] .. ' does not hold a positive integer')
end
local want = ARGV[1]
if not c or #c < #want or (#c == #want and c < want) then
  redis.call('SET', KEYS[1], want, 'PX', ARGV[2])
  return want
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return c
