-- queue.lua: the waiting queue of acquire.lua, semaphore.lua and shared.lua
-- (included after base.lua): a waiter's registration, a writer's intent
-- (see shared.lua's "Shared holds"), the failure reply.

-- register writes the waiter's registration if it is new, was popped or is
-- old, or vanished; it returns the queue position, or an error reply.
local function register(waiter, pos)
  local write = pos == '0' or ARGV[10] == '1'
  if not write then
    -- Registered before: make sure it is still there.
    write = redis.call('ZSCORE', KEYS[1], waiter) == false or redis.call('HEXISTS', KEYS[7], waiter) == 0
  end
  if write then
    if buried() then
      return false, refusedBuried
    end
    local t = redis.call('TIME')
    local nx = false
    if pos == '0' then
      -- Queue position: server time in microseconds at first registration
      -- (NX: a registration already there, whose reply was lost, keeps
      -- its place).
      pos = t[1] .. string.format('%06d', tonumber(t[2]))
      nx = true
    end
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    -- A waiting set or leases of another type (another program's keys)
    -- fail one of these two writes: the first, or the second, which then
    -- undoes the first (a member it added; one already there it left as
    -- it was), so that nothing is written.
    local added
    if nx then
      added = redis.pcall('ZADD', KEYS[1], 'NX', pos, waiter)
    else
      added = redis.pcall('ZADD', KEYS[1], pos, waiter)
    end
    if type(added) == 'table' then
      return false, added
    end
    if added == 0 and nx then
      pos = redis.call('ZSCORE', KEYS[1], waiter)
    end
    -- A waiter with metadata (ARGV[4]) has it kept beside its lease, as
    -- "m:" .. waiter, for Status: in the same HSET, so that naming a
    -- waiter costs no command, and a waiter without metadata writes
    -- nothing more.
    local leased
    if metadata ~= '' then
      leased = redis.pcall('HSET', KEYS[7], waiter, now + tonumber(ARGV[7]), 'm:' .. waiter, metadata)
    else
      leased = redis.pcall('HSET', KEYS[7], waiter, now + tonumber(ARGV[7]))
    end
    if type(leased) == 'table' then
      if added == 1 then
        redis.call('ZREM', KEYS[1], waiter)
      end
      return false, leased
    end
    -- Every entry of the two (an intent's end too: see intend) ends
    -- within ARGV[7] ms.
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    redis.call('PEXPIRE', KEYS[7], ARGV[7])
  end
  return pos
end
-- intentLife is how long an exclusive waiter's intent lasts after its
-- attempt: its TTL, at most its registration's lease (ARGV[7]), so that the
-- leases key, which lives a lease after each registration and intent,
-- outlives it; the waiter attempts again within a third of it (see acquire.lua's onSet).
local function intentLife()
  return math.min(tonumber(ARGV[2]), tonumber(ARGV[7] or ARGV[2]))
end
-- intend writes an exclusive waiter's intent, at its queue position pos: it
-- ends intentLife() from now.
local function intend(pos)
  redis.call('ZADD', KEYS[8], pos, waiter)
  redis.call('HSET', KEYS[7], 'i:' .. waiter, clock() + intentLife())
  redis.call('PEXPIRE', KEYS[7], ARGV[7])
  redis.call('PEXPIRE', KEYS[8], ARGV[7])
end
-- deadIntents: the dead intents that writerAhead passed, removed by
-- pruneIntents once nothing can fail.
local deadIntents = {}
-- writerAhead returns the ms until the intent of the first writer ahead of a
-- waiter at queue position mine ends (mine 0: a caller not queued, which
-- every writer is ahead of), or false when there is none (see shared.lua's "Shared
-- holds"). It writes nothing.
local function writerAhead(now, mine)
  local ws = redis.call('ZRANGE', KEYS[8], 0, 15, 'WITHSCORES')
  for j = 1, #ws, 2 do
    local e = tonumber(redis.call('HGET', KEYS[7], 'i:' .. ws[j]) or '0')
    if e > now then
      if mine == 0 or tonumber(ws[j + 1]) < mine then
        return math.max(e - now, 1)
      end
      return false
    end
    deadIntents[#deadIntents + 1] = ws[j]
  end
  if #ws == 32 then
    return 1 -- 16 dead intents: once they are removed, the next ones
  end
  return false
end
local function pruneIntents()
  for _, w in ipairs(deadIntents) do
    redis.call('ZREM', KEYS[8], w)
    redis.call('HDEL', KEYS[7], 'i:' .. w)
  end
end
-- busy registers the waiter, if any, and returns the failure reply; with
-- intent, an exclusive waiter's intent too (see shared.lua's "Shared holds").
local function busy(pttl, intent)
  local pos = ARGV[8] or '0'
  if waiter ~= '' then
    if intent then
      local refused = refuseWrongTypes(true, false)
      if refused then
        return refused
      end
    end
    local p, refused = register(waiter, pos)
    if refused then
      return refused
    end
    pos = p
    if intent then
      intend(pos)
      pruneIntents()
      return {0, pttl, pos, 1} -- tells the waiter that it has an intent
    end
  end
  pruneIntents()
  return {0, pttl, pos}
end
