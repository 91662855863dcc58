-- asked.lua: record a release request (Locker.RequestRelease) for the
-- holders of a lock at this moment, and tell them: the lock's holder, or
-- every live permit of a semaphore, or every shared hold. The holders
-- decide what to do; nothing of the lock is changed.
--
-- KEYS, all in the lock's slot:
-- KEYS[1] lock key    prefix{K} (a string holding the token; a sorted set
--                     of permits, scored by expiry in server ms)
-- KEYS[2] requests    prefix{K}:asked (a hash: holder token → ARGV[1])
-- ARGV[1] request     "FROM\nREASON": who asked (no newline), then why
-- ARGV[2] channel     where the holders' Lockers listen (prefix.."inbox:asked")
--
-- A value or member "~WAITER" is a reservation for a woken waiter (see
-- base.lua): no holder, not told.
--
-- Returns the number of holders asked: 0 when the key has none (nothing is
-- written or published). Otherwise each holder's token that has no request
-- yet gets ARGV[1] in KEYS[2] (the first request counts), which then
-- expires with the lock's key as it is now (never later: a request is for
-- the holders at the time, and a later holder's token is not in it), and
-- ARGV[2] gets "TOKEN TOKEN …\n" .. ARGV[1], naming those tokens only. A
-- holder that has a request already is not told again (it heard it, or
-- reads it when it begins to listen), so that a command that runs again (a
-- retry, a resend) writes and publishes nothing and returns the same
-- number. A key of another type is an error reply, before anything is
-- written.
local ty = redis.call('TYPE', KEYS[1])['ok']
local holders = {}
if ty == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, 1, 1) ~= '~' then
    holders[1] = v
  end
elseif ty == 'zset' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
    if string.sub(m, 1, 1) ~= '~' then
      holders[#holders + 1] = m
    end
  end
elseif ty ~= 'none' then
  return redis.error_reply('WRONGTYPE dlock: the lock key ' .. KEYS[1] .. ' holds another type')
end
if #holders == 0 then
  return 0
end
local life = redis.call('PTTL', KEYS[1])
if life <= 0 then
  return 0 -- expiring this very moment (dlock sets a TTL on every key)
end
local aty = redis.call('TYPE', KEYS[2])['ok']
if aty ~= 'hash' and aty ~= 'none' then
  return redis.error_reply('WRONGTYPE dlock: the requests key ' .. KEYS[2] .. ' holds another type')
end
local told = {}
for _, h in ipairs(holders) do
  if redis.call('HEXISTS', KEYS[2], h) == 0 then
    redis.call('HSET', KEYS[2], h, ARGV[1]) -- the first request counts
    told[#told + 1] = h
  end
end
if #told > 0 then
  redis.call('PEXPIRE', KEYS[2], life)
  redis.call('PUBLISH', ARGV[2], table.concat(told, ' ') .. '\n' .. ARGV[1])
end
return #holders
