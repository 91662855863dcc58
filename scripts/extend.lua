-- extend.lua: reset the lock's TTL if the caller still owns it; optionally
-- take the key back where it is free.
--
-- KEYS[1] lock key   prefix{K}
-- KEYS[2] metadata   prefix{K}:meta (see acquire.lua)
-- ARGV[1] token      the owner token
-- ARGV[2] ttl        new TTL in milliseconds, counted from now
-- ARGV[3] regain     "1" to set the key to ARGV[1] when it is free: only sent
--                    to nodes that answered -1, after a quorum of the others
--                    confirmed that the caller holds the lock (so nobody else
--                    can hold a quorum), to restore a Redlock lock's spare
--                    nodes; "0" otherwise
-- ARGV[4] metadata   "" for none; else the lock's metadata, whose TTL follows
--                    the lock's (and which a regain writes again)
--
-- Returns 1 if the key held ARGV[1] (or was free and ARGV[3] is "1") and its
-- TTL was set, 0 if it holds another value (another owner, a reservation),
-- -1 if it is free.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  if ARGV[4] ~= '' then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == false then
  if ARGV[3] == '1' then
    if ARGV[4] ~= '' then
      redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
      redis.call('PEXPIRE', KEYS[2], ARGV[2])
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
  end
  return -1
end
return 0
