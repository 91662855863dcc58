-- adopt.lua: take on a hold that another process (or another Locker)
-- acquired, given its token: extend.lua's work for one group (one lock), with
-- the holder's fence and metadata read on this node first, and both
-- returned, so that Adopt is one round trip. It writes only what
-- extend.lua writes for the holder (the lock's TTL, the counter's life,
-- the holder's entries in the metadata hash); it never takes a free key.
--
-- KEYS, extend.lua's group of five of the keys that every script takes in
-- one order (see internal/keys):
-- KEYS[1] lock key       prefix{K} (a string; a sorted set of permits)
-- KEYS[2] fence counter  prefix{K}:fence
-- KEYS[3] tombstones     prefix{K}:dead
-- KEYS[4] metadata       prefix{K}:meta ("f:" .. token -> the holder's fence)
-- KEYS[5] limit          prefix{K}:limit
-- ARGV[1] token          the owner token of the hold to adopt
-- ARGV[2] ttl            new TTL in milliseconds, counted from now
-- ARGV[3] retention      ms the fence counter lives after its last use
-- ARGV[4] limit          "1" for a lock, n > 1 for a semaphore, "0" for a
--                        shared hold (as extend.lua's)
--
-- Returns {r, fence, metadata}. r is extend.lua's group reply: 1 if the
-- token holds the key (a live permit of it) in the shape ARGV[4] names and
-- its TTL was set, 0 if the key holds another value (or all permits are
-- taken, or another shape), -1 if it is free (or the token's permit is
-- gone); a buried token is never set again. fence is the holder's fence (a
-- decimal string): its "f:" entry (written by grants and renewals of a
-- permit, a shared hold or a holder with metadata, and by raise.lua), else,
-- for a lock, the fence counter once extended (a lock's one holder got the
-- key's latest fence: nothing is granted while it holds the key, and a
-- counter lost meanwhile is set above every fence issued, see extend.lua),
-- "" when r is not 1. metadata is the holder's, "" for none. A permit or
-- shared hold without an "f:" entry (granted by a version before the
-- entry) is an error, before anything is written, as is a key of another
-- type.
local token, limit = ARGV[1], ARGV[4]
local m = redis.pcall('HMGET', KEYS[4], token, 'f:' .. token)
if m.err then
  return m -- WRONGTYPE: not written by dlock
end
local metadata, fence = m[1] or '', m[2]
if not fence and limit == '1' then
  local c = redis.pcall('GET', KEYS[2])
  if type(c) == 'table' then
    return c
  end
  fence = c -- nil when the counter was lost: extend.lua sets it again
elseif not fence then
  local s = redis.pcall('ZSCORE', KEYS[1], token)
  local t = redis.call('TIME')
  if type(s) == 'string' and tonumber(s) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return redis.error_reply('dlock: adopt.lua: no fence recorded for this permit (granted by an older dlock): adopt it after its first renewal')
  end
  fence = '1' -- not a live permit of the token here: extend.lua refuses it
end

-- extendScript is extend.lua, run with its own KEYS and ARGV (as
-- parameters: they hide the script's).
local function extendScript(KEYS, ARGV)
  -- #include extend.lua
end

local out = extendScript(KEYS, {ARGV[2], '0', ARGV[3], token, metadata, limit, fence or '1'})
local r = out[1]
if type(r) == 'table' then
  return r -- an error reply of the group
end
if r ~= 1 then
  return {r, '', ''}
end
if not fence then
  fence = redis.call('GET', KEYS[2]) -- a lock's: set by extend.lua if it was lost
end
return {r, fence, metadata}
