-- lock.lua: take a plain lock (limit 1, no metadata) if it is free, for an
-- attempt that does not register as a waiter: the everyday path. It is
-- acquire.lua's path for that shape, on the same data (see base.lua's header for
-- what each key holds), with the same fence rule, tombstone refusal and
-- retried-command idempotence, and nothing else defined or checked first.
--
-- KEYS, a run of the order that every script shares (see internal/keys):
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] fence counter  prefix{K}:fence
-- KEYS[3] tombstones     prefix{K}:dead
-- KEYS[4] metadata       prefix{K}:meta (on a Redlock only; absent on one Redis):
--                        the holder's fence is recorded there with the hold
--                        ("f:" .. token, as a permit's), for Adopt, since a
--                        Redlock's counters move while it holds (a grant that
--                        ran late on a node with its own count, a claim, grants
--                        on a node where the hold lapsed); on one Redis the
--                        counter holds it (nothing moves it while the lock is
--                        held, and renew.lua restores a lost one to it)
-- ARGV[1] token          the caller's owner token
-- ARGV[2] ttl            lock TTL in milliseconds
-- ARGV[3] life           ms the fence counter lives after this acquisition (the
--                        retention, at least the TTL)
--
-- Returns {1, fence} on success, the fence a decimal string, as acquire.lua.
-- A copy of the command that runs again (a client's retry: its first reply
-- was lost), or late, after later commands of the lock (a copy held up on a
-- connection that failed), finds the key holding its token: it answers the
-- same fence (the recorded one, on a Redlock) and writes nothing that
-- shortens what a later command set: the key's and the counter's expiries
-- only move later, never earlier. (A copy that runs after the release is
-- refused as buried: the release buries the token where a copy of its
-- acquisition may still run, see the root package's lease.go.)
-- Returns {0, pttl, "0"} when another holds the lock: pttl as acquire.lua's
-- (-3: reserved for a woken waiter); {0, -4, "0"} for a token that
-- release.lua buried (nothing is written); {0, -5, "0"} when the lock key is
-- not a string (shared holds, a semaphore's permits, another program's
-- key): acquire.lua answers for those (and semaphore.lua or shared.lua
-- for a call of their shapes), and nothing is written. A counter
-- that is not a positive decimal integer below 2^63-1 is an error, before
-- anything is written.
local token = ARGV[1]
local c = redis.call('GET', KEYS[2])
if c and (not string.match(c, '^[1-9]%d*$') or (#c == 19 and c >= '9223372036854775807') or #c > 19) then
  return redis.error_reply('dlock: fence counter ' .. KEYS[2] .. ' does not hold a positive integer below 2^63-1')
end
local t = false -- the server's TIME, read once when needed
local d = redis.call('ZSCORE', KEYS[3], token)
if d then
  t = redis.call('TIME')
  if tonumber(d) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return {0, -4, '0'}
  end
end
local fence
if redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
  t = t or redis.call('TIME')
  local floor = t[1] .. '000000'
  if not c then
    fence = t[1] .. string.format('%06d', tonumber(t[2]))
  elseif #c > #floor or (#c == #floor and c >= floor) then
    -- c + 1, as a decimal string (exact: see base.lua's incr).
    local i = #c
    while i > 0 and string.byte(c, i) == 57 do -- '9'
      i = i - 1
    end
    if i == 0 then
      fence = '1' .. string.rep('0', #c)
    else
      fence = string.sub(c, 1, i - 1) .. string.char(string.byte(c, i) + 1) .. string.rep('0', #c - i)
    end
  else
    fence = floor
  end
  redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
  if KEYS[4] then
    -- A lock has one holder: the entries of former ones go.
    redis.call('DEL', KEYS[4])
    redis.call('HSET', KEYS[4], 'f:' .. token, fence)
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
  end
  return {1, fence}
end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {0, -5, '0'}
end
if v == token and c then
  -- A copy run again, or late: the same fence, no expiry moved earlier.
  local f = KEYS[4] and redis.call('HGET', KEYS[4], 'f:' .. token) or c
  for _, k in ipairs(KEYS[4] and {KEYS[1], KEYS[4]} or {KEYS[1]}) do
    if redis.call('PTTL', k) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', k, ARGV[2])
    end
  end
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  return {1, f}
end
if v == token then
  return {0, -5, '0'} -- its counter lost meanwhile: acquire.lua issues one
end
if string.sub(v, 1, 1) == '~' then
  return {0, -3, '0'}
end
return {0, redis.call('PTTL', KEYS[1]), '0'}
