-- renew.lua: reset the TTL of plain locks (limit 1, no metadata) that still
-- hold their owners' tokens, and keep each one's fence counter alive as
-- long as its holder: a plain lock's renewal, the everyday path. It is
-- extend.lua's path for that shape (without a regain), on the same data
-- (see base.lua's header for what each key holds), one lock or several at
-- once (a Locker's renewals of the locks due together, see the root
-- package's renewals.go), with nothing defined or checked first.
--
-- KEYS are pairs, one per lock, a run of the order that every script
-- shares (see internal/keys); on a Cluster every pair in one slot:
-- KEYS[2g+1] lock key       prefix{K}
-- KEYS[2g+2] fence counter  prefix{K}:fence
-- ARGV[1] ttl            new TTL in milliseconds, counted from now
-- ARGV[2] retention      ms the fence counter lives after its last use
-- Then one pair of arguments per lock, in the same order:
-- ARGV[2g+3] token       the owner token
-- ARGV[2g+4] fence       the holder's fence (a decimal string)
--
-- Returns an array with one element per lock, in order: 1 if the key held
-- the token and lives at least the TTL from now (its expiry is set to that,
-- or kept where it is later: a renewal never moves an expiry earlier, so
-- that a copy of an earlier command run late, after a later one set a
-- longer TTL, cannot cut it short); 0 if it holds another value (another
-- owner, a reservation) or is not a string (a semaphore's permits, shared
-- holds); -1 if it is free. When it returns 1 the fence counter lives at
-- least as long as the holder (and the retention) and holds at least the
-- holder's fence: a counter lost meanwhile (an eviction), below the
-- holder's fence or not a decimal integer, is set to the holder's fence,
-- which, a plain lock's holder having the key's latest (nothing is granted
-- while it holds the key), is above every fence issued before, so that the
-- next holder's fence is larger than every one issued, and so that the
-- counter tells the holder's fence again (Adopt reads it there on one
-- Redis). The comparison is on decimal strings (length first), exact for
-- any 64-bit value. A counter of another type is that lock's error reply,
-- before it writes anything; the other locks run as if it were alone.
local ttl, life = tonumber(ARGV[1]), math.max(tonumber(ARGV[2]), tonumber(ARGV[1]))
local out = {}
for g = 0, #KEYS / 2 - 1 do
  local lock, counter = KEYS[2 * g + 1], KEYS[2 * g + 2]
  local token, fence = ARGV[2 * g + 3], ARGV[2 * g + 4]
  local v = redis.pcall('GET', lock)
  local c = redis.pcall('GET', counter)
  if v ~= token then
    if v == false then
      out[#out + 1] = -1
    else
      out[#out + 1] = 0 -- another owner, a reservation, or not a string
    end
  elseif type(c) == 'table' then
    out[#out + 1] = c -- WRONGTYPE: not written by dlock
  else
    if not c or not string.match(c, '^[1-9]%d*$') or #c < #fence or (#c == #fence and c < fence) then
      redis.call('SET', counter, fence, 'PX', life)
    else
      local left = redis.call('PTTL', counter)
      if left >= 0 and left < life then
        redis.call('PEXPIRE', counter, life)
      end
    end
    if redis.call('PTTL', lock) < ttl then
      redis.call('PEXPIRE', lock, ttl)
    end
    out[#out + 1] = 1
  end
end
return out
