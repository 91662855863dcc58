-- prefer.lua: put a waiter first in a lock's waiting queue, so that the
-- next release wakes it before the others (Locker.RequestLeadership: the
-- preferred candidate of a leadership transfer).
--
-- KEYS:
-- KEYS[1] waiting set    prefix{K}:waiters (member → queue position)
-- ARGV[1] member         the waiter, "LOCKERID:SEQ:KEY"
--
-- Returns the waiter's queue position now (a decimal string: one below the
-- head's, or its own if it is the head already), or 0 when it is not
-- registered here (nothing is written). A waiting set of another type is
-- an error reply, before any write.
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not mine then
  return 0
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[1] == ARGV[1] then
  return string.format('%.0f', tonumber(mine))
end
local pos = string.format('%.0f', tonumber(head[2]) - 1)
redis.call('ZADD', KEYS[1], 'XX', pos, ARGV[1])
return pos
