-- raise.lua: claim a fence on this node: raise the fence counter to a value
-- if it is below it (never lower it), and record that value as the holder's
-- fence. A claim may name several values (a ladder, ascending), of which
-- the node claims the lowest it can; or it may only record a value.
--
-- KEYS are four of the keys that every script takes in one order, from the
-- lock key on (see internal/keys):
-- KEYS[1] lock key       prefix{K} (read for a plain lock: see below)
-- KEYS[2] fence counter  prefix{K}:fence
-- KEYS[3] tombstones     prefix{K}:dead (not used)
-- KEYS[4] metadata       prefix{K}:meta (see base.lua)
-- ARGV[1] value          the fence a Redlock holder claims (a decimal string)
-- ARGV[2] life           ms the counter lives at least from now, as after an
--                        acquisition (the retention, at least the lock's TTL)
-- ARGV[3] token          the holder's owner token
-- ARGV[4..] values       optional: larger values, ascending, each claimed
--                        instead when the counter holds the ones before it
--                        or more; or ARGV[4] "=": only record ARGV[1] (see
--                        "Record" below)
--
-- Returns {1, value} for the value (ARGV[1] or one of ARGV[4..]) that is
-- the caller's on this node: the lowest it has already (see "Twice"
-- below), else the lowest above the counter (ARGV[1] when there is no
-- counter), to which the counter is moved: the claim is this caller's,
-- since the counter never goes down and no other caller can have moved it
-- from below the value to the value on this node. Returns {0, counter}
-- when the counter already held the largest value or more (another
-- holder's, perhaps the same value), and changes nothing but the counter's
-- life. Used after a quorum acquisition: a fence counts once a majority of
-- the nodes issued it (acquire.lua) or were raised to it here, so that two
-- holders cannot both have it (their majorities share a node), and the next
-- holder's quorum, which shares a node with this one, is given a larger one
-- (see the root package's claimFences). The holder's entry "f:" .. token,
-- written by its grant on this node with the node's own fence, is set to
-- the claimed value if that is above the entry and the command's every
-- value is (a late copy of an earlier claim never changes it), so that
-- Status, Leader and Adopt read the fence the holder has.
--
-- Twice: a command may run twice (a client's retry), and its first copy
-- after later ones. A value is already the caller's, and is answered again
-- with nothing moved, when the holder's entry "f:" .. token holds it (only
-- this token's grant or claims on this node write the entry, with values
-- they moved the counter to, until its fence is decided; then the fence),
-- or, for a plain lock without an entry, when the lock key holds the token
-- and the counter is the value: the holder names here only values at or
-- above the fence its grant issued here, so the counter reached the value
-- while the token held the lock here: by this token's grant or claim, or
-- by a late claim of a holder whose grant here had ended, and whose claims
-- therefore no longer count (they count within its validity, which ends
-- before its grant here does). A late copy that finds the counter below a
-- value moves it up, like a first copy: no other holder can have counted a
-- value the counter had not reached.
--
-- Record: once a majority of the nodes claimed a value for the holder (its
-- fence, decided), the holder's entry on a granting node that claimed
-- another value, or none, is set to it ("="), so that a quorum of the
-- nodes that hold the token tell one fence (see Adopt); nothing else is
-- written. Returns {1, value} when the token has an entry here (it holds
-- the key), now holding the value, else {0, counter} ("0" for none). The
-- entry then names a value the token may not have moved the counter to
-- here: no claim of the holder counts any more, since its fence is decided.
--
-- The comparison is on decimal strings (length first), exact for any
-- 64-bit value; a counter that is not a positive integer, or a value that
-- is not one below 2^63-1 (which base.lua's incr could not increment), or
-- values not ascending, are an error, and nothing is written then.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local c = redis.call('GET', KEYS[2])
if c and not string.match(c, '^[1-9]%d*$') then
  return redis.error_reply('dlock: fence counter ' .. KEYS[2] .. ' does not hold a positive integer')
end
local record = ARGV[4] == '='
local values = {ARGV[1]}
for i = 4, record and 0 or #ARGV do
  values[#values + 1] = ARGV[i]
end
for i, v in ipairs(values) do
  if not string.match(v, '^[1-9]%d*$') or #v > 19 or (#v == 19 and v >= '9223372036854775807') or (i > 1 and not below(values[i - 1], v)) then
    return redis.error_reply('dlock: fence ' .. v .. ' is not a positive integer below 2^63-1, above the one before')
  end
end
local entry = 'f:' .. ARGV[3]
local own = redis.pcall('HGET', KEYS[4], entry) -- a hash of another type: no entry
if type(own) ~= 'string' then
  own = false
end
if record then
  if not own then
    return {0, c or '0'}
  end
  redis.call('HSET', KEYS[4], entry, ARGV[1])
  return {1, ARGV[1]}
end
-- The value the caller has already (see "Twice" above): its entry's, or a
-- plain lock's counter.
local mine = own or (c and redis.pcall('GET', KEYS[1]) == ARGV[3] and c)
for _, v in ipairs(values) do
  if v == mine then
    return {1, v}
  end
end
for _, v in ipairs(values) do
  if not c or below(c, v) then
    redis.call('SET', KEYS[2], v, 'PX', ARGV[2])
    if own and (not string.match(own, '^[1-9]%d*$') or below(own, ARGV[1])) then
      redis.call('HSET', KEYS[4], entry, v)
    end
    return {1, v}
  end
end
local left = redis.call('PTTL', KEYS[2])
if left >= 0 and left < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return {0, c}
