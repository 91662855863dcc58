-- acquire.lua: take a lock (ARGV[5] "1") if it is free, or already ours, or
-- reserved for us; register the caller as a waiter if it is not. The
-- everyday attempt of a plain lock that does not register is lock.lua;
-- semaphores are semaphore.lua, shared holds shared.lua.
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
-- attempt that may register as a waiter).
-- Returns: as base.lua's header says.
--
-- A value "~WAITER" is a reservation made by release.lua: only that waiter
-- may take the lock until the reservation's short TTL runs out. In a
-- semaphore, or shared holds, a reservation is a member "~WAITER" that
-- takes one permit.
--
-- On a key held as shared holds (a sorted set, KEYS[6] "0"), an exclusive
-- acquisition waits while any hold or reservation is live, its pttl then
-- at most a third of its intent's life, so that it renews its intent
-- (written by every such failed attempt of an exclusive waiter, and only
-- by those: a waiter for a plain lock writes none) before the intent ends
-- (see shared.lua); once they all expired, the set is deleted and the lock
-- taken. On a semaphore's key: a limit mismatch.
-- #include base.lua
-- #include queue.lua
-- #include grant.lua
if waiter == '' and buried() then
  return refusedBuried -- a waiter asks below, where it may write
end

-- onSet is an exclusive acquisition's answer when the lock key is not a
-- string: shared holds (a sorted set, KEYS[6] "0"), a semaphore's permits,
-- or a key of another program (err, WRONGTYPE).
local function onSet(err)
  if redis.call('TYPE', KEYS[2])['ok'] ~= 'zset' then
    return err
  end
  local held = redis.call('GET', KEYS[6])
  if held ~= '0' then
    return mismatch(held or '?')
  end
  local now = clock()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  if last and tonumber(last) > now then
    return busy(math.max(math.min(tonumber(last) - now, math.floor(intentLife() / 3)), 1), true)
  end
  local c, bad = grantable(false)
  if bad then
    return bad
  end
  prune(now)
  redis.call('DEL', KEYS[2], KEYS[6])
  redis.call('SET', KEYS[2], token, 'PX', ARGV[2])
  return done(c, false)
end


local c, bad
-- granted: the lock is now ours. v: the lock's value when it was not free.
local granted, v = false, false
if waiter == '' then
  -- Most likely free: try the write at once, once nothing after it can fail.
  c, bad = counter()
  if bad then
    return bad
  end
  if metadata ~= '' and wrongType(KEYS[5], 'hash') then
    return refuseWrongTypes(false, true)
  end
  granted = redis.call('SET', KEYS[2], token, 'NX', 'PX', ARGV[2]) ~= false
  if not granted then
    v = redis.pcall('GET', KEYS[2])
    if type(v) == 'table' then
      return onSet(v)
    end
    if v == token then
      -- A copy that ran before (see grant.lua's done): no expiry earlier.
      if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[2], ARGV[2])
      end
      granted = true
    end
  end
else
  -- Most likely held: look first.
  v = redis.pcall('GET', KEYS[2])
  if (type(v) == 'table' or v == false or v == token or v == '~' .. waiter) and buried() then
    return refusedBuried -- the paths that may write (busy() asks for its own)
  end
  if type(v) == 'table' then
    return onSet(v)
  end
  if v == false or v == token or v == '~' .. waiter then
    c, bad = grantable(false)
    if bad then
      return bad
    end
    if v ~= token or redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
      redis.call('SET', KEYS[2], token, 'PX', ARGV[2]) -- ours already: no expiry earlier
    end
    granted = true
  end
end

if granted then
  return done(c, v == token)
end

if string.sub(v, 1, 1) == '~' then
  return busy(-3)
end
return busy(redis.call('PTTL', KEYS[2]))
