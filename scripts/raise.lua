-- raise.lua: raise the fence counter to at least a value (never lower it).
--
-- KEYS[1] fence counter  prefix{K}:fence
-- ARGV[1] value          the fence a Redlock holder was granted
--
-- Returns the counter after the call. Used after a quorum acquisition whose
-- nodes returned different counters, so that every node of the quorum holds
-- at least the holder's fence and the next holder's quorum (which shares a
-- node with this one) is given a larger one.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('SET', KEYS[1], ARGV[1])
  return want
end
return cur
