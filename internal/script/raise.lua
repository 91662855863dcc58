-- raise.lua: claim a fence on this node: raise the fence counter to a value
-- if it is below it (never lower it), and record that value as the holder's
-- fence.
--
-- KEYS are four of the keys that every script takes in one order, from the
-- lock key on (see internal/keys):
-- KEYS[1] lock key       prefix{K} (not used; the command is routed by it)
-- KEYS[2] fence counter  prefix{K}:fence
-- KEYS[3] tombstones     prefix{K}:dead (not used)
-- KEYS[4] metadata       prefix{K}:meta (see base.lua)
-- ARGV[1] value          the fence a Redlock holder claims (a decimal string)
-- ARGV[2] life           ms the counter lives at least from now, as after an
--                        acquisition (the retention, at least the lock's TTL)
-- ARGV[3] token          the holder's owner token
--
-- Returns {1, value} when the counter was below the value (or absent) and
-- now holds it: the claim is this caller's, since the counter never goes
-- down and no other caller can have moved it from below the value to the
-- value on this node. Returns {0, counter} when the counter already held the
-- value or more (another holder's, perhaps the same value), and changes
-- nothing but the counter's life. Used after a quorum acquisition: a fence
-- counts once a quorum of the granting nodes issued it (acquire.lua) or
-- were raised to it here, so that two holders cannot both have it (their
-- quorums share a node), and the next holder's quorum, which shares a node
-- with this one, is given a larger one. The holder's entry "f:" .. token,
-- written by its grant on this node with the node's own fence, is set to
-- the claimed value, so that Status and Leader report the fence the holder
-- has. The comparison is on decimal strings (length first), exact for any
-- 64-bit value; a counter that is not a positive integer, or a value that
-- is not one below 2^63-1 (which base.lua's incr could not increment), is an
-- error, and nothing is written then.
local c = redis.call('GET', KEYS[2])
if c and not string.match(c, '^[1-9]%d*$') then
  return redis.error_reply('dlock: fence counter ' .. KEYS[2] .. ' does not hold a positive integer')
end
local want = ARGV[1]
if not string.match(want, '^[1-9]%d*$') or #want > 19 or (#want == 19 and want >= '9223372036854775807') then
  return redis.error_reply('dlock: fence ' .. want .. ' is not a positive integer below 2^63-1')
end
if not c or #c < #want or (#c == #want and c < want) then
  redis.call('SET', KEYS[2], want, 'PX', ARGV[2])
  if redis.pcall('HEXISTS', KEYS[4], 'f:' .. ARGV[3]) == 1 then
    redis.call('HSET', KEYS[4], 'f:' .. ARGV[3], want)
  end
  return {1, want}
end
local left = redis.call('PTTL', KEYS[2])
if left >= 0 and left < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return {0, c}
