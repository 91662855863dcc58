-- semaphore.lua: take one of the n permits (ARGV[5] n > 1) of a semaphore;
-- register the caller as a waiter if none is free.
--
-- KEYS, in the order that every script shares (see internal/keys; what each
-- holds: base.lua):
-- KEYS[1] waiting set    prefix{K}:waiters
-- KEYS[2] lock key       prefix{K}
-- KEYS[3] fence counter  prefix{K}:fence
-- KEYS[4] tombstones     prefix{K}:dead
-- KEYS[5] metadata       prefix{K}:meta
-- KEYS[6] limit          prefix{K}:limit
-- KEYS[7] waiter leases  prefix{K}:wexp
-- KEYS[8] writers        prefix{K}:writers
-- KEYS[9] old limit      prefix{K}:oldlimit
-- ARGV: as base.lua's header says (ARGV[1..5] always, ARGV[6..10] for an
-- attempt that may register as a waiter).
-- Returns: as base.lua's header says.
--
-- A value "~WAITER" is a reservation made by release.lua: only that waiter
-- may take the lock until the reservation's short TTL runs out. In a
-- semaphore, or shared holds, a reservation is a member "~WAITER" that
-- takes one permit.
--
-- Semaphore: expired permits (and reservations) are pruned on every run, on
-- the server's clock. A permit is granted while fewer than n live ones are
-- held; pttl on failure is the time until the first live one expires. The
-- sorted set and KEYS[6] expire with the last permit. A key held with
-- another limit (a lock held as a semaphore, or the other way round, or
-- another n) is refused with the error "DLOCKLIMIT HELD ASKED", and nothing
-- is written.
-- #include base.lua
-- #include queue.lua
-- #include grant.lua
if buried() then
  return refusedBuried
end

local c, bad
-- A semaphore of ARGV[5] permits.
local limit = tonumber(ARGV[5])
local ty = redis.call('TYPE', KEYS[2])['ok']
if ty == 'string' then
  return mismatch('1')
elseif ty ~= 'none' and ty ~= 'zset' then
  return redis.error_reply('WRONGTYPE dlock: the semaphore ' .. KEYS[2] .. ' holds another type')
end
-- A limit that Locker.SetLimit changed from OLD to NEW ("OLD NEW OP TOKEN"
-- in KEYS[9], for its grace: see setlimit.lua): an acquisition that asks
-- for OLD is told NEW with "DLOCKLIMIT NEW OLD moved" (an older client
-- reads it as a mismatch), and asks again with NEW, held or not; nothing
-- is written.
local was = redis.call('GET', KEYS[9])
local old, new = false, false
if was then
  old, new = string.match(was, '^(%d+) (%d+)')
  if old == ARGV[5] and new ~= ARGV[5] then
    return redis.error_reply('DLOCKLIMIT ' .. new .. ' ' .. ARGV[5] .. ' moved')
  end
end
local now = clock()
local live = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
local held = redis.call('GET', KEYS[6])
local behind = false -- permits of OLD since the change: see below
if live > 0 and held and held ~= ARGV[5] then
  if not (held == old and new == ARGV[5]) then
    return mismatch(held)
  end
  -- A node that had no permit when the limit changed from OLD to NEW
  -- recorded the change and nothing else; a holder of OLD that regained
  -- its permit here since (a renewal) stored OLD again. The change applies
  -- to these permits as to those of the nodes that held some: the limit is
  -- NEW (written by the grant, or below).
  behind = true
end
local mine, resv = claims(now)
-- A reservation counts among the live permits: over the limit only after
-- Locker.SetLimit lowered it, when a release hands a holder's permit on.
-- The waiter then waits, as a newcomer would, until fewer are held.
if mine or (resv and live <= limit) or live < limit then
  c, bad = grantable(false)
  if bad then
    return bad
  end
  return permit(c, now, resv, false, mine)
end
local first = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if behind then
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('SET', KEYS[6], ARGV[5])
  redis.call('PEXPIREAT', KEYS[6], last)
end
return busy(math.max(tonumber(first[2]) - now, 0))
