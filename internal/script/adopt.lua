-- adopt.lua: take on a hold that another process (or another Locker)
-- acquired, given its token: extend.lua's work for one group (one lock), with
-- the hold's shape checked and its fence and metadata read on this node
-- first, and returned, so that Adopt is one round trip. It writes only what
-- extend.lua writes for the holder (the lock's TTL, never moved earlier; the
-- counter's life; the holder's entries in the metadata hash: its fence
-- recorded there, and the limit a permit whose limit SetLimit moved is now
-- one of); it never takes a free key.
--
-- KEYS, a run of the order that every script takes its keys in (see
-- internal/keys): extend.lua's group of five, then three more:
-- KEYS[1] lock key       prefix{K} (a string; a sorted set of permits)
-- KEYS[2] fence counter  prefix{K}:fence
-- KEYS[3] tombstones     prefix{K}:dead
-- KEYS[4] metadata       prefix{K}:meta ("f:" .. token -> the holder's fence)
-- KEYS[5] limit          prefix{K}:limit
-- KEYS[6] waiter leases  prefix{K}:wexp (not used)
-- KEYS[7] writers        prefix{K}:writers (not used)
-- KEYS[8] old limit      prefix{K}:oldlimit ("OLD NEW ..." after SetLimit)
-- ARGV[1] token          the owner token of the hold to adopt
-- ARGV[2] ttl            new TTL in milliseconds, counted from now
-- ARGV[3] retention      ms the fence counter lives after its last use
-- ARGV[4] limit          "1" for a lock, n > 1 for a semaphore, "0" for a
--                        shared hold (as extend.lua's)
--
-- Returns {r, fence, metadata, limit} or, refused for the shape, {0, "",
-- "", limit, 1} (the token may hold the key in that other shape: a failed
-- Adopt must leave it be). r is extend.lua's group reply: 1 if
-- the token holds the key in the shape ARGV[4] names and its TTL was set, 0
-- if the key holds another value (another owner, all permits taken) or is
-- held in another shape, -1 if it is free (or the token's permit is gone); a
-- buried token is never set again. The shape is the key's type and stored
-- limit: a lock is a string; a permit of n (n > 1) a member of a sorted set
-- whose limit key holds n, or holds m where Locker.SetLimit changed the
-- limit since the permit was known by n (its "l:" entry: the limit of its
-- grant, then each limit an Adopt made it a permit of, separated by spaces;
-- for a permit of a version before the entry, the last change's record,
-- "n m ..."), and then limit is m, added to the "l:" entry: the adopted
-- permit is one of the semaphore's limit, and a later Adopt with the limit
-- its Handoff names (m), or with any it was known by (a retry, a copy of
-- this one run late), finds it so; a shared hold a member of one whose
-- limit key holds "0". fence is the holder's fence (a
-- decimal string): its "f:" entry (written by grants and renewals of a
-- permit, a shared hold, a holder with metadata, and a lock on a Redlock, and
-- by raise.lua), else, for a lock, the fence counter (a lock's one holder got
-- the key's latest: nothing is granted while it holds the key, and
-- renew.lua restores a lost counter to it). When neither is there (the
-- counter was lost, an eviction, and no renewal restored it yet), the
-- hold's fence is no longer known on this node: a new one is given, the
-- server's time in microseconds, larger than every fence issued before (the
-- counter never runs ahead of the clock), recorded from then on as the
-- hold's. fence is "" when r is not 1. metadata is the holder's, "" for
-- none. limit is ARGV[4], or NEW for a permit whose limit SetLimit moved. A
-- permit or shared hold without an "f:" entry (granted by a version before
-- the entry) is an error, before anything is written, as is a key of
-- another type.
local token, limit = ARGV[1], ARGV[4]
local m = redis.pcall('HMGET', KEYS[4], token, 'f:' .. token, 'l:' .. token)
if m.err then
  return m -- WRONGTYPE: not written by dlock
end
local metadata, fence, granted = m[1] or '', m[2], m[3]
local other = {0, '', '', limit, 1} -- held in another shape (perhaps by this token: the fifth element)
local known -- the limits the permit was known by, where SetLimit moved it
if limit ~= '1' then
  local ty = redis.call('TYPE', KEYS[1])['ok']
  local held = redis.call('GET', KEYS[5])
  if ty == 'string' or (ty == 'zset' and not held) then
    -- A lock; or permits whose limit key was lost (an eviction): their
    -- shape cannot be told, and extend.lua would write this one's limit.
    return other
  end
  if ty == 'zset' and held and held ~= limit then
    local old, new = string.match(redis.call('GET', KEYS[8]) or '', '^(%d+) (%d+)')
    known = granted or (new == held and old) or ''
    if limit == '0' or held == '0' or not string.find(' ' .. known .. ' ', ' ' .. limit .. ' ', 1, true) then
      return other
    end
    limit = held -- moved by SetLimit
  end
end
if not fence and limit == '1' then
  local c = redis.pcall('GET', KEYS[2])
  if type(c) == 'table' then
    return c
  end
  fence = c
  if not fence and redis.pcall('GET', KEYS[1]) == token then
    local t = redis.call('TIME')
    fence = t[1] .. string.format('%06d', tonumber(t[2]))
  end
elseif not fence then
  local s = redis.pcall('ZSCORE', KEYS[1], token)
  local t = redis.call('TIME')
  if type(s) == 'string' and tonumber(s) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return redis.error_reply('dlock: adopt.lua: no fence recorded for this permit (granted by an older dlock): adopt it after its first renewal')
  end
end

-- extendScript is extend.lua, run with its own KEYS and ARGV (as
-- parameters: they hide the script's).
local function extendScript(KEYS, ARGV)
  -- #include extend.lua
end

local out = extendScript({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]},
  {ARGV[2], '0', ARGV[3], token, metadata, limit, fence or '1'})
local r = out[1]
if type(r) == 'table' then
  return r -- an error reply of the group
end
if r ~= 1 then
  return {r, '', '', limit}
end
if known and not string.find(' ' .. known .. ' ', ' ' .. limit .. ' ', 1, true) then
  redis.call('HSET', KEYS[4], 'l:' .. token, known .. ' ' .. limit)
end
return {r, fence, metadata, limit}
