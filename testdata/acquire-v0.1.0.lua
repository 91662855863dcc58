-- acquire.lua: take the lock if it is free, or already ours, or reserved for
-- us; with a limit n > 1, take one of the n permits of a semaphore.
--
-- KEYS[1] lock key       prefix{K}
-- KEYS[2] fence counter  prefix{K}:fence   (lives ARGV[3] ms after the last use, and at
--                                          least as long as a holder: see extend.lua)
-- KEYS[3] waiting set    prefix{K}:waiters (zset: waiter -> queue position)
-- KEYS[4] waiter leases  prefix{K}:wexp    (hash: waiter -> lease end, server ms)
-- KEYS[5] metadata       prefix{K}:meta    (hash: owner token -> metadata, and
--                                          "f:" .. token -> that holder's fence; it
--                                          lives as long as the holders)
-- KEYS[6] limit          prefix{K}:limit   (a semaphore's limit, while it has holders)
-- KEYS[7] tombstones     prefix{K}:dead    (dead tokens: see release.lua)
-- ARGV[1] token          the caller's owner token
-- ARGV[2] ttl            lock TTL in milliseconds
-- ARGV[3] retention      ms the fence counter lives after this acquisition (at least
--                        the TTL of the lock, or of a semaphore's last permit)
-- ARGV[4] metadata       "" for none, else stored under the token in KEYS[5]
-- ARGV[5] limit          "1" for a lock (KEYS[1] a string: the owner token),
--                        n > 1 for a semaphore (KEYS[1] a sorted set: owner
--                        token -> expiry in server ms, for at most n holders)
-- ARGV[6..10], only for an attempt that may register as a waiter (absent: it
-- does not, and takes a free lock with a single SET NX):
-- ARGV[6] waiter         "LOCKERID:SEQ:KEY" (see release.lua for its use)
-- ARGV[7] waiter lease   ms a registration lives without being refreshed
-- ARGV[8] position       the waiter's queue position from an earlier reply, "0" for new
-- ARGV[9] queued         "1" if the waiter may sit in the waiting set (remove it on success)
-- ARGV[10] refresh       "1" to write the registration on failure even if it
--                        is still there (it was popped, or its lease is old)
--
-- Returns {1, fence} on success, the fence as a decimal string. The fence is
-- the server's time in microseconds when the counter does not exist (first
-- use, or the counter was lost: a restart without data, an eviction, its
-- retention running out), and otherwise the larger of the counter + 1 and
-- the server's time rounded down to the second (in microseconds). An
-- increment takes a script run of more than a microsecond, so the counter
-- never runs ahead of the server's clock: a counter started again from the
-- clock is larger than every fence issued before, as long as the clock has
-- not stepped back; and a counter that missed its last increments (a
-- replica promoted after a failover that lost them) is passed by the
-- second's floor once the failover took more than a second. The floor moves
-- once a second, so nodes of a quorum agree on it and their counters stay
-- equal. The arithmetic is exact: the counter is incremented as a decimal
-- string, never through a Lua number (a double, exact only below 2^53).
-- A holder with metadata (a leader: see Campaign) also has its fence kept
-- with its metadata, so that Status and Leader report it even if the
-- counter was lost (an eviction).
-- Nothing is written before the steps that can fail (a counter that is not a
-- positive decimal integer or is at 2^63-1, a metadata key of another type),
-- so a failed call changes nothing; once the lock is written, no step can
-- fail.
-- When the lock already holds ARGV[1] (a retried command whose first reply
-- was lost) the TTL is reset and the current counter is returned without a
-- second increment.
-- Returns {0, pttl, position} on failure: pttl is the holder's remaining TTL in
-- ms (0 when it expires within the millisecond, -1 when the key has no expiry,
-- -3 when it is reserved for a woken waiter, so the wait should not be timed
-- by it); position is the caller's queue position when it is registered as a
-- waiter, else 0. A waiter whose registration vanished (a restart, an
-- eviction, a flush) is registered again.
--
-- A token that release.lua buried (a clean-up after this very command,
-- which reached the server late) is refused with {0, -4, 0}, and nothing
-- is written.
--
-- A value "~WAITER" is a reservation made by release.lua: only that waiter
-- may take the lock until the reservation's short TTL runs out. In a
-- semaphore a reservation is a member "~WAITER" that takes one permit.
--
-- Semaphore: expired permits (and reservations) are pruned on every run, on
-- the server's clock. A permit is granted while fewer than n live ones are
-- held; pttl on failure is the time until the first live one expires. The
-- sorted set and KEYS[6] expire with the last permit. A key held with
-- another limit (a lock held as a semaphore, or the other way round, or
-- another n) is refused with the error "DLOCKLIMIT HELD ASKED", and nothing
-- is written.
-- A waiting set, waiter leases or metadata of another type (keys another
-- program wrote) would make a write fail after others: refuse first.
local token, metadata = ARGV[1], ARGV[4]
local waiter = ARGV[6] or ''
local queued = ARGV[9] == '1'

local buried = redis.call('ZSCORE', KEYS[7], token)
if buried then
  local t = redis.call('TIME')
  if tonumber(buried) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return {0, -4, '0'}
  end
end

local function wrongType(k, want)
  local t = redis.call('TYPE', k)['ok']
  return t ~= 'none' and t ~= want
end
local function refuseWrongTypes(waiters, meta)
  if (waiters and (wrongType(KEYS[3], 'zset') or wrongType(KEYS[4], 'hash'))) or (meta and wrongType(KEYS[5], 'hash')) then
    return redis.error_reply('WRONGTYPE dlock: a waiting set, lease or metadata key of ' .. KEYS[1] .. ' holds another type')
  end
  return false
end
-- incr adds one to a positive decimal integer string (below 2^63-1: no
-- overflow), exactly.
local function incr(s)
  local i = #s
  while i > 0 and string.byte(s, i) == 57 do -- '9'
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.rep('0', #s)
  end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end
-- The counter, read (and checked) before anything is written.
local function counter()
  local c = redis.call('GET', KEYS[2])
  if c and (not string.match(c, '^[1-9]%d*$') or (#c == 19 and c >= '9223372036854775807') or #c > 19) then
    return false, redis.error_reply('dlock: fence counter ' .. KEYS[2] .. ' does not hold a positive integer below 2^63-1')
  end
  return c
end
-- grantable reads the counter and checks the keys a grant writes, before
-- anything is written: it returns the counter, or false and an error reply.
local function grantable()
  local c, bad = counter()
  if bad then
    return false, bad
  end
  local refused = refuseWrongTypes(queued, metadata ~= '')
  if refused then
    return false, refused
  end
  return c
end
-- issue writes and returns the next fence after the counter c (false:
-- none); the counter lives life ms.
local function issue(c, life)
  local t = redis.call('TIME')
  local floor = t[1] .. '000000'
  local fence
  if c and (#c > #floor or (#c == #floor and c >= floor)) then
    fence = incr(c)
  elseif c then
    fence = floor
  else
    fence = t[1] .. string.format('%06d', tonumber(t[2]))
  end
  redis.call('SET', KEYS[2], fence, 'PX', life)
  return fence
end
local function mismatch(held)
  return redis.error_reply('DLOCKLIMIT ' .. held .. ' ' .. ARGV[5])
end
-- prune removes a semaphore's expired permits and their metadata.
local function prune(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    local fields = {}
    for _, m in ipairs(gone) do
      fields[#fields + 1] = m
      fields[#fields + 1] = 'f:' .. m
    end
    redis.pcall('HDEL', KEYS[5], unpack(fields)) -- metadata of another type: left alone
  end
end
-- notString is the reply when the lock key is not a string: a semaphore's
-- holders (a sorted set), or a key of another program (err, WRONGTYPE).
local function notString(err)
  if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then
    return mismatch(redis.call('GET', KEYS[6]) or '?')
  end
  return err
end
-- register writes the waiter's registration if it is new, was popped or is
-- old, or vanished; it returns the queue position, or an error reply.
local function register(waiter, pos)
  local write = pos == '0' or ARGV[10] == '1'
  if not write then
    -- Registered before: make sure it is still there.
    write = redis.call('ZSCORE', KEYS[3], waiter) == false or redis.call('HEXISTS', KEYS[4], waiter) == 0
  end
  if write then
    local refused = refuseWrongTypes(true, false)
    if refused then
      return false, refused
    end
    local t = redis.call('TIME')
    if pos == '0' then
      -- Queue position: server time in microseconds at first registration.
      pos = t[1] .. string.format('%06d', tonumber(t[2]))
    end
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[3], pos, waiter)
    redis.call('HSET', KEYS[4], waiter, now + tonumber(ARGV[7]))
    redis.call('PEXPIRE', KEYS[3], ARGV[7])
    redis.call('PEXPIRE', KEYS[4], ARGV[7])
  end
  return pos
end
-- done finishes a grant: the fence, the holder's entries, the waiter's
-- registration. own: the lock already held the token (a retried command);
-- last: a semaphore's last expiry (server ms, a string), nil for a lock; now: the
-- server's time in ms, for a semaphore.
local function done(c, own, last, now)
  local life = math.max(tonumber(ARGV[3]), tonumber(ARGV[2]))
  if last then
    life = math.max(life, tonumber(last) - now)
  end
  local fence
  if own and c then
    fence = c
    redis.call('SET', KEYS[2], fence, 'PX', life)
  else
    fence = issue(c, life)
  end
  if metadata ~= '' then
    if not last then
      -- A lock has one holder: the entries of former ones go.
      redis.call('DEL', KEYS[5])
    end
    redis.call('HSET', KEYS[5], token, metadata, 'f:' .. token, fence)
    if last then
      redis.call('PEXPIREAT', KEYS[5], last) -- a semaphore's: with the last permit
    else
      redis.call('PEXPIRE', KEYS[5], ARGV[2])
    end
  end
  if queued then
    redis.call('ZREM', KEYS[3], waiter)
    redis.call('HDEL', KEYS[4], waiter)
  end
  return {1, fence}
end
-- busy registers the waiter, if any, and returns the failure reply.
local function busy(pttl)
  local pos = ARGV[8] or '0'
  if waiter ~= '' then
    local p, refused = register(waiter, pos)
    if refused then
      return refused
    end
    pos = p
  end
  return {0, pttl, pos}
end

local c, bad

if ARGV[5] ~= '1' then
  -- A semaphore of ARGV[5] permits.
  local limit = tonumber(ARGV[5])
  local ty = redis.call('TYPE', KEYS[1])['ok']
  if ty == 'string' then
    return mismatch('1')
  elseif ty ~= 'none' and ty ~= 'zset' then
    return redis.error_reply('WRONGTYPE dlock: the semaphore ' .. KEYS[1] .. ' holds another type')
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  local held = redis.call('GET', KEYS[6])
  if live > 0 and held and held ~= ARGV[5] then
    return mismatch(held)
  end
  local mine = redis.call('ZSCORE', KEYS[1], token)
  mine = mine and tonumber(mine) > now
  local resv = waiter ~= '' and redis.call('ZSCORE', KEYS[1], '~' .. waiter)
  resv = resv and tonumber(resv) > now
  if mine or resv or live < limit then
    c, bad = grantable()
    if bad then
      return bad
    end
    prune(now)
    if resv then
      redis.call('ZREM', KEYS[1], '~' .. waiter)
    end
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), token)
    local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
    redis.call('PEXPIREAT', KEYS[1], last)
    redis.call('SET', KEYS[6], ARGV[5], 'PXAT', last)
    -- A retried grant gets a fence of its own too: other permits may
    -- have taken the next ones meanwhile.
    return done(c, false, last, now)
  end
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return busy(math.max(tonumber(first[2]) - now, 0))
end

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
  granted = redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) ~= false
  if not granted then
    v = redis.pcall('GET', KEYS[1])
    if type(v) == 'table' then
      return notString(v)
    end
    if v == token then
      -- A retried command whose first reply was lost.
      redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
      granted = true
    end
  end
else
  -- Most likely held: look first.
  v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    return notString(v)
  end
  if v == false or v == token or v == '~' .. waiter then
    c, bad = grantable()
    if bad then
      return bad
    end
    redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
    granted = true
  end
end

if granted then
  return done(c, v == token)
end

if string.sub(v, 1, 1) == '~' then
  return busy(-3)
end
return busy(redis.call('PTTL', KEYS[1]))
