-- tomb.lua: a tombstone for a dead token, for the scripts that include it
-- after clock.lua (release.lua, bury.lua): bury(key, token, ms) adds token
-- to the tombstones key (a sorted set: token -> the end of its tombstone,
-- server ms) for ms, dropping the expired ones on the way, and has the key
-- live as long as its last one. The acquisition scripts and extend.lua's
-- regain refuse a buried token and write nothing. A key of another type is
-- the error reply it returns, before anything is written; else nil.
local function bury(key, token, ms)
  local ty = redis.call('TYPE', key)['ok']
  if ty ~= 'zset' and ty ~= 'none' then
    return redis.error_reply('WRONGTYPE dlock: the tombstones key ' .. key .. ' holds another type')
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', clock())
  redis.call('ZADD', key, clock() + tonumber(ms), token)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', key, last)
  return nil
end
