-- acquire.lua: take the lock if it is free, or already ours, or reserved for us.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] fence counter  prefix{K}:fence   (never expires)
-- KEYS[3] waiting set    prefix{K}:waiters (zset: waiter -> queue position)
-- KEYS[4] waiter leases  prefix{K}:wexp    (hash: waiter -> lease end, server ms)
-- ARGV[1] token          the caller's owner token
-- ARGV[2] ttl            lock TTL in milliseconds
-- ARGV[3] waiter         "" to acquire without joining the waiting set, else
--                        "LOCKERID:SEQ:KEY" (see release.lua for its use)
-- ARGV[4] waiter lease   ms a registration lives without being refreshed
-- ARGV[5] position       the waiter's queue position from an earlier reply, "0" for new
-- ARGV[6] queued         "1" if the waiter may sit in the waiting set (remove it on success)
-- ARGV[7] refresh        "1" to write the registration on failure even if
--                        ARGV[5] is known (it was popped, or its lease is old)
--
-- Returns {1, fence} on success. The fence is INCR of the counter; when the
-- lock already holds ARGV[1] (a retried command whose first reply was lost) the
-- TTL is reset and the current counter is returned without a second INCR.
-- Returns {0, pttl, position} on failure: pttl is the holder's remaining TTL in
-- ms (-1 when the key has no expiry, -3 when it is reserved for a woken
-- waiter, so the wait should not be timed by it); position is the caller's
-- queue position when it is registered as a waiter, else 0.
--
-- A value "~WAITER" is a reservation made by release.lua: only that waiter
-- may take the lock until the reservation's short TTL runs out.
local v = redis.call('GET', KEYS[1])
local waiter = ARGV[3]
if v == false or v == ARGV[1] or (waiter ~= '' and v == '~' .. waiter) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local fence
  if v == ARGV[1] then
    fence = tonumber(redis.call('GET', KEYS[2]) or '0')
  else
    fence = redis.call('INCR', KEYS[2])
  end
  if ARGV[6] == '1' then
    redis.call('ZREM', KEYS[3], waiter)
    redis.call('HDEL', KEYS[4], waiter)
  end
  return {1, fence}
end

local pttl
if string.sub(v, 1, 1) == '~' then
  pttl = -3
else
  pttl = redis.call('PTTL', KEYS[1])
end
local pos = ARGV[5]
if waiter ~= '' and (pos == '0' or ARGV[7] == '1') then
  local t = redis.call('TIME')
  if pos == '0' then
    -- Queue position: server time in microseconds at first registration.
    pos = t[1] .. string.format('%06d', tonumber(t[2]))
  end
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[3], pos, waiter)
  redis.call('HSET', KEYS[4], waiter, now + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
end
return {0, pttl, pos}
