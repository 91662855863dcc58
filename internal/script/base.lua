-- base.lua: what acquire.lua (a lock), semaphore.lua and shared.lua share:
-- their KEYS and ARGV, the fence, the tombstones, the types of the keys.
-- Each includes it, then queue.lua and grant.lua (see script.go's
-- include), at its top: the three are one script's parts, split by shape.
--
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
--                                          "i:" .. an exclusive waiter -> the
--                                          end of its intent, server ms; and
--                                          "m:" .. a waiter with metadata -> its
--                                          metadata, for Status)
-- KEYS[8] writers        prefix{K}:writers (zset: an exclusive waiter with an intent
--                                          -> its queue position; see shared.lua's "Shared
--                                          holds")
-- KEYS[9] old limit      prefix{K}:oldlimit (a string "OLD NEW OP TOKEN" for a grace
--                                          after Locker.SetLimit changed a semaphore's limit
--                                          from OLD to NEW: see setlimit.lua; semaphore.lua's only)
-- ARGV[1] token          the caller's owner token
-- ARGV[2] ttl            lock TTL in milliseconds
-- ARGV[3] retention      ms the fence counter lives after this acquisition (at least
--                        the TTL of the lock, or of a semaphore's last permit)
-- ARGV[4] metadata       "" for none, else stored under the token in KEYS[5]
--                        (and, while the caller waits, beside its lease in KEYS[7])
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
-- ARGV[9] queued         "1" if the waiter may sit in the waiting set (remove it on success);
--                        "p" if a release popped it (it wrote no intent and was
--                        not registered since): only its lease is left to remove
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
-- counter was lost (an eviction); so does every permit (a semaphore's, a
-- shared hold's), whose fence the counter does not tell (Adopt reads it).
-- Nothing is written before the steps that can fail (a counter that is not a
-- positive decimal integer or is at 2^63-1, a metadata key of another type),
-- so a failed call changes nothing; once the lock is written, no step can
-- fail.
-- When the key already holds ARGV[1] (a lock held by it, or a live permit
-- of it: a copy of the command that ran before, because a client sent it
-- again after its first reply was lost, or a copy that runs late, after
-- later commands of the hold) the hold's fence is returned again (the one
-- recorded with it, "f:" .. token, else a lock's counter) without a second
-- increment, no expiry is moved earlier (a later command may have set a
-- later one), and a shared grant wakes nobody again. A copy that runs after
-- the hold was released finds its token buried (see release.lua).
-- Returns {0, pttl, position} on failure: pttl is the holder's remaining TTL in
-- ms (0 when it expires within the millisecond, -1 when the key has no expiry,
-- -3 when it is reserved for a woken waiter, so the wait should not be timed
-- by it); position is the caller's queue position when it is registered as a
-- waiter, else 0; an exclusive waiter that wrote its intent (see shared.lua)
-- gets a fourth element, 1. A waiter whose registration vanished (a
-- restart, an eviction, a flush) is registered again.
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
-- A waiting set, waiter leases or metadata of another type (keys another
-- program wrote) would make a write fail after others: a grant checks the
-- metadata key first (and the waiting keys when it writes them: a shared
-- grant that wakes others), and removes its waiter's entries leaving keys
-- of another type alone; a registration's first write fails, or its second,
-- which undoes the first.
local token, metadata = ARGV[1], ARGV[4]
local waiter = ARGV[6] or ''
local popped = ARGV[9] == 'p'
local queued = ARGV[9] == '1' or popped
local exclusive = ARGV[5] == '1'
-- record: a lock's waiter records its fence with the hold ("f:" .. token in
-- KEYS[5], as a permit does), which Adopt reads on a Redlock, whose counters
-- move (lock.lua records it there too, given KEYS[4]).
local record = exclusive and waiter ~= ''

-- buried reports whether the token was buried (see "Returns" above): every path
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
  local refused = refuseWrongTypes(waiters, metadata ~= '' or record)
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
      redis.pcall('HDEL', KEYS[5], m, 'f:' .. m, 'l:' .. m) -- metadata of another type: left alone
    end
  end
end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
