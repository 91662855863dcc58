-- write.lua: a fenced write to one resource: it happens only if the caller's
-- fence is not smaller than the largest fence the resource has seen.
--
-- KEYS[1] resource  PREFIX..NAME, a hash with the fields
--                     "fence"  the largest fence accepted so far (a decimal string)
--                     "value"  the value (absent after "del", or after a
--                              "claim" of a resource never written)
-- ARGV[1] op        "set": write ARGV[3] as the value and ARGV[2] as the fence;
--                   "del": remove the value, write ARGV[2] as the fence (the
--                          hash stays, so that the fence is not forgotten);
--                   "claim": write ARGV[2] as the fence, keep the value
-- ARGV[2] fence     the caller's fence: a decimal string in 1..2^64-1 without
--                   leading zeros (the caller formats it; checked again here)
-- ARGV[3] value     for "set" only
--
-- Returns {1} when the write was done ({1, value} for "claim" of a resource
-- that has a value: the value it has), or {0, seen} when it was refused
-- because the resource has seen a larger fence (seen, a decimal string).
-- An equal fence is accepted: the same holder writing again, or its retry
-- of a command whose reply was lost.
--
-- Fences are compared as decimal strings, length first, then digit by
-- digit: exact for every 64-bit value (a Lua number is a double, which
-- cannot tell 2^53+1 from 2^53), and independent of the server's locale
-- (Lua's < on strings uses strcoll).
--
-- Errors, with nothing written: a bad op or fence argument; a stored fence
-- that is not such a decimal string; a key of another type (WRONGTYPE,
-- raised by HMGET). Every check comes before the first write, and once a
-- write is done no later command can fail (Redis refuses a script's write
-- on OOM only while the script has written nothing), so a call either does
-- all of its writes or none.

-- greater reports whether a > b, for two strings of decimal digits without
-- leading zeros.
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return false
end

-- valid reports whether s is a decimal integer in 1..2^64-1 without leading
-- zeros.
local function valid(s)
  return #s <= 20 and string.match(s, '^[1-9]%d*$') ~= nil
    and not greater(s, '18446744073709551615')
end

local op, fence = ARGV[1], ARGV[2]
if op ~= 'set' and op ~= 'del' and op ~= 'claim' then
  return redis.error_reply('fenced: unknown op ' .. tostring(op))
end
if not fence or not valid(fence) then
  return redis.error_reply('fenced: fence ' .. tostring(fence) .. ' is not an integer in 1..2^64-1')
end

local cur = redis.call('HMGET', KEYS[1], 'fence', 'value')
local seen, value = cur[1], cur[2]
if seen then
  if not valid(seen) then
    return redis.error_reply('fenced: ' .. KEYS[1] .. ' holds a fence that is not an integer in 1..2^64-1')
  end
  if greater(seen, fence) then
    return {0, seen}
  end
end

if op == 'set' then
  redis.call('HSET', KEYS[1], 'fence', fence, 'value', ARGV[3] or '')
  return {1}
end
if seen ~= fence then
  redis.call('HSET', KEYS[1], 'fence', fence)
end
if op == 'del' then
  redis.call('HDEL', KEYS[1], 'value')
  return {1}
end
if value then
  return {1, value}
end
return {1}
