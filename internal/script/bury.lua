-- bury.lua: leave a tombstone for a token whose command may still reach the
-- server (its answer was missed, or it was written twice), without touching
-- what the token holds: the acquisition scripts and extend.lua's regain
-- refuse a buried token and write nothing (see release.lua, which buries a
-- dead token the same way as it releases it). A live hold's renewals,
-- Adopt and release are not refused: Lock.Detach buries its token where a
-- copy of its acquisition may still run, so that the copy, run after an
-- adopter released the hold, takes nothing again.
--
-- KEYS, a run of the order that every script shares (see internal/keys):
-- KEYS[1] tombstones     prefix{K}:dead (zset: dead token -> end of its tombstone, server ms)
-- ARGV[1] token          the token to bury
-- ARGV[2] ms             how long the tombstone lasts
--
-- Returns 1. Expired tombstones are dropped on the way; a tombstones key of
-- another type is an error, before anything is written.
-- #include clock.lua
local ty = redis.call('TYPE', KEYS[1])['ok']
if ty ~= 'zset' and ty ~= 'none' then
  return redis.error_reply('WRONGTYPE dlock: the tombstones key ' .. KEYS[1] .. ' holds another type')
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', clock())
redis.call('ZADD', KEYS[1], clock() + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], last)
return 1
