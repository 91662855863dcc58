-- extend.lua: reset the lock's TTL if the caller still owns it; optionally
-- take the key back where it is free. Keep the fence counter alive as long
-- as the holder. A plain lock without metadata that is not regained has
-- renew.lua, its path alone; this script is every other shape's.
--
-- It does so for one lock or several at once (a Locker's renewals of the
-- locks due together, see the root package's renewals.go): KEYS are groups
-- of 5 keys, one group per lock; ARGV[1..3] are for every group, then come
-- groups of 4 arguments, one per lock, in the same order. On a Cluster
-- every group's keys are in one slot. The reply is an array with one
-- element per group, in order: the group's reply below, or its error reply.
-- An error of one group (a key of another type) comes before that group
-- writes anything, and the other groups run as if it were alone.
--
-- For group g (0, 1, …), the first 5 of the keys that every script takes
-- in one order (see internal/keys):
-- KEYS[5g+1] lock key       prefix{K} (a string; a sorted set for a semaphore, see semaphore.lua)
-- KEYS[5g+2] fence counter  prefix{K}:fence
-- KEYS[5g+3] tombstones     prefix{K}:dead (see release.lua)
-- KEYS[5g+4] metadata       prefix{K}:meta (see base.lua)
-- KEYS[5g+5] limit          prefix{K}:limit (a semaphore's)
-- ARGV[1] ttl            new TTL in milliseconds, counted from now
-- ARGV[2] regain         "1" to set the key to the token when it is free: only sent
--                        to nodes that answered -1, after a quorum of the others
--                        confirmed that the caller holds the lock (so nobody else
--                        can hold a quorum), to restore a Redlock lock's spare
--                        nodes; "0" otherwise (a token that release.lua buried
--                        is not set again: -1)
-- ARGV[3] retention      ms the fence counter lives after its last use
-- Then:
-- ARGV[4g+4] token       the owner token
-- ARGV[4g+5] metadata    "" for none; else the lock's metadata, whose TTL follows
--                        the lock's (and which a regain writes again)
-- ARGV[4g+6] limit       "1" for a lock, n > 1 for a semaphore, "0" for a shared
--                        hold (a semaphore without a limit, see shared.lua)
-- ARGV[4g+7] fence       the holder's fence (a decimal string)
--
-- A group's reply is 1 if the key held the token (or was free and regain
-- is "1") and now lives at least the TTL from now, 0 if it holds another
-- value (another owner, a reservation), -1 if it is free. For a semaphore:
-- 1 if the token is a live permit (or a permit was free and regain is
-- "1"), and its expiry is at least the TTL from now; -1 if it is not and a
-- permit is free; 0 if all are taken. An expiry is never moved earlier
-- (a key, a permit, the holder's entries): a copy of an earlier command
-- that runs late, after a later one set a longer TTL (a client's retry whose
-- first copy was held up), cannot cut the hold short. An Extend to a
-- shorter TTL therefore takes effect as the longer one runs out.
--
-- When it returns 1 it has also made sure that the fence counter lives at
-- least as long as the holder (and the retention), and holds at least the
-- holder's fence: a counter lost meanwhile (an eviction), or below the
-- holder's fence, is set to that fence for a lock (its one holder has the
-- key's latest), and for a permit to the larger of that fence and the
-- server's time in microseconds, which is above every fence issued before
-- (see base.lua: the counter never runs ahead of the clock), so that the
-- next holder's fence is larger than every one issued, the other permits'
-- of a semaphore included; and the holder's fence is recorded with it in
-- KEYS[4] ("f:" .. token, beside its metadata if it has any; correcting a
-- grant that ran late on this node and counted its own), where Adopt reads
-- it. The comparison is on decimal strings (length first), exact for any
-- 64-bit value. Errors (keys of another type) come before any write.

-- extend is the work of one group, given its keys as KEYS[1..5] (in the
-- order above) and its arguments as ARGV: [1] token, [2] ttl, [3] regain,
-- [4] metadata, [5] limit, [6] fence, [7] retention.
local function extend(KEYS, ARGV)
  local token, fence = ARGV[1], ARGV[6]
  local c = redis.pcall('GET', KEYS[2])
  if type(c) == 'table' then
    return c -- WRONGTYPE: not written by dlock
  end
  -- buried reports whether the token was buried (see release.lua): a regain
  -- of it, run late, must not set the key again.
  local function buried()
    local d = redis.call('ZSCORE', KEYS[3], token)
    if not d then
      return false
    end
    local t = redis.call('TIME')
    return tonumber(d) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end

  -- below reports whether the decimal string a is less than b.
  local function below(a, b)
    return #a < #b or (#a == #b and a < b)
  end
  -- keep refreshes the counter for a holder that lives ttl ms more: a
  -- counter lost, or below the fence, is set to the fence (a lock's holder
  -- has the key's latest) or, for a permit (other permits may have later
  -- ones), to the larger of the fence and the server's time in microseconds.
  local function keep(ttl)
    local life = math.max(tonumber(ARGV[7]), ttl)
    if not c or not string.match(c, '^[1-9]%d*$') or below(c, fence) then
      local v = fence
      if ARGV[5] ~= '1' then
        local t = redis.call('TIME')
        v = t[1] .. string.format('%06d', tonumber(t[2]))
        if below(v, fence) then
          v = fence
        end
      end
      redis.call('SET', KEYS[2], v, 'PX', life)
      return
    end
    local left = redis.call('PTTL', KEYS[2])
    if left >= 0 and left < life then
      redis.call('PEXPIRE', KEYS[2], life)
    end
  end
  -- holder writes the holder's entries: its metadata, if it has any, and
  -- its fence, which Adopt reads ("f:" .. token); a permit's live until
  -- last (the semaphore's last permit), a lock's as long as the key (set
  -- by the caller once the key's expiry is). A permit without metadata
  -- writes its fence only, into a hash it shares with the others (one of
  -- another type: left alone); a lock's HSET fails on a hash of another
  -- type, before anything is written.
  local function holder(last)
    if ARGV[4] == '' and last then
      if type(redis.pcall('HSET', KEYS[4], 'f:' .. token, fence)) == 'number' then
        redis.call('PEXPIREAT', KEYS[4], last)
      end
    elseif ARGV[4] == '' then
      redis.call('HSET', KEYS[4], 'f:' .. token, fence)
    else
      redis.call('HSET', KEYS[4], token, ARGV[4], 'f:' .. token, fence)
      if last then
        redis.call('PEXPIREAT', KEYS[4], last)
      end
    end
  end

  if ARGV[5] ~= '1' then
    local ty = redis.call('TYPE', KEYS[1])['ok']
    if ty ~= 'zset' and ty ~= 'none' then
      return 0
    end
    if ARGV[4] ~= '' then
      local hty = redis.call('TYPE', KEYS[4])['ok']
      if hty ~= 'hash' and hty ~= 'none' then
        return redis.error_reply('WRONGTYPE dlock: the metadata key ' .. KEYS[4] .. ' holds another type')
      end
    end
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local s = redis.call('ZSCORE', KEYS[1], token)
    local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
    local held = redis.call('GET', KEYS[5])
    local ours = s and tonumber(s) > now
    if not ours then
      local cap = tonumber(ARGV[5])
      if cap == 0 then
        cap = math.huge -- shared holds
      end
      if live >= cap or (live > 0 and held and held ~= ARGV[5]) then
        return 0
      end
      if ARGV[3] ~= '1' or buried() then
        return -1
      end
    end
    local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
    if #gone > 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
      for _, m in ipairs(gone) do
        redis.pcall('HDEL', KEYS[4], m, 'f:' .. m, 'l:' .. m) -- metadata of another type: left alone
      end
    end
    if not ours or tonumber(s) < now + tonumber(ARGV[2]) then
      redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), token) -- never earlier
    end
    local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
    redis.call('PEXPIREAT', KEYS[1], last)
    if live == 0 or not held then -- else keep a limit that SetLimit changed
      redis.call('SET', KEYS[5], ARGV[5])
    end
    redis.call('PEXPIREAT', KEYS[5], last)
    -- The permits share the metadata hash: it lives as long as the last of
    -- them, and each renewal writes its own entries again.
    holder(last)
    keep(tonumber(last) - now)
    return 1
  end
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    return 0 -- a semaphore's holders now
  end
  if v == token or (v == false and ARGV[3] == '1' and not buried()) then
    -- The holder's entries first: a key of another type fails here, before
    -- anything is written.
    holder(nil)
    if v == false then
      redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
    elseif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2]) -- never earlier
    end
    local left = redis.call('PTTL', KEYS[1])
    redis.call('PEXPIRE', KEYS[4], left)
    keep(tonumber(ARGV[2]))
    return 1
  end
  if v == false then
    return -1
  end
  return 0
end

local out = {}
for g = 0, #KEYS / 5 - 1 do
  local o = 3 + g * 4
  local k = {KEYS[g * 5 + 1], KEYS[g * 5 + 2], KEYS[g * 5 + 3], KEYS[g * 5 + 4], KEYS[g * 5 + 5]}
  local a = {ARGV[o + 1], ARGV[1], ARGV[2], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[3]}
  -- A failed command (a key of another type) ends this group only.
  local ok, r = pcall(extend, k, a)
  if not ok and type(r) ~= 'table' then
    r = redis.error_reply(tostring(r))
  end
  out[#out + 1] = r
end
return out
