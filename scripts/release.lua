-- release.lua: delete the lock if it holds the expected value, and wake one waiter.
-- Of a semaphore (KEYS[1] a sorted set, see acquire.lua), remove the permit.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] waiting set    prefix{K}:waiters
-- KEYS[3] waiter leases  prefix{K}:wexp
-- KEYS[4] metadata       prefix{K}:meta (the released owner's entry is removed)
-- KEYS[5] limit          prefix{K}:limit (a semaphore's)
-- ARGV[1] expected       the owner token, or "~WAITER" to give up a reservation
-- ARGV[2] inbox prefix   a waiter "LOCKERID:SEQ:KEY" is told on channel ARGV[2]..LOCKERID
-- ARGV[3] reserve ms     > 0: reserve the lock for the woken waiter this long
-- ARGV[4] leaving        "" or a waiter to remove from the waiting set first
-- ARGV[5] wake           "1" to wake the next waiter, "0" not to (the clean-up
--                        of a failed quorum attempt: the waiters were woken by
--                        the release that freed the lock, and waking more for a
--                        partial grant only makes them collide)
-- ARGV[6] metadata       "0" when the owner stored no metadata (its entry
--                        need not be removed); absent or "1": remove it
--
-- Returns 1 if the lock held ARGV[1] and was released (or handed on), else 0
-- (a semaphore: 1 if ARGV[1] was a live permit, and it is removed either way).
--
-- The next waiter is the live registration with the lowest queue position;
-- registrations whose lease ran out (their process died) are dropped on the
-- way. It is removed from the set and told "w WAITER" on its process's
-- inbox channel, so exactly one waiting process hears of the release and
-- attempts. The waiter after it is told "s WAITER": it stands in, attempting
-- after a short delay unless it is woken first, in case the woken one died
-- without leaving the queue. With ARGV[3] > 0 the lock is not deleted but set
-- to "~WAITER" for ARGV[3] ms, so a newcomer cannot barge in ahead of the
-- woken waiter; if that waiter is gone, the reservation expires.
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('HDEL', KEYS[3], ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
local sem = type(v) == 'table'
local now = false -- server ms, read when needed
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
if sem then
  -- A semaphore's permits.
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then
    return 0
  end
  local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if not s then
    return 0
  end
  redis.call('ZREM', KEYS[1], ARGV[1])
  if tonumber(s) <= clock() then
    return 0 -- it had expired
  end
elseif v ~= ARGV[1] then
  return 0
end
if ARGV[6] ~= '0' then
  redis.call('HDEL', KEYS[4], ARGV[1])
end

local nxt = false
if ARGV[5] ~= '0' then
  for _ = 1, 16 do
    local popped = redis.call('ZPOPMIN', KEYS[2])
    if #popped == 0 then
      break
    end
    local lease = tonumber(redis.call('HGET', KEYS[3], popped[1]) or '0')
    redis.call('HDEL', KEYS[3], popped[1])
    if lease >= clock() then
      nxt = popped[1]
      break
    end
  end
end

local reserve = nxt and tonumber(ARGV[3]) > 0
if sem then
  if reserve then
    redis.call('ZADD', KEYS[1], clock() + tonumber(ARGV[3]), '~' .. nxt)
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', clock())
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', clock())
    redis.pcall('HDEL', KEYS[4], unpack(gone))
  end
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', KEYS[1], last)
    redis.call('PEXPIREAT', KEYS[5], last)
  else
    redis.call('DEL', KEYS[1], KEYS[5])
  end
elseif reserve then
  redis.call('SET', KEYS[1], '~' .. nxt, 'PX', ARGV[3])
else
  redis.call('DEL', KEYS[1])
end
if nxt then
  local function inbox(w)
    return ARGV[2] .. string.match(w, '^[^:]*')
  end
  redis.call('PUBLISH', inbox(nxt), 'w ' .. nxt)
  local after = redis.call('ZRANGE', KEYS[2], 0, 0)
  if after[1] then
    redis.call('PUBLISH', inbox(after[1]), 's ' .. after[1])
  end
end
return 1
