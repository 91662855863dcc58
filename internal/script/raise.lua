-- raise.lua: raise the fence counter to at least a value (never lower it),
-- and record that value as the holder's fence.
--
-- KEYS are the first three of the keys that every script takes in one order
-- (see internal/keys):
-- KEYS[1] lock key       prefix{K} (not used; the command is routed by it)
-- KEYS[2] fence counter  prefix{K}:fence
-- KEYS[3] metadata       prefix{K}:meta (see acquire.lua)
-- ARGV[1] value          the fence a Redlock holder was granted (a decimal string)
-- ARGV[2] life           ms the counter lives at least from now, as after an
--                        acquisition (the retention, at least the lock's TTL)
-- ARGV[3] token          the holder's owner token
--
-- Returns the counter after the call, as a decimal string. Used after a quorum
-- acquisition whose nodes returned different counters, so that every node of
-- the quorum holds at least the holder's fence and the next holder's quorum
-- (which shares a node with this one) is given a larger one; the holder's
-- entry "f:" .. token, written by its grant on this node with the node's own
-- fence, is set to the quorum's, so that Status and Leader report the fence
-- the holder has. The comparison is on decimal strings (length first),
-- exact for any 64-bit value; a counter that is not a positive integer is an
-- error, and nothing is written then.
local c = redis.call('GET', KEYS[2])
if c and not string.match(c, '^[1-9]%d*$') then
  return redis.error_reply('dlock: fence counter ' .. KEYS[2] .. ' does not hold a positive integer')
end
local want = ARGV[1]
if redis.pcall('HEXISTS', KEYS[3], 'f:' .. ARGV[3]) == 1 then
  redis.call('HSET', KEYS[3], 'f:' .. ARGV[3], want)
end
if not c or #c < #want or (#c == #want and c < want) then
  redis.call('SET', KEYS[2], want, 'PX', ARGV[2])
  return want
end
local left = redis.call('PTTL', KEYS[2])
if left >= 0 and left < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return c
