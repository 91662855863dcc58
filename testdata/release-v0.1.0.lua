-- release.lua: delete the lock if it holds the expected value, and wake one waiter.
-- Of a semaphore (KEYS[1] a sorted set, see acquire.lua), remove the permit.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] waiting set    prefix{K}:waiters
-- KEYS[3] waiter leases  prefix{K}:wexp
-- KEYS[4] metadata       prefix{K}:meta (the released owner's entries are removed)
-- KEYS[5] limit          prefix{K}:limit (a semaphore's)
-- KEYS[6] tombstones     prefix{K}:dead (zset: dead token -> end of its tombstone, server ms)
-- KEYS[7] fence counter  prefix{K}:fence
-- ARGV[1] expected       the owner token, or "~WAITER" to give up a reservation
-- ARGV[2] inbox prefix   a waiter "LOCKERID:SEQ:KEY" is told on channel ARGV[2]..LOCKERID
-- ARGV[3] reserve ms     > 0: reserve the lock for the woken waiter this long
-- ARGV[4] leaving        "" or a waiter to remove from the waiting set first
-- ARGV[5] wake           "1" to wake the next waiter, "0" not to (the clean-up
--                        of a failed quorum attempt: the waiters were woken by
--                        the release that freed the lock, and waking more for a
--                        partial grant only makes them collide)
-- ARGV[6] metadata       "0" when the owner stored no metadata (its entries
--                        need not be removed), "1" otherwise
-- ARGV[7] listeners      "1" when PUBLISH's count of receivers is exact for
--                        the waiters' inboxes (every connection of the
--                        waiters' clients to this deployment ends on this
--                        server: not a Cluster, where an inbox subscription
--                        may sit on another node); absent or "0" otherwise
-- ARGV[8] bury ms        > 0: ARGV[1] is a dead token of which a command may
--                        still reach the server (its answer was missed): leave
--                        a tombstone for it this long, which acquire.lua and
--                        extend.lua's regain refuse; "0": none
-- ARGV[9] retention      ms the fence counter lives after its last use: once
--                        the lock (or a semaphore's last permit) is released,
--                        the counter, kept as long as its holders, lives this
--                        long from now (see extend.lua)
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
-- With ARGV[7] = "1", a waiter whose inbox nobody listens to (its process
-- closed its Locker or died: the server dropped the subscription with the
-- connection) is passed over, for the woken waiter and for the stand-in
-- alike, and removed from the waiting set: the release goes to the first
-- waiter that can hear of it.
local now = false -- server ms, read when needed
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
if ARGV[8] ~= '0' then
  -- The tombstone first, whatever the lock holds: the command it refuses
  -- may come later still. Expired ones are dropped on the way.
  local ty = redis.call('TYPE', KEYS[6])['ok']
  if ty ~= 'zset' and ty ~= 'none' then
    return redis.error_reply('WRONGTYPE dlock: the tombstones key ' .. KEYS[6] .. ' holds another type')
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', clock())
  redis.call('ZADD', KEYS[6], clock() + tonumber(ARGV[8]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[6], last)
end
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('HDEL', KEYS[3], ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
local sem = type(v) == 'table'
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
if ARGV[6] ~= '0' and sem then
  redis.pcall('HDEL', KEYS[4], ARGV[1], 'f:' .. ARGV[1]) -- a hash of another type: left alone
elseif ARGV[6] ~= '0' then
  redis.call('DEL', KEYS[4]) -- a lock's holder is its only entry
end

local function inbox(w)
  return ARGV[2] .. string.match(w, '^[^:]*')
end
-- tell publishes msg to waiter w's inbox; it reports false when nobody can
-- have heard it (see ARGV[7]).
local function tell(w, msg)
  local heard = redis.call('PUBLISH', inbox(w), msg .. ' ' .. w)
  return heard > 0 or ARGV[7] ~= '1'
end
local function live(w)
  return tonumber(redis.call('HGET', KEYS[3], w) or '0') >= clock()
end

-- The woken waiter: the first live registration that hears of it. At most
-- 16 are looked at (and dropped) per release; later releases go on.
local nxt = false
if ARGV[5] ~= '0' then
  for _ = 1, 16 do
    local popped = redis.call('ZPOPMIN', KEYS[2])
    if #popped == 0 then
      break
    end
    local w = popped[1]
    local ok = live(w)
    redis.call('HDEL', KEYS[3], w)
    if ok and tell(w, 'w') then
      nxt = w
      break
    end
  end
end

local reserve = nxt and tonumber(ARGV[3]) > 0
local last = false -- a semaphore's last permit's expiry
if sem then
  if reserve then
    redis.call('ZADD', KEYS[1], clock() + tonumber(ARGV[3]), '~' .. nxt)
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', clock())
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', clock())
    local fields = {}
    for _, m in ipairs(gone) do
      fields[#fields + 1] = m
      fields[#fields + 1] = 'f:' .. m
    end
    redis.pcall('HDEL', KEYS[4], unpack(fields)) -- a hash of another type: left alone
  end
  last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
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
-- The counter outlives the last holder by the retention.
local life = tonumber(ARGV[9])
if last then
  life = math.max(life, tonumber(last) - clock())
end
if redis.call('PTTL', KEYS[7]) > life then
  redis.call('PEXPIRE', KEYS[7], life)
end
if nxt then
  -- The stand-in: the next live registration that hears of it; those
  -- nobody hears are dropped on the way.
  for _ = 1, 16 do
    local after = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not after then
      break
    end
    if live(after) and tell(after, 's') then
      break
    end
    redis.call('ZREM', KEYS[2], after)
    redis.call('HDEL', KEYS[3], after)
  end
end
return 1
