-- setlimit.lua: change the limit of a semaphore that has holders
-- (Locker.SetLimit), and wake the waiters that a raise admits.
--
-- KEYS, in the order that every script shares (see internal/keys):
-- KEYS[1] waiting set    prefix{K}:waiters
-- KEYS[2] lock key       prefix{K}
-- KEYS[3] fence counter  prefix{K}:fence (not used)
-- KEYS[4] tombstones     prefix{K}:dead (not used)
-- KEYS[5] metadata       prefix{K}:meta (not used)
-- KEYS[6] limit          prefix{K}:limit
-- KEYS[7] waiter leases  prefix{K}:wexp
-- KEYS[8] writers        prefix{K}:writers
-- KEYS[9] old limit      prefix{K}:oldlimit
-- ARGV[1] limit          the new limit n > 1, a decimal string
-- ARGV[2] inbox prefix   as release.lua's ARGV[2]
-- ARGV[3] reserve ms     as release.lua's ARGV[3]: > 0, each woken waiter's
--                        permit is reserved for it this long
-- ARGV[4] grace ms       how long an acquisition that asks for the previous
--                        limit is told the new one (see semaphore.lua)
-- ARGV[5] listeners      as release.lua's ARGV[7]
-- ARGV[6] slot tag       as release.lua's ARGV[10]
-- ARGV[7] old limit      "" or the limit that the other nodes held before
--                        (SetLimit's second round on a quorum): a node with
--                        no live permit keeps "OLD NEW" in KEYS[9] too
--
-- Returns {code, woken, old}: old is the limit held before ("" if none);
-- code 1 when the key's limit is now ARGV[1]
-- (changed, or it was already: a retried command whose reply was lost
-- changes nothing twice), 0 when the key has no live permit (nothing is
-- stored, nothing written), -1 when it is a plain lock (or reserved for
-- one's waiter), -2 when it holds shared holds; woken is the number of
-- waiters told. A key of another type fails before anything is written.
--
-- The holders keep their permits: lowering the limit admits no one until
-- fewer than ARGV[1] permits are live. KEYS[6] keeps the limit as a
-- decimal string, as every version reads it, and expires with the last
-- permit; KEYS[9] holds "OLD NEW" for ARGV[4] ms, so that an acquisition
-- still configured with OLD is admitted against NEW (semaphore.lua). A
-- raise wakes as many waiters as it frees permits, 100 at most, each as a
-- semaphore's release wakes one (wake.lua): told on its inbox, its permit
-- reserved for ARGV[3] ms; the next waiter stands in, as after a release.
-- Those not woken are admitted by the next release or their own timers.
-- #include clock.lua
local INBOX, LISTENERS, TAG = ARGV[2], ARGV[5], ARGV[6] or ''
-- #include wake.lua
local function other(k, want)
  local t = redis.call('TYPE', k)['ok']
  return t ~= 'none' and t ~= want
end
local ty = redis.call('TYPE', KEYS[2])['ok']
if ty == 'string' then
  return {-1, 0, ''}
elseif ty ~= 'zset' and ty ~= 'none' then
  return redis.error_reply('WRONGTYPE dlock: the semaphore ' .. KEYS[2] .. ' holds another type')
end
if other(KEYS[6], 'string') or other(KEYS[9], 'string') or other(KEYS[1], 'zset') or other(KEYS[7], 'hash') then
  return redis.error_reply('WRONGTYPE dlock: a limit, waiting set or lease key of ' .. KEYS[2] .. ' holds another type')
end
local held = redis.call('GET', KEYS[6])
if held == '0' then
  return {-2, 0, ''}
end
local live = 0
if ty == 'zset' then
  live = redis.call('ZCOUNT', KEYS[2], '(' .. clock(), '+inf')
end
if live == 0 then
  if (ARGV[7] or '') ~= '' and ARGV[7] ~= ARGV[1] then
    redis.call('SET', KEYS[9], ARGV[7] .. ' ' .. ARGV[1], 'PX', ARGV[4])
  end
  return {0, 0, ''}
end
if held == ARGV[1] then
  return {1, 0, ''}
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
redis.call('SET', KEYS[6], ARGV[1])
redis.call('PEXPIREAT', KEYS[6], last)
if held then
  redis.call('SET', KEYS[9], held .. ' ' .. ARGV[1], 'PX', ARGV[4])
end
-- A raise: wake as many waiters as there are permits free now.
local free = math.min(tonumber(ARGV[1]) - live, 100)
local woken = 0
local reserve = tonumber(ARGV[3])
for _ = 1, 2 * free do
  if woken >= free then
    break
  end
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then
    break
  end
  if pop(popped[1], clock) then
    woken = woken + 1
    if reserve > 0 then
      redis.call('ZADD', KEYS[2], clock() + reserve, '~' .. popped[1])
    end
  end
end
if woken > 0 and reserve > 0 then
  last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[2], last)
  redis.call('PEXPIREAT', KEYS[6], last)
end
if woken > 0 then
  standIn() -- as after a release: in case a woken waiter died
end
return {1, woken, held or ''}
