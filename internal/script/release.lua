-- release.lua: delete the lock if it holds the expected value, and wake one waiter.
-- Of a semaphore (KEYS[2] a sorted set, see semaphore.lua), remove the permit.
--
-- KEYS, in the order that every script shares (see internal/keys):
-- KEYS[1] waiting set    prefix{K}:waiters
-- KEYS[2] lock key       prefix{K}
-- KEYS[3] fence counter  prefix{K}:fence
-- KEYS[4] tombstones     prefix{K}:dead (zset: dead token -> end of its tombstone, server ms)
-- KEYS[5] metadata       prefix{K}:meta (the released owner's entries are removed)
-- KEYS[6] limit          prefix{K}:limit (a semaphore's)
-- KEYS[7] waiter leases  prefix{K}:wexp
-- KEYS[8] writers        prefix{K}:writers (exclusive waiters' intents, see shared.lua)
-- ARGV[1] expected       the owner token, or "~WAITER" to give up a reservation
-- ARGV[2] inbox prefix   a waiter "LOCKERID:SEQ:KEY" is told on channel ARGV[2]..LOCKERID
-- ARGV[3] reserve ms     > 0: reserve the lock for the woken waiter this long
-- ARGV[4] leaving        "" or a waiter to remove from the waiting set (and
--                        from the writers' intents) first
-- ARGV[5] wake           "1" to wake the next waiter, "0" not to (the clean-up
--                        of a failed quorum attempt: the waiters were woken by
--                        the release that freed the lock, and waking more for a
--                        partial grant only makes them collide)
-- ARGV[6] metadata       "0" when a lock's owner stored no metadata (its entries
--                        need not be removed), "1" otherwise; a permit's
--                        entries (metadata, "f:" fence, "l:" limit) are
--                        removed either way
-- ARGV[7] listeners      "1" when PUBLISH's count of receivers is exact for
--                        the waiters' inboxes (every connection of the
--                        waiters' clients to this deployment ends on this
--                        server: not a Cluster, where an inbox subscription
--                        may sit on another node); absent or "0" otherwise
-- ARGV[8] bury ms        > 0: ARGV[1] is a dead token of which a command may
--                        still reach the server (its answer was missed): leave
--                        a tombstone for it this long, which the acquisition scripts and
--                        extend.lua's regain refuse; "0": none
-- ARGV[9] retention      ms the fence counter lives after its last use: once
--                        the lock (or a semaphore's last permit) is released,
--                        the counter, kept as long as its holders, lives this
--                        long from now (see extend.lua); "": leave its life
--                        alone (a plain lock whose TTL is within the
--                        retention, which every acquisition and renewal gave it)
-- ARGV[10] slot tag      on a Cluster, a text in KEYS[2]'s hash slot; "" or
--                        absent elsewhere. A waiter whose Locker listens on
--                        sharded pub/sub (its LOCKERID ends in "s") is told
--                        with SPUBLISH on ARGV[2].."{"..ARGV[10].."}"..LOCKERID,
--                        a channel of the key's slot, so that the message
--                        stays on the key's shard (a PUBLISH crosses the
--                        whole Cluster's bus); after a refused SPUBLISH
--                        (no sharded pub/sub, or no permission), and for
--                        every other waiter, with PUBLISH on
--                        ARGV[2]..LOCKERID (a sharded Locker listens there
--                        too, for the releases of v0.1.0); a refused PUBLISH
--                        counts as heard by nobody
--
-- Returns 1 if the lock held ARGV[1] and was released (or handed on), else 0
-- (a semaphore or shared holds: 1 if ARGV[1] was a live permit, and it is
-- removed either way).
--
-- Which waiters a release wakes, and how: see wake.lua.
-- #include clock.lua
local INBOX, LISTENERS, TAG = ARGV[2], ARGV[7], ARGV[10] or ''
-- #include wake.lua
-- #include tomb.lua
if ARGV[8] ~= '0' then
  -- The tombstone first, whatever the lock holds: the command it refuses
  -- may come later still.
  local bad = bury(KEYS[4], ARGV[1], ARGV[8])
  if bad then
    return bad
  end
end
-- intentGone: the leaving waiter was a writer whose intent kept readers out.
local intentGone = false
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[1], ARGV[4])
  redis.call('HDEL', KEYS[7], ARGV[4], 'i:' .. ARGV[4], 'm:' .. ARGV[4])
  intentGone = redis.pcall('ZREM', KEYS[8], ARGV[4]) == 1 -- another type: left alone
end
local v = redis.pcall('GET', KEYS[2])
local sem = type(v) == 'table'
local shared = false -- the key's permits are shared holds
-- nothing is the reply when ARGV[1] held nothing; readers that a leaving
-- writer's intent kept out are woken if no exclusive hold keeps them out.
local function nothing()
  if intentGone and type(v) ~= 'string' then
    -- After a writer's intent went, they may no longer wait.
    wakeReaders(100, {}, clock)
  end
  return 0
end
if sem then
  -- A semaphore's permits.
  if redis.call('TYPE', KEYS[2])['ok'] ~= 'zset' then
    return 0
  end
  local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not s then
    return nothing()
  end
  redis.call('ZREM', KEYS[2], ARGV[1])
  -- The permit's entries (its metadata, fence and limit), which the others'
  -- grants keep alive: removed whatever ARGV[6] says (a hash of another
  -- type: left alone).
  redis.pcall('HDEL', KEYS[5], ARGV[1], 'f:' .. ARGV[1], 'l:' .. ARGV[1])
  shared = redis.call('GET', KEYS[6]) == '0'
  if tonumber(s) <= clock() then
    return nothing() -- it had expired
  end
elseif v ~= ARGV[1] then
  return nothing()
elseif ARGV[6] ~= '0' then
  redis.call('DEL', KEYS[5]) -- a lock's holder is its only entry
end

-- The woken waiter: the first live registration that hears of it. At most
-- 16 are looked at (and dropped) per release; later releases go on.
local wake = ARGV[5] ~= '0'
if shared and redis.call('ZCOUNT', KEYS[2], '(' .. clock(), '+inf') > 0 then
  wake = false -- other shared holds remain
end
local woken = {}
if wake then
  for _ = 1, 16 do
    local popped = redis.call('ZPOPMIN', KEYS[1])
    if #popped == 0 then
      break
    end
    if pop(popped[1], clock) then
      woken[1] = popped[1]
      break
    end
  end
end
local nxt = woken[1]
-- group: readers woken onto a lock or shared holds (not a semaphore's).
local group = nxt and reader(nxt) and (shared or not sem)
if group then
  wakeReaders(100, woken, clock)
end

local reserve = nxt and tonumber(ARGV[3]) > 0
local last = false -- a semaphore's last permit's expiry
if shared and nxt and not group then
  -- A writer after the last shared hold: the key becomes its reservation.
  redis.call('DEL', KEYS[2], KEYS[6])
  if reserve then
    redis.call('SET', KEYS[2], '~' .. nxt, 'PX', ARGV[3])
  end
elseif sem or (group and reserve) then
  if not sem then
    redis.call('DEL', KEYS[2]) -- a lock, handed to readers
  end
  if reserve then
    for _, w in ipairs(woken) do
      redis.call('ZADD', KEYS[2], clock() + tonumber(ARGV[3]), '~' .. w)
    end
    if group then
      redis.call('SET', KEYS[6], '0')
    end
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', clock())
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', clock())
    for _, m in ipairs(gone) do
      redis.pcall('HDEL', KEYS[5], m, 'f:' .. m, 'l:' .. m) -- a hash of another type: left alone
    end
  end
  last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', KEYS[2], last)
    redis.call('PEXPIREAT', KEYS[6], last)
  else
    redis.call('DEL', KEYS[2], KEYS[6])
  end
elseif reserve then
  redis.call('SET', KEYS[2], '~' .. nxt, 'PX', ARGV[3])
else
  redis.call('DEL', KEYS[2])
end
-- The counter outlives the last holder by the retention.
if ARGV[9] ~= '' then
  local life = tonumber(ARGV[9])
  if last then
    life = math.max(life, tonumber(last) - clock())
  end
  if redis.call('PTTL', KEYS[3]) > life then
    redis.call('PEXPIRE', KEYS[3], life)
  end
end
if nxt then
  standIn()
end
return 1
