-- wake.lua: waking waiters, shared by release.lua and shared.lua, each of
-- which includes it where it says "-- #include wake.lua" (see script.go),
-- after defining:
--   INBOX      the inbox channels' prefix: a waiter "LOCKERID:SEQ:KEY" is
--              told on INBOX..LOCKERID (see release.lua's ARGV[2])
--   LISTENERS  "1" when PUBLISH's count of receivers is exact for the
--              waiters' inboxes (see release.lua's ARGV[7])
--   TAG        on a Cluster, a text in KEYS[2]'s hash slot, else "" (see
--              release.lua's ARGV[10])
-- and with the keys in the order every script shares: KEYS[1] the waiting
-- set, KEYS[7] the waiter leases (and the writers' intents' ends, "i:"
-- .. WAITER), KEYS[8] the writers (see shared.lua's "Shared holds").

-- tell publishes msg to waiter w's inbox; it reports false when nobody can
-- have heard it (see LISTENERS).
local function tell(w, msg)
  local id = string.match(w, '^[^:]*')
  if TAG ~= '' and string.sub(id, -1) == 's' then
    -- As PUBLISH on a Cluster, the count is not exact: the inbox may
    -- listen on one of the shard's replicas for a moment (after a
    -- failover), which hears the message but is not counted. A server
    -- without sharded pub/sub (Redis < 7.0), or a user without SPUBLISH,
    -- refuses it: then the message goes with PUBLISH on the LOCKERID's
    -- classic channel, which a sharded Locker also listens on (for the
    -- releases of v0.1.0, which PUBLISH there), over the cluster bus.
    local heard = redis.pcall('SPUBLISH', INBOX .. '{' .. TAG .. '}' .. id, msg .. ' ' .. w)
    if type(heard) == 'number' then
      return heard > 0 or LISTENERS ~= '1'
    end
  end
  -- Called after the caller has written (a waiter popped, a lock
  -- deleted): a refused PUBLISH (a user without the channel) must not fail
  -- the script half-way. Nobody heard it, and the caller goes on to the
  -- next waiter.
  local heard = redis.pcall('PUBLISH', INBOX .. id, msg .. ' ' .. w)
  return type(heard) == 'number' and (heard > 0 or LISTENERS ~= '1')
end

-- reader reports whether w is a shared acquisition's waiter.
local function reader(w)
  return string.find(w, '^[^:]*:r') ~= nil
end

-- dropWaiter removes waiter w's registration, and its intent if a writer's:
-- a waiter nobody hears (or whose lease ran out) must not keep readers out.
local function dropWaiter(w)
  redis.call('ZREM', KEYS[1], w)
  redis.call('HDEL', KEYS[7], w, 'i:' .. w)
  redis.pcall('ZREM', KEYS[8], w) -- a writers key of another type: left alone
end

-- pop takes waiter w, already out of the waiting set, and wakes it (clock:
-- a function that returns the server's time in ms); it reports whether it
-- heard of it. Where
-- PUBLISH's count is exact (LISTENERS "1") its hearing is the test of its
-- life; elsewhere its lease is read first. A waiter that hears keeps its
-- lease and intent, which its grant removes (grant.lua); a writer's
-- intent, at its position, keeps out the readers queued after it.
local function pop(w, clock)
  if (LISTENERS == '1' or tonumber(redis.call('HGET', KEYS[7], w) or '0') >= clock()) and tell(w, 'w') then
    return true
  end
  dropWaiter(w)
  return false
end

-- wakeReaders wakes the shared waiters at the head of the queue, up to the
-- next writer, at most n of them, looking at 2n at most (those that do
-- not hear are dropped on the way), and
-- appends those that heard of it to woken. A reader woken takes a shared
-- hold and wakes the readers then at the head (see shared.lua), so that a
-- release wakes every shared waiter queued before the next writer, in
-- batches, each script bounded.
local function wakeReaders(n, woken, clock)
  for _ = 1, 2 * n do
    local w = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
    if not w or not reader(w) then
      return
    end
    redis.call('ZREM', KEYS[1], w)
    if pop(w, clock) then
      woken[#woken + 1] = w
      if #woken >= n then
        return
      end
    end
  end
end
