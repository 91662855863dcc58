-- shared.lua: take a shared hold (ARGV[5] "0") of a key, unless a writer
-- waits ahead of the caller; register the caller as a waiter if not.
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
-- KEYS[9] old limit      prefix{K}:oldlimit (read by semaphore.lua only)
-- ARGV: as base.lua's header says (ARGV[1..5] always, ARGV[6..10] for an
-- attempt that may register as a waiter; ARGV[11..14] for a shared hold's waiter, to wake
-- the shared waiters after it).
-- Returns: as base.lua's header says.
--
-- A value "~WAITER" is a reservation made by release.lua: only that waiter
-- may take the lock until the reservation's short TTL runs out. In a
-- semaphore, or shared holds, a reservation is a member "~WAITER" that
-- takes one permit.
--
-- Shared holds (ARGV[5] "0") are the permits of an unlimited semaphore
-- whose KEYS[6] is "0". One is granted while the key is free or shared,
-- unless a writer waits ahead of the caller: KEYS[8] holds each exclusive
-- waiter with an intent at its queue position (which it keeps once a
-- release woke it: a release wakes the head of the queue, so every waiter
-- still queued comes after it), and KEYS[7] the intent's end ("i:" ..
-- WAITER), one TTL (the writer's, at most its lease ARGV[7]) after its last
-- failed attempt. The writers are read
-- in queue order and the first live intent decides: if it is at a lower
-- position than the caller's (any position, for a caller not yet queued)
-- it refuses the grant, and the reply's pttl is the time until it ends;
-- else no writer is ahead. The check is exact for any number of writers
-- and reads 16 intents at most (a ZRANGE, then an HGET per intent up to
-- the first live one, two commands when it is the first): dead intents at the head
-- are passed and removed, and past 16 of them the caller is refused with
-- a pttl of 1 ms (it tries again once they are gone). A reservation for
-- the caller (a member "~WAITER", made by release.lua for the readers it
-- woke) or a live hold of its own is granted whatever the intents. A
-- queued shared waiter's grant wakes the shared waiters then at the head
-- of the queue, if no writer is ahead of them (two at most, each with a
-- reservation; see release.lua), so that a release wakes them all. An
-- exclusive acquisition of a shared key waits while any hold or reservation
-- is live, its pttl then at most a third of its intent's life, so that it renews its
-- intent (written by every such failed attempt of an exclusive waiter, and
-- only by those: a waiter for a plain lock writes none) before the intent
-- ends; once they all expired, the set is deleted and the lock
-- taken. A shared hold on a lock (a string: its holder, or a reservation)
-- waits as for a lock; a shared hold on a semaphore, or the other way
-- round, is refused as a limit mismatch ("0" names the shared holds).
-- #include base.lua
-- #include queue.lua
-- #include grant.lua
if buried() then
  return refusedBuried
end

-- A shared hold.
local ty = redis.call('TYPE', KEYS[2])['ok']
if ty == 'string' then
  if string.sub(redis.call('GET', KEYS[2]), 1, 1) == '~' then
    return busy(-3)
  end
  return busy(redis.call('PTTL', KEYS[2]))
elseif ty ~= 'none' and ty ~= 'zset' then
  return redis.error_reply('WRONGTYPE dlock: the lock ' .. KEYS[2] .. ' holds another type')
end
local now = clock()
local held = redis.call('GET', KEYS[6])
if held and held ~= '0' and redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0 then
  return mismatch(held)
end
local mine, resv = claims(now)
if not (mine or resv) then
  local wait = writerAhead(now, tonumber(ARGV[8] or '0'))
  if wait then
    return busy(wait)
  end
end
local c, bad = grantable(queued and ARGV[11])
if bad then
  return bad
end
local wake = false
if queued and ARGV[11] then
  local INBOX, LISTENERS, TAG = ARGV[11], ARGV[12], ARGV[13]
  -- #include wake.lua
  -- wake wakes the shared waiters at the head of the queue, two at most,
  -- if no writer is ahead of them, each with a reservation.
  wake = function(now)
    -- The caller first: it is granted, not woken.
    redis.call('ZREM', KEYS[1], waiter)
    local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if #head == 0 or not reader(head[1]) or writerAhead(now, tonumber(head[2])) then
      return
    end
    local woken = {}
    wakeReaders(2, woken, function() return now end)
    if tonumber(ARGV[14]) > 0 then
      for _, w in ipairs(woken) do
        redis.call('ZADD', KEYS[2], now + tonumber(ARGV[14]), '~' .. w)
      end
    end
  end
end
return permit(c, now, resv, wake, mine)
