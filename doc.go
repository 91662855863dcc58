// Package dlock provides distributed locks on Redis: mutual exclusion between
// the processes of a service that runs on several hosts, with a TTL, an
// owner token, auto-renewal, a lost-lock signal and fencing tokens.
//
// # Use
//
// A [Locker] is made once per process, on one Redis deployment with [New]
// (standalone, Sentinel or Cluster, through any go-redis v9 client), or on N
// independent Redis masters with [NewRedlock]. [Locker.Acquire] waits for a
// lock, [Locker.TryAcquire] makes one attempt, and [Locker.Do] runs a function
// under a lock. A [Lock] is released with [Lock.Release]; while it is held it
// is renewed in the background, and [Lock.Lost] tells its owner when
// ownership can no longer be guaranteed.
//
// # The lock
//
// A lock named K is the Redis key "dlock:{K}" (the prefix is an option; the
// braces keep all of a lock's keys in one Cluster slot). Acquiring it runs one
// Lua script: if the key is free, set it to a 128-bit random owner token with
// the TTL (SET PX) and increment the fence counter "dlock:{K}:fence";
// otherwise return the holder's remaining TTL. Release and extend compare the
// token first, so only the owner can release or extend, and a late or
// duplicated command from a former owner does nothing. The acquire script
// treats "the key already holds my token" as success, so a command that
// go-redis retries after a lost reply cannot lock its own owner out.
//
// # One algorithm: a quorum
//
// Every operation is a round over N nodes, run in parallel; a single Redis is
// N = 1, with a fast path that skips the fan-out. An acquisition succeeds when
// a majority (N/2+1) granted it and validity remains:
//
//	validity = TTL − elapsed − drift,  drift = TTL·1% + 2ms
//
// where elapsed is measured on the monotonic clock from the start of the
// round (the drift is the Redlock reference implementation's clock-drift
// factor plus Redis' expiry precision). A failed attempt releases what it got
// on every node, on a context of its own. A round decides as soon as the
// outcome is known and waits for a slow node at most a fifth of the TTL (at
// most 1s; see [WithNodeTimeout]). That bound holds whatever the client's
// settings: go-redis does not apply context deadlines to socket reads unless
// ContextTimeoutEnabled is set, so a call to a frozen node runs on its own
// goroutine and is abandoned at the deadline. A node that left a round
// unanswered is suspect: later rounds still send it every command but do not
// wait for it to decide, until it answers again (or 10s have passed).
//
// # Renewal and the lost-lock signal
//
// A held lock is renewed every TTL/3 on all nodes; a renewal counts when a
// quorum confirms it within its validity. [Lock.Lost] closes (and the context
// [Locker.Do] passes on is cancelled) as soon as a quorum says the lock is no
// longer ours, or when the validity of the last confirmed round runs out
// without a new confirmation. Because the validity is counted from the start
// of the round that set the TTL and less the drift, this happens before Redis
// can have expired the key, never after.
//
// # Fencing
//
// Every acquisition returns a fence ([Lock.Fence]) that is larger than the
// fence of every earlier acquisition of the same key. On one Redis it is the
// INCR of the fence counter in the acquire script. Over a quorum each node
// increments its own counter; the fence is the largest value the granting
// nodes returned, and before Acquire returns, the nodes of the quorum that
// returned less are raised to it (a compare-and-raise script, in a second
// round that runs only when the counters differ). So when Acquire returns, a
// majority of nodes holds a counter ≥ the fence. The next holder's majority
// shares at least one node with that one, whose increment yields a larger
// number, and the next fence is the maximum over its majority: strictly
// larger. The argument assumes that nodes keep their data: a node that
// restarts empty forgets its counter (see the limits below).
//
// Storage that records the largest fence it has seen and rejects writes
// carrying a smaller one is safe even against a holder that was paused past
// its validity and does not know it lost the lock.
//
// # Waiting
//
// Acquire does not poll. A failed attempt registers the waiting process in
// the key's waiting set ("dlock:{K}:waiters", ordered by arrival) in the same
// script. A release pops the first live registration and tells that waiter
// alone, on its Locker's inbox channel ("dlock:inbox:ID", one pub/sub
// subscription per node per Locker, made the first time the Locker has to
// wait), so one waiting process hears of the release and attempts, however
// many wait. On a single Redis the release also reserves the lock for that
// waiter for a moment, so a newcomer cannot barge in ahead of it. The waiter
// after it is told too, and stands in if the woken one has not taken the
// lock shortly after (it may have died). A waiter also wakes when the
// holder's remaining TTL (returned by the failed attempt) runs out, when its
// inbox subscription comes back after a reconnection (a release may have gone
// unheard), and, as a last resort, after a slow jittered backoff (15s,
// doubling to 60s). Goroutines of one Locker waiting for the same key queue
// locally: only the first talks to Redis. A waiter that gives up removes its
// registration and hands on a reservation made for it; a dead waiter's
// registration is dropped once its lease (3 minutes) runs out.
//
// # Limits
//
// These are the limits of any lock built on leases, stated plainly:
//
//   - A lock can be lost at any moment while held: a process pause longer than
//     the validity (GC, swapping, a stopped VM), a partition, an
//     administrator's [Locker.ForceRelease]. Watch [Lock.Lost] or use
//     [Locker.Do], and use the fence where the storage can check it.
//   - Redlock assumes that the nodes' clocks advance at about the same rate
//     (bounded drift) and that process pauses are shorter than the validity.
//   - A node that restarts without its data forgets locks and fence counters:
//     it can let a second holder in and can issue a fence that was issued
//     before. Run the nodes with persistence (appendonly yes; appendfsync
//     always for the strictest guarantee), or keep a restarted node out of
//     service for at least one TTL (delayed restart). The same holds for a
//     Sentinel failover to a replica that had not yet received a lock.
//   - A waiter woken by a release that dies before taking the lock leaves it
//     reserved for a moment (100ms on one Redis); the waiter after it stands
//     in for it after that. If both die, the others wake on their fallback
//     timer (seconds).
package dlock
