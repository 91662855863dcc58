-- limitstate.lua: what a semaphore's limit is on this node, read before a
-- change of it (Locker.SetLimit) and when bringing along a node that
-- missed one (see the root package's limit.go). It writes nothing.
--
-- KEYS, in the order that every script shares (see internal/keys):
-- KEYS[1] waiting set    prefix{K}:waiters (not used)
-- KEYS[2] lock key       prefix{K}
-- KEYS[3] fence counter  prefix{K}:fence (not used)
-- KEYS[4] tombstones     prefix{K}:dead (not used)
-- KEYS[5] metadata       prefix{K}:meta (not used)
-- KEYS[6] limit          prefix{K}:limit
-- KEYS[7] waiter leases  prefix{K}:wexp (not used)
-- KEYS[8] writers        prefix{K}:writers (not used)
-- KEYS[9] old limit      prefix{K}:oldlimit
-- No ARGV.
--
-- Returns {code, limit, change, now}: code 1 when the key has live permits,
-- 0 when it has none, -1 when it is a plain lock (or reserved for one's
-- waiter), -2 when it holds shared holds; limit the stored limit ("" if
-- none); change the last change of the limit recorded here, as
-- setlimit.lua keeps it in KEYS[9] ("OLD NEW OP TOKEN"; "" if none); now
-- the server's time in ms, a decimal string. A key of another type fails.
local t = redis.call('TIME')
local ms = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local ty = redis.call('TYPE', KEYS[2])['ok']
if ty == 'string' then
  return {-1, '', '', ms}
elseif ty ~= 'zset' and ty ~= 'none' then
  return redis.error_reply('WRONGTYPE dlock: the semaphore ' .. KEYS[2] .. ' holds another type')
end
for _, k in ipairs({KEYS[6], KEYS[9]}) do
  local kt = redis.call('TYPE', k)['ok']
  if kt ~= 'string' and kt ~= 'none' then
    return redis.error_reply('WRONGTYPE dlock: the limit key ' .. k .. ' holds another type')
  end
end
local held = redis.call('GET', KEYS[6]) or ''
local change = redis.call('GET', KEYS[9]) or ''
if held == '0' then
  return {-2, held, change, ms}
end
local code = 0
if ty == 'zset' and redis.call('ZCOUNT', KEYS[2], '(' .. ms, '+inf') > 0 then
  code = 1
end
return {code, held, change, ms}
