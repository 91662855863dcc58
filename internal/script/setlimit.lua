-- setlimit.lua: one change of a semaphore's limit (Locker.SetLimit) on one
-- node: the limit of its permits set to NEW, the change recorded, and the
-- waiters that a raise admits woken. A node that missed a change is sent
-- the same command later, to bring it along (see the root package's
-- limit.go).
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
-- ARGV[1] limit          NEW, the new limit n > 1, a decimal string
-- ARGV[2] inbox prefix   as release.lua's ARGV[2]
-- ARGV[3] reserve ms     as release.lua's ARGV[3]: > 0, each woken waiter's
--                        permit is reserved for it this long
-- ARGV[4] grace ms       how long an acquisition that asks for OLD is told
--                        NEW (see semaphore.lua), and the change recorded
-- ARGV[5] listeners      as release.lua's ARGV[7]
-- ARGV[6] slot tag       as release.lua's ARGV[10]
-- ARGV[7] old limit      OLD, the limit that the change replaces (its
--                        acquisitions are sent to NEW), a decimal string;
--                        NEW itself when there is none to send on
-- ARGV[8] op             the change's number, a decimal string: changes
--                        are ordered by (op, token), and a later one wins
-- ARGV[9] token          the change's token, hex
-- ARGV[10] read at       the server time (ms) at which the change's nodes
--                        were read (limitstate.lua): a command that runs
--                        more than ARGV[4] ms after it changes nothing
--
-- KEYS[9] holds the last change applied here, "OLD NEW OP TOKEN", for
-- ARGV[4] ms from when it was applied; KEYS[6] keeps the limit as a decimal
-- string, as every version reads it, and expires with the last permit.
-- Returns {code, woken, limit}; code:
--   1 the key has live permits and its limit is NEW by this change: made
--     now, or by an earlier copy of this command, which a copy repeats
--     nothing of and answers alike; limit is OLD;
--   0 the key has no live permit: the change is recorded (an acquisition
--     that asks for OLD is sent to NEW) and nothing else; limit is OLD;
--   2 a later change is recorded: nothing is written; limit is its NEW;
--   3 the command came more than ARGV[4] ms late: nothing is written;
--  -1 a plain lock (or reserved for one's waiter), -2 shared holds.
-- woken is the number of waiters told. A key of another type fails before
-- anything is written.
--
-- The holders keep their permits: lowering the limit admits no one until
-- fewer than NEW permits are live. A raise wakes as many waiters as it frees
-- permits, 100 at most, each as a semaphore's release wakes one (wake.lua):
-- told on its inbox, its permit reserved for ARGV[3] ms; the next waiter
-- stands in, as after a release. Those not woken are admitted by the next
-- release or their own timers.
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
if clock() - tonumber(ARGV[10]) > tonumber(ARGV[4]) then
  return {3, 0, ''} -- a copy this late could undo a change that is no longer recorded
end
local live = 0
if ty == 'zset' then
  live = redis.call('ZCOUNT', KEYS[2], '(' .. clock(), '+inf')
end
local code = 0
if live > 0 then
  code = 1
end
-- The change recorded here, and where this one stands to it.
local rec = redis.call('GET', KEYS[9])
if rec then
  local rold, rnew, rop, rtoken = string.match(rec, '^(%d+) (%d+) (%d+) (%x+)$')
  if rop == ARGV[8] and rtoken == ARGV[9] then
    return {code, 0, rold} -- this command again
  end
  if rop and (#rop > #ARGV[8] or (#rop == #ARGV[8] and (rop > ARGV[8] or (rop == ARGV[8] and rtoken > ARGV[9])))) then
    return {2, 0, rnew}
  end
end
redis.call('SET', KEYS[9], ARGV[7] .. ' ' .. ARGV[1] .. ' ' .. ARGV[8] .. ' ' .. ARGV[9], 'PX', ARGV[4])
if live == 0 or held == ARGV[1] then
  return {code, 0, ARGV[7]}
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
redis.call('SET', KEYS[6], ARGV[1])
redis.call('PEXPIREAT', KEYS[6], last)
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
return {1, woken, ARGV[7]}
