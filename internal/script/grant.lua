-- grant.lua: the grant of acquire.lua, semaphore.lua and shared.lua
-- (included after base.lua and queue.lua): the fence, the holder's entries,
-- a semaphore's or a shared hold's permit.

-- done finishes a grant: the fence, the holder's entries, the waiter's
-- registration. own: the key already held the token (a copy of the command
-- that ran before: a client's retry, or a copy that runs late, after later
-- commands of the hold), which gets the fence it got then (recorded with
-- the hold, or a lock's counter) and moves no expiry earlier; last: a
-- semaphore's last expiry (server ms, a string), nil for a lock; now: the
-- server's time in ms, for a semaphore.
local function done(c, own, last, now)
  local life = math.max(tonumber(ARGV[3]), tonumber(ARGV[2]))
  if last then
    life = math.max(life, tonumber(last) - now)
  end
  local fence = own and redis.pcall('HGET', KEYS[5], 'f:' .. token)
  if type(fence) ~= 'string' then
    fence = own and not last and c -- a lock's one holder got the counter's latest
  end
  if fence then
    if c and redis.call('PTTL', KEYS[3]) < life then
      redis.call('PEXPIRE', KEYS[3], life)
    elseif not c then
      redis.call('SET', KEYS[3], fence, 'PX', life) -- lost meanwhile
    end
  else
    fence = issue(c, life)
  end
  if metadata == '' and last then
    -- A permit's fence, and the limit it was granted with, so that Adopt
    -- can read them (a hash of another type: left alone).
    if type(redis.pcall('HSET', KEYS[5], 'f:' .. token, fence, 'l:' .. token, ARGV[5])) == 'number' then
      redis.call('PEXPIREAT', KEYS[5], last)
    end
  elseif metadata ~= '' or record then
    if not last then
      -- A lock has one holder: the entries of former ones go.
      redis.call('DEL', KEYS[5])
    end
    if metadata ~= '' and last then
      redis.call('HSET', KEYS[5], token, metadata, 'f:' .. token, fence, 'l:' .. token, ARGV[5])
    elseif metadata ~= '' then
      redis.call('HSET', KEYS[5], token, metadata, 'f:' .. token, fence)
    else
      redis.call('HSET', KEYS[5], 'f:' .. token, fence)
    end
    if last then
      redis.call('PEXPIREAT', KEYS[5], last) -- a semaphore's: with the last permit
    else
      local left = redis.call('PTTL', KEYS[2])
      redis.call('PEXPIRE', KEYS[5], left) -- with the lock
    end
  end
  -- The waiter's entries go (keys of another type: left alone). A popped
  -- waiter (see ARGV[9]) has only its lease left.
  if popped then
    redis.pcall('HDEL', KEYS[7], waiter, 'm:' .. waiter)
    return {1, fence}
  end
  if queued then
    redis.pcall('ZREM', KEYS[1], waiter)
    redis.pcall('HDEL', KEYS[7], waiter, 'i:' .. waiter, 'm:' .. waiter)
  end
  if waiter ~= '' and exclusive and redis.pcall('ZREM', KEYS[8], waiter) == 1 and not queued then
    redis.pcall('HDEL', KEYS[7], 'i:' .. waiter)
  end
  return {1, fence}
end
-- claims reports whether the caller holds a live permit, and whether a live
-- reservation is its.
local function claims(now)
  local mine = redis.call('ZSCORE', KEYS[2], token)
  local resv = waiter ~= '' and redis.call('ZSCORE', KEYS[2], '~' .. waiter)
  return mine and tonumber(mine) > now, resv and tonumber(resv) > now
end
-- permit writes a semaphore's or a shared hold's grant (resv: the caller's
-- reservation was taken; wake: a function that wakes the waiters after it,
-- or false; mine: the caller holds a live permit already, a copy of the
-- command that ran before, which keeps its fence, moves its expiry no
-- earlier and wakes nobody again) and returns the reply.
local function permit(c, now, resv, wake, mine)
  prune(now)
  pruneIntents()
  if resv then
    redis.call('ZREM', KEYS[2], '~' .. waiter)
  end
  local s = redis.call('ZSCORE', KEYS[2], token)
  if not s or tonumber(s) < now + tonumber(ARGV[2]) then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), token)
  end
  if wake and not mine then
    wake(now)
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[2], last)
  redis.call('SET', KEYS[6], ARGV[5])
  redis.call('PEXPIREAT', KEYS[6], last)
  -- A retried grant keeps the fence its permit recorded (a permit of an
  -- older version without one gets a fence of its own: other permits may
  -- have taken the next ones meanwhile).
  return done(c, mine, last, now)
end
