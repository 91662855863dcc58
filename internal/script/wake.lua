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

-- What a release wakes (release.lua; shared.lua wakes readers the same way).
-- The next waiter is the live registration with the lowest queue position;
-- registrations whose lease ran out (their process died) are dropped on the
-- way. It is removed from the set and told "w WAITER" on its process's
-- inbox channel, so exactly one waiting process hears of the release and
-- attempts. The waiter after it is told "s WAITER": it stands in, attempting
-- after a short delay unless it is woken first, in case the woken one died
-- without leaving the queue. With release.lua's ARGV[3] > 0 the lock is
-- not deleted but set to "~WAITER" for ARGV[3] ms, so a newcomer cannot
-- barge in ahead of the woken waiter; if that waiter is gone, the
-- reservation expires.
-- Shared holds (see shared.lua) wake nobody while another hold or
-- reservation of the key is live: the last one wakes the next waiter. When
-- the woken waiter is a shared hold's ("LOCKERID:rSEQ:KEY"), the waiters
-- after it up to the next exclusive one are woken too, each with a
-- reservation "~WAITER" in the key's sorted set: 100 of them at most in
-- this script, and each one woken, once it takes its hold, wakes the
-- shared waiters then at the head of the queue (shared.lua), so that
-- every shared waiter queued before the next writer is woken, in batches;
-- the stand-in is the waiter after the first batch. A semaphore's release
-- wakes one waiter, whatever it waits for. A writer woken keeps its
-- intent, at its position: ahead of every reader still queued (see
-- shared.lua).
-- A leaving writer (release.lua's ARGV[4]) whose intent kept shared
-- waiters out wakes the shared waiters at the head of the queue (100 at
-- most, then as above) when no exclusive hold keeps them out; a writer's
-- registration dropped on the way (dead, or heard by nobody) takes its
-- intent with it.
-- With LISTENERS = "1", a waiter whose inbox nobody listens to (its process
-- closed its Locker or died: the server dropped the subscription with the
-- connection) is passed over, for the woken waiter and for the stand-in
-- alike, and removed from the waiting set: the release goes to the first
-- waiter that can hear of it.

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
  redis.call('HDEL', KEYS[7], w, 'i:' .. w, 'm:' .. w)
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

-- standIn tells the stand-in, the first registration left in the waiting
-- set that hears of it ("s WAITER"); those nobody hears are dropped on the
-- way, 16 at most. (Its lease is not read: one that ran out is dropped by
-- the release that pops it.)
local function standIn()
  for _ = 1, 16 do
    local after = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
    if not after then
      return
    end
    if tell(after, 's') then
      return
    end
    dropWaiter(after)
  end
end
