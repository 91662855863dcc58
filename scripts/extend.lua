-- extend.lua: reset the lock's TTL if the caller still owns it; optionally
-- take the key back where it is free.
--
-- KEYS[1] lock key   prefix{K} (a string; a sorted set for a semaphore, see acquire.lua)
-- KEYS[2] metadata   prefix{K}:meta (see acquire.lua)
-- KEYS[3] limit      prefix{K}:limit (a semaphore's)
-- ARGV[1] token      the owner token
-- ARGV[2] ttl        new TTL in milliseconds, counted from now
-- ARGV[3] regain     "1" to set the key to ARGV[1] when it is free: only sent
--                    to nodes that answered -1, after a quorum of the others
--                    confirmed that the caller holds the lock (so nobody else
--                    can hold a quorum), to restore a Redlock lock's spare
--                    nodes; "0" otherwise
-- ARGV[4] metadata   "" for none; else the lock's metadata, whose TTL follows
--                    the lock's (and which a regain writes again)
-- ARGV[5] limit      "1" for a lock, n > 1 for a semaphore
--
-- Returns 1 if the key held ARGV[1] (or was free and ARGV[3] is "1") and its
-- TTL was set, 0 if it holds another value (another owner, a reservation),
-- -1 if it is free. For a semaphore: 1 if ARGV[1] is a live permit (or a
-- permit was free and ARGV[3] is "1"), and its expiry was set; -1 if it is
-- not and a permit is free; 0 if all are taken.
local function meta()
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
end
if ARGV[5] ~= '1' then
  local ty = redis.call('TYPE', KEYS[1])['ok']
  if ty ~= 'zset' and ty ~= 'none' then
    return 0
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
  local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  local held = redis.call('GET', KEYS[3])
  local ours = s and tonumber(s) > now
  if not ours then
    if live >= tonumber(ARGV[5]) or (live > 0 and held and held ~= ARGV[5]) then
      return 0
    end
    if ARGV[3] ~= '1' then
      return -1
    end
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    redis.pcall('HDEL', KEYS[2], unpack(gone))
  end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[1], last)
  redis.call('SET', KEYS[3], ARGV[5], 'PXAT', last)
  if ARGV[4] ~= '' then
    -- The permits share the metadata hash: it lives as long as the last
    -- of them, and each renewal writes its own entry again.
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
    redis.call('PEXPIREAT', KEYS[2], last)
  end
  return 1
end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return 0 -- a semaphore's holders now
end
if v == ARGV[1] then
  if ARGV[4] ~= '' then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == false then
  if ARGV[3] == '1' then
    meta()
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
  end
  return -1
end
return 0
