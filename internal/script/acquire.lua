-- acquire.lua: take the lock if it is free, or already ours, or reserved for
-- us; with a limit n > 1, take one of the n permits of a semaphore.
--
-- KEYS, in the order that every script shares (see internal/keys):
-- KEYS[1] waiting set    prefix{K}:waiters (zset: waiter -> queue position)
-- KEYS[2] lock key       prefix{K}
-- KEYS[3] fence counter  prefix{K}:fence   (lives ARGV[3] ms after the last use, and at
--                                          least as long as a holder: see extend.lua)
-- KEYS[4] tombstones     prefix{K}:dead    (dead tokens: see release.lua)
-- KEYS[5] metadata       prefix{K}:meta    (hash: owner token -> metadata, and
--                                          "f:" .. token -> that holder's fence; it
--                                          lives as long as the holders)
-- KEYS[6] limit          prefix{K}:limit   (a semaphore's limit, while it has holders)
-- KEYS[7] waiter leases  prefix{K}:wexp    (hash: waiter -> lease end, server ms;
--                                          and "i:" .. an exclusive waiter -> the
--                                          end of its intent, server ms)
-- KEYS[8] writers        prefix{K}:writers (zset: an exclusive waiter with an intent
--                                          -> its queue position; see "Shared
--                                          holds")
-- ARGV[1] token          the caller's owner token
-- ARGV[2] ttl            lock TTL in milliseconds
-- ARGV[3] retention      ms the fence counter lives after this acquisition (at least
--                        the TTL of the lock, or of a semaphore's last permit)
-- ARGV[4] metadata       "" for none, else stored under the token in KEYS[5]
-- ARGV[5] limit          "1" for a lock (KEYS[2] a string: the owner token),
--                        n > 1 for a semaphore (KEYS[2] a sorted set: owner
--                        token -> expiry in server ms, for at most n holders),
--                        "0" for a shared hold (KEYS[2] a sorted set as a
--                        semaphore's, of any number of holders; KEYS[6] "0")
-- ARGV[6..10], only for an attempt that may register as a waiter (absent: it
-- does not, and takes a free lock with a single SET NX):
-- ARGV[6] waiter         "LOCKERID:SEQ:KEY", SEQ beginning with "r" for a shared
--                        hold's waiter (see release.lua for its use)
-- ARGV[7] waiter lease   ms a registration lives without being refreshed
-- ARGV[8] position       the waiter's queue position from an earlier reply, "0" for new
-- ARGV[9] queued         "1" if the waiter may sit in the waiting set (remove it on success)
-- ARGV[10] refresh       "1" to write the registration on failure even if it
--                        is still there (it was popped, or its lease is old)
-- ARGV[11..14], only for a shared hold's waiter (absent: its grant wakes no
-- one), as release.lua's ARGV[2], ARGV[7], ARGV[10] and ARGV[3]:
-- ARGV[11] inbox prefix, ARGV[12] listeners, ARGV[13] slot tag, ARGV[14]
-- reserve ms
--
-- Returns {1, fence} on success, the fence as a decimal string. The fence is
-- the server's time in microseconds when the counter does not exist (first
-- use, or the counter was lost: a restart without data, an eviction, its
-- retention running out), and otherwise the larger of the counter + 1 and
-- the server's time rounded down to the second (in microseconds). An
-- increment takes a script run of more than a microsecond, so the counter
-- does not run ahead of the server's clock (on a Redlock, a holder that
-- finds its fence claimed by another raises the counters a few
-- microseconds further: see the root package's claimFences): a counter started again from the
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
-- is written. (A plain lock's waiter whose attempt finds the lock held by
-- another and its registration intact, and so writes nothing, answers busy
-- without looking: an idle waiter's attempt costs one command less.)
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
-- program wrote) would make a write fail after others: a grant checks the
-- metadata key first (and the waiting keys when it writes them: a shared
-- grant that wakes others), and removes its waiter's entries leaving keys
-- of another type alone; a registration's first write fails, or its second,
-- which undoes the first.
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
-- and reads two commands (16 intents at most): dead intents at the head
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
local token, metadata = ARGV[1], ARGV[4]
local waiter = ARGV[6] or ''
local queued = ARGV[9] == '1'
local exclusive = ARGV[5] == '1'

-- buried reports whether the token was buried (see above): every path
-- that writes asks it first.
local function buried()
  local d = redis.call('ZSCORE', KEYS[4], token)
  if not d then
    return false
  end
  local t = redis.call('TIME')
  return tonumber(d) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local refusedBuried = {0, -4, '0'}
if (waiter == '' or not exclusive) and buried() then
  return refusedBuried -- a plain lock's waiter asks below, where it may write
end

local function wrongType(k, want)
  local t = redis.call('TYPE', k)['ok']
  return t ~= 'none' and t ~= want
end
local function refuseWrongTypes(waiters, meta)
  if (waiters and (wrongType(KEYS[1], 'zset') or wrongType(KEYS[7], 'hash') or wrongType(KEYS[8], 'zset'))) or (meta and wrongType(KEYS[5], 'hash')) then
    return redis.error_reply('WRONGTYPE dlock: a waiting set, lease, writers or metadata key of ' .. KEYS[2] .. ' holds another type')
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
  local c = redis.call('GET', KEYS[3])
  if c and (not string.match(c, '^[1-9]%d*$') or (#c == 19 and c >= '9223372036854775807') or #c > 19) then
    return false, redis.error_reply('dlock: fence counter ' .. KEYS[3] .. ' does not hold a positive integer below 2^63-1')
  end
  return c
end
-- grantable reads the counter and checks the keys a grant writes, before
-- anything is written: it returns the counter, or false and an error reply.
-- waiters: the grant writes the waiting keys (a shared grant that wakes
-- others); else it only removes the caller's entries, and leaves keys of
-- another type alone.
local function grantable(waiters)
  local c, bad = counter()
  if bad then
    return false, bad
  end
  local refused = refuseWrongTypes(waiters, metadata ~= '')
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
  redis.call('SET', KEYS[3], fence, 'PX', life)
  return fence
end
local function mismatch(held)
  return redis.error_reply('DLOCKLIMIT ' .. held .. ' ' .. ARGV[5])
end
-- prune removes a semaphore's expired permits and their metadata.
local function prune(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    for _, m in ipairs(gone) do
      redis.pcall('HDEL', KEYS[5], m, 'f:' .. m) -- metadata of another type: left alone
    end
  end
end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- register writes the waiter's registration if it is new, was popped or is
-- old, or vanished; it returns the queue position, or an error reply.
local function register(waiter, pos)
  local write = pos == '0' or ARGV[10] == '1'
  if not write then
    -- Registered before: make sure it is still there.
    write = redis.call('ZSCORE', KEYS[1], waiter) == false or redis.call('HEXISTS', KEYS[7], waiter) == 0
  end
  if write then
    if buried() then
      return false, refusedBuried
    end
    local t = redis.call('TIME')
    local nx = false
    if pos == '0' then
      -- Queue position: server time in microseconds at first registration
      -- (NX: a registration already there, whose reply was lost, keeps
      -- its place).
      pos = t[1] .. string.format('%06d', tonumber(t[2]))
      nx = true
    end
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    -- A waiting set or leases of another type (another program's keys)
    -- fail one of these two writes: the first, or the second, which then
    -- undoes the first (a member it added; one already there it left as
    -- it was), so that nothing is written.
    local added
    if nx then
      added = redis.pcall('ZADD', KEYS[1], 'NX', pos, waiter)
    else
      added = redis.pcall('ZADD', KEYS[1], pos, waiter)
    end
    if type(added) == 'table' then
      return false, added
    end
    if added == 0 and nx then
      pos = redis.call('ZSCORE', KEYS[1], waiter)
    end
    local leased = redis.pcall('HSET', KEYS[7], waiter, now + tonumber(ARGV[7]))
    if type(leased) == 'table' then
      if added == 1 then
        redis.call('ZREM', KEYS[1], waiter)
      end
      return false, leased
    end
    -- Every entry of the two (an intent's end too: see intend) ends
    -- within ARGV[7] ms.
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    redis.call('PEXPIRE', KEYS[7], ARGV[7])
  end
  return pos
end
-- intentLife is how long an exclusive waiter's intent lasts after its
-- attempt: its TTL, at most its registration's lease (ARGV[7]), so that the
-- leases key, which lives a lease after each registration and intent,
-- outlives it; the waiter attempts again within a third of it (see onSet).
local function intentLife()
  return math.min(tonumber(ARGV[2]), tonumber(ARGV[7] or ARGV[2]))
end
-- intend writes an exclusive waiter's intent, at its queue position pos: it
-- ends intentLife() from now.
local function intend(pos)
  redis.call('ZADD', KEYS[8], pos, waiter)
  redis.call('HSET', KEYS[7], 'i:' .. waiter, clock() + intentLife())
  redis.call('PEXPIRE', KEYS[7], ARGV[7])
  redis.call('PEXPIRE', KEYS[8], ARGV[7])
end
-- deadIntents: the dead intents that writerAhead passed, removed by
-- pruneIntents once nothing can fail.
local deadIntents = {}
-- writerAhead returns the ms until the intent of the first writer ahead of a
-- waiter at queue position mine ends (mine 0: a caller not queued, which
-- every writer is ahead of), or false when there is none (see "Shared
-- holds"). It writes nothing.
local function writerAhead(now, mine)
  local ws = redis.call('ZRANGE', KEYS[8], 0, 15, 'WITHSCORES')
  for j = 1, #ws, 2 do
    local e = tonumber(redis.call('HGET', KEYS[7], 'i:' .. ws[j]) or '0')
    if e > now then
      if mine == 0 or tonumber(ws[j + 1]) < mine then
        return math.max(e - now, 1)
      end
      return false
    end
    deadIntents[#deadIntents + 1] = ws[j]
  end
  if #ws == 32 then
    return 1 -- 16 dead intents: once they are removed, the next ones
  end
  return false
end
local function pruneIntents()
  for _, w in ipairs(deadIntents) do
    redis.call('ZREM', KEYS[8], w)
    redis.call('HDEL', KEYS[7], 'i:' .. w)
  end
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
    redis.call('SET', KEYS[3], fence, 'PX', life)
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
  -- The waiter's entries go (keys of another type: left alone).
  if queued then
    redis.pcall('ZREM', KEYS[1], waiter)
    redis.pcall('HDEL', KEYS[7], waiter, 'i:' .. waiter)
  end
  if waiter ~= '' and exclusive and redis.pcall('ZREM', KEYS[8], waiter) == 1 and not queued then
    redis.pcall('HDEL', KEYS[7], 'i:' .. waiter)
  end
  return {1, fence}
end
-- busy registers the waiter, if any, and returns the failure reply; with
-- intent, an exclusive waiter's intent too (see "Shared holds").
local function busy(pttl, intent)
  local pos = ARGV[8] or '0'
  if waiter ~= '' then
    if intent then
      local refused = refuseWrongTypes(true, false)
      if refused then
        return refused
      end
    end
    local p, refused = register(waiter, pos)
    if refused then
      return refused
    end
    pos = p
    if intent then
      intend(pos)
    end
  end
  pruneIntents()
  return {0, pttl, pos}
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
-- or false) and returns the reply.
local function permit(c, now, resv, wake)
  prune(now)
  pruneIntents()
  if resv then
    redis.call('ZREM', KEYS[2], '~' .. waiter)
  end
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), token)
  if wake then
    wake(now)
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[2], last)
  redis.call('SET', KEYS[6], ARGV[5])
  redis.call('PEXPIREAT', KEYS[6], last)
  -- A retried grant gets a fence of its own too: other permits may
  -- have taken the next ones meanwhile.
  return done(c, false, last, now)
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

if ARGV[5] == '0' then
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
  return permit(c, now, resv, wake)
end

local c, bad

if not exclusive then
  -- A semaphore of ARGV[5] permits.
  local limit = tonumber(ARGV[5])
  local ty = redis.call('TYPE', KEYS[2])['ok']
  if ty == 'string' then
    return mismatch('1')
  elseif ty ~= 'none' and ty ~= 'zset' then
    return redis.error_reply('WRONGTYPE dlock: the semaphore ' .. KEYS[2] .. ' holds another type')
  end
  local now = clock()
  local live = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
  local held = redis.call('GET', KEYS[6])
  if live > 0 and held and held ~= ARGV[5] then
    return mismatch(held)
  end
  local mine, resv = claims(now)
  if mine or resv or live < limit then
    c, bad = grantable(false)
    if bad then
      return bad
    end
    return permit(c, now, resv, false)
  end
  local first = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
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
  granted = redis.call('SET', KEYS[2], token, 'NX', 'PX', ARGV[2]) ~= false
  if not granted then
    v = redis.pcall('GET', KEYS[2])
    if type(v) == 'table' then
      return onSet(v)
    end
    if v == token then
      -- A retried command whose first reply was lost.
      redis.call('SET', KEYS[2], token, 'PX', ARGV[2])
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
    redis.call('SET', KEYS[2], token, 'PX', ARGV[2])
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
