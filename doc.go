// SPDX-License-Identifier: Apache-2.0

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
// braces keep all of a lock's keys in one Cluster slot; a name that begins
// with '}' or a NUL byte, which would leave the braces empty, gets the tag
// "\x00" in front of it, and a prefix may not contain braces). Acquiring it
// runs one Lua script: if the key is free, set it to a 128-bit random owner
// token with the TTL (SET PX) and take the next fence from the counter
// "dlock:{K}:fence"; otherwise return the holder's remaining TTL. Release and extend compare the
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
// factor plus Redis' expiry precision). A round decides as soon as the
// outcome is known and waits for a slow node at most a fifth of the TTL (at
// most 1s; see [WithNodeTimeout]). That bound holds whatever the client's
// settings: go-redis does not apply context deadlines to socket reads unless
// ContextTimeoutEnabled is set, so dlock calls one Redis through a copy of
// the client whose socket deadlines are the node timeout (made with
// WithTimeout), and each node of a Redlock on its own goroutine, which it
// abandons at the deadline. A node that left a round
// unanswered is suspect: later rounds still send it every command but do not
// wait for it to decide, until it answers again (or 10s have passed).
//
// # Nothing left behind
//
// A command whose answer did not come in time may have run, or may still run:
// a frozen node runs what it has read when it resumes, a TTL later than the
// caller gave up. dlock never counts such a command, and never forgets it.
// A failed attempt has the nodes that granted it, and those that did not
// answer, cleaned up in the background; a lock that is released or lost
// does the same for the nodes where one of its commands went unanswered (a
// lost lock once its key would have expired anyway, so that its holder keeps
// its time to stop). The clean-up is the owner-checked release. A command
// whose answer was missed cannot be ordered before it: a frozen node runs it
// when it resumes, and bytes held up on its own connection (a TCP
// retransmission, a stalled middlebox) reach the server after commands sent
// later on other connections, even after the client closed that connection.
// So the clean-up after such a command also buries its token: a tombstone
// ("dlock:{K}:dead", kept for an hour) that the acquire script, and a
// renewal's taking back of a free key, refuse without writing anything. If
// the command ran first, the release deletes what it set; if it comes
// later, it is refused: a late command cannot set the key after the
// clean-up (one held up longer than the hour could, for its TTL). The
// clean-up tries again, backing off to once a second, while a node does not
// answer and the Locker is open ([Locker.Close] runs what is due, for a
// bounded time, then stops it; what a still-frozen node sets then expires
// after its TTL). The caller never waits for it.
//
// # Renewal and the lost-lock signal
//
// A held lock is renewed every TTL/3 on all nodes; a renewal counts when a
// quorum confirms it within its validity. The locks of a Locker that fall
// due close together are renewed together, one script call per node for up
// to 64 of them (on a Cluster, those of one hash slot): a renewal may come
// up to TTL/6 early, never late, and each lock of the batch counts its
// validity from the start of the batch's round, is refused or lost alone,
// and gets its Lost signal as if renewed alone. A renewal that failed is
// retried alone. [Lock.Lost] closes (and the context
// [Locker.Do] passes on is cancelled) as soon as a quorum says the lock is no
// longer ours, or when the validity of the last confirmed round runs out
// without a new confirmation. Because the validity is counted from the start
// of the round that set the TTL and less the drift, this happens before Redis
// can have expired the key, never after.
//
// The validity is kept per node: a node holds the key at least until the
// start of the last round it confirmed plus the TTL less the drift, and the
// lock is valid while a quorum of nodes does. An [Lock.Extend] to a shorter
// TTL that a node did not confirm may still run there, after any later
// command: the lock's validity on that node is then capped at what that
// TTL gives from the start of the call, until a command sent after every
// earlier one was answered is confirmed (the late answer usually comes for a
// call that ran on a helper goroutine, on a Redlock or for a wait longer than
// 1s; for any other it does not, and the lock ends at the cap). On a quorum, a renewal that a quorum confirmed also
// takes back the nodes where the key is free (it expired there while the
// node was away, or a contender of a split vote let it go), so that a lock
// acquired on a bare majority survives the loss of a minority again.
//
// # Fencing
//
// Every acquisition returns a fence ([Lock.Fence]) that is larger than the
// fence of every earlier acquisition of the same key. On one Redis it is
// taken in the acquire script: the larger of the counter + 1 and the
// server's time in microseconds rounded down to the second while the
// counter exists, and the server's time in microseconds when it does not
// (its first use, or after it was lost). The floor keeps fences increasing
// across a failover to a replica that missed the last increments, since a
// failover takes more than a second (Redis Cluster's node timeout,
// Sentinel's down-after time). The counter lives as long as the key has a
// holder (acquisitions, renewals and Extend keep it at least that long, and
// restore it if it was lost meanwhile, an eviction say, so that the next
// fence is still larger) and then 24h more ([WithFenceRetention]), so a
// service that locks one name per entity leaves nothing behind. A holder
// with metadata (a leader) also has its fence stored with its metadata, so
// that [Locker.Status] and [Locker.Leader] report the fence it holds even if
// the counter was lost. An increment takes a script run of more than
// a microsecond, so the counter never runs ahead of the server's clock, and
// a counter started again from the clock — after its retention, an eviction,
// or a restart without data — is larger than every fence issued before, as
// long as the clock has not stepped back meanwhile. The arithmetic is exact
// for every 64-bit value (the counter is incremented as a decimal string,
// never through a Lua number), and an acquisition that finds a counter that
// is not a positive integer, or at 2^63-1, fails and changes nothing.
//
// Over a quorum each node takes its own; the fence is the largest value the
// granting nodes returned, and before Acquire returns, the nodes of the
// quorum that returned less are raised to it (a compare-and-raise script, in
// a second round that runs only when the values differ, which after the
// first acquisition of a name is when a node missed one). So when Acquire
// returns, a majority of nodes holds a counter ≥ the fence. The next
// holder's majority shares at least one node with that one, which returns a
// larger number, and the next fence is the maximum over its majority:
// strictly larger. A node that restarted without its data returns its clock
// instead of its counter: fences stay increasing if it stayed out of service
// for at least one TTL (the delayed restart that the lock needs anyway, see
// the limits below) and the nodes' clocks agree within that time.
//
// Storage that records the largest fence it has seen and rejects writes
// carrying a smaller one is safe even against a holder that was paused past
// its validity and does not know it lost the lock. For a read-modify-write
// the fence must be recorded when the holder reads, not only when it writes:
// otherwise a former holder can still write between the new holder's read
// and write, and that write is then silently overwritten. Fences fit in 63
// bits (a signed 64-bit column holds them).
//
// The check belongs to the storage, and two are shipped. The package
// github.com/dlock-dev/dlock/fenced keeps values in Redis behind a script
// that writes only if the caller's fence is not smaller than the largest one
// the resource has seen (its Claim records the fence before a
// read-modify-write). The module github.com/dlock-dev/dlock/extra/dlocksql
// shows the same check in SQL, "UPDATE ... SET ..., fence = $f WHERE id = $id
// AND fence < $f", where a row count of 0 tells a stale writer apart, as one
// statement that computes from the row, or after a statement that records
// the fence before a read (its Add, and Claim then Update). Both
// need every writer of the data to hold the same lock key and to go through
// the check. Inside [Locker.Do], [LockFromContext] gives the lock and its
// fence.
//
// # Waiting
//
// Acquire does not poll. A failed attempt registers the waiting process in
// the key's waiting set ("dlock:{K}:waiters", ordered by arrival) in the same
// script. A release pops the first live registration and tells that waiter
// alone, on its Locker's inbox channel ("dlock:inbox:ID", one pub/sub
// subscription per node per Locker, made the first time the Locker has to
// wait), so one waiting process hears of the release and attempts, however
// many wait. On a Locker of one Cluster client the inbox is sharded (Redis
// 7.0+): one channel per hash slot that the Locker waits on
// ("dlock:inbox:{TAG}IDs", TAG a name of the slot), subscribed with
// SSUBSCRIBE on the slot's master over one connection per master, and the
// release wakes the waiter with SPUBLISH in the key's slot, so that a
// wake-up stays within the key's shard (a PUBLISH is sent over the cluster
// bus to every node; an SPUBLISH only to the shard's own replicas). The
// subscription follows its slot: when the slot migrates or its master
// fails over, it is made again on the slot's new master, and the slot's
// waiters then try again, in case a release went unheard meanwhile. Such a
// Locker also keeps one classic subscription, for the releases that cannot
// use sharded pub/sub: those of earlier versions of dlock (which PUBLISH on
// "dlock:inbox:IDs"), so that during a rolling upgrade they wake its
// waiters at once too, and those of a user without SPUBLISH, whose refused
// SPUBLISH is followed by a PUBLISH there (over the cluster bus). Where a
// node has no sharded pub/sub (Redis 6), or the user's ACL does not allow
// SSUBSCRIBE there, the Locker uses the classic inbox from then on, for
// every key, and says so once ([EventNodeError]); its waiters registered
// through the sharded inbox register again. On a single Redis the release
// also reserves the lock for that waiter for a moment, so a newcomer cannot
// barge in ahead of it. The waiter after it is told too, and stands in if
// the woken one has not taken the lock shortly after (it may have died). A
// waiter also wakes when the holder's remaining TTL (returned by the failed
// attempt) runs out, when its inbox subscription comes back after a
// reconnection (a release may have gone unheard), and, as a last resort,
// after a slow jittered backoff (15s, doubling to 60s). A waiter whose
// attempt failed on node errors tries again on a short backoff (the node
// timeout, doubling to 1s), since no release will tell it when the nodes
// are back; one that found the lock reserved for another woken waiter tries
// again once that waiter should have taken it.
// An attempt that finds its registration gone (a restart, an eviction, a
// flush) registers again. Goroutines of one Locker waiting for the same key
// queue locally: only the first talks to Redis. When the last of them gives
// up (whether it was at the head of the local queue or not), the
// registration is removed and a reservation made for it handed on; a dead
// waiter's registration is dropped once its lease (3 minutes) runs out.
//
// # Errors
//
// An acquisition that fails says why, in one of three disjoint classes, so
// that a misconfigured deployment never passes for a busy lock:
// [ErrNotAcquired] (held by someone else: the refusals alone put the quorum
// out of reach), [ErrUnavailable] (too few nodes answered: transient, and
// Acquire keeps trying on a short backoff until its context ends), and
// [ErrMisconfigured] (a permanent error that waiting cannot fix, such as a
// wrong password, a missing ACL permission, another type at a lock key, or
// a Cluster node behind a plain client: returned at once). Each wraps the
// nodes' failures as [*NodeError]. Extend and Release fail with
// [ErrNotHeld], ErrUnavailable or ErrMisconfigured in the same way. A user
// whose ACL forbids the waiters' pub/sub channels (PREFIX + "inbox:*") can
// TryAcquire, but Acquire on a held lock returns ErrMisconfigured.
//
// # Closing
//
// [Locker.Close] gives back every lock the Locker holds, so that a graceful
// shutdown does not keep the fleet waiting for a TTL: each holder is told
// first ([Lock.Lost] closes, [Locker.Do]'s function is cancelled), then the
// key is released. Waiting calls return [ErrClosed], and their registrations
// in the waiting queues are removed before Close returns (it waits for that
// up to three node timeouts, less when a node does not answer). A
// registration that outlives its Locker anyway (a node that did not answer
// then, a process that was killed) does not stall the queue: a release
// passes over a waiter that nobody listens for (its Locker's subscription
// is gone) and wakes the next one, on one Redis and on each node of a
// Redlock (not on a Cluster, where the subscription may sit on another node
// than the key, or for a moment on one of its replicas: there the stand-in
// takes over, as below).
//
// # Order
//
// On one Redis, waiting processes acquire in the order in which they started
// waiting: the release wakes the first live registration and reserves the
// lock for it. Goroutines of one Locker waiting for the same key queue in an
// explicit FIFO, and only the first of them talks to Redis. A waiter that
// stops answering (its process died or froze) is skipped after the stand-in
// delay, 150ms after the release that woke it. Over a Redlock each node
// keeps its own queue and reserves nothing (contenders would split the
// votes), so arrival order is a tendency there, not a guarantee.
//
// # Semaphores
//
// With [WithLimit](n) the key is a counting semaphore: the lock key is a
// sorted set of the holders' tokens, scored by their expiry on the server's
// clock, pruned on every script run, with the limit in "dlock:{K}:limit"; the
// same three scripts serve locks and semaphores, and a holder with another
// limit is refused ([ErrMisconfigured]: the fleet's copies disagree). Each holder gets a [Lock] of its own, with
// the same renewal, Lost signal, fencing (one counter for all permits) and
// waiting as a lock. Over NewRedlock's N masters a permit needs
// ⌊N·n/(n+1)⌋+1 grants: each master grants at most n permits, so n+1 holders
// cannot each hold that many (with a majority they could: 3 masters, n = 2,
// holders on {1,2}, {2,3} and {1,3}). That leaves fewer masters that may fail
// as n grows: see WithLimit.
//
// # Shared holds and several keys
//
// With [WithShared] an acquisition is a shared (read) hold: the permits of a
// semaphore without a limit (the key's sorted set, "dlock:{K}:limit" "0"),
// which a plain lock of the key (the writer) excludes and is excluded by. A
// waiting writer keeps an intent in "dlock:{K}:writers" (at its queue
// position; its end in "dlock:{K}:wexp"), which it renews on every attempt
// and which ends one TTL (its own) after its last one; a shared acquisition
// that came after it waits. Releases wake as for a lock, except that a
// shared release wakes nobody while other shared holds remain, and a
// release that wakes a shared waiter wakes every shared waiter queued after
// it up to the next writer, each with a reservation (100 at once, then two
// more by each one woken as it takes its hold). A shared hold
// needs a majority, as a lock. Fences: every hold's fence is
// its own, over NewRedlock too (see WithLimit). In each case a writer's
// fence is larger than that of every hold that ended before it began, and a
// shared hold's larger than that of every writer that ended before it
// began.
//
// [Locker.AcquireAll] takes several keys, every one or none, in the byte
// order of their names (so that no two calls deadlock), after a first
// attempt at all of them at once; see it for what it holds while it waits.
//
// # Observability
//
// A [Hook] ([WithHook]) is told of every acquisition (a Start, then its
// attempts, wake-ups, and exactly one acquired or refused event, with the
// wait and the number of attempts), of every lock's end (exactly one
// released or lost event, with the time held and, for a loss, its reason),
// of renewals that were not confirmed, and of nodes that fail a command,
// stop answering or come back: see [EventKind]; [Event.Result] classifies
// acquisitions for metrics and traces. A Locker without a hook
// builds no event, and a hook that does nothing adds no allocation to an
// Acquire and Release. [WithLogger] logs what an operator should see (lost
// locks, failing nodes, a subscription the ACL refuses) through log/slog.
// Prometheus metrics and OpenTelemetry metrics and spans are hooks in
// modules of their own, so that this one depends on go-redis alone:
// github.com/dlock-dev/dlock/extra/dlockprom and
// github.com/dlock-dev/dlock/extra/dlockotel.
//
// # Leader election
//
// [Locker.Campaign] is Acquire on the election's key with the candidate's
// value as metadata: candidates wait as waiters do, the leadership is the
// returned [Lock], and its fence is the term. The winner announces "term,
// value" on the election's pub/sub channel ("dlock:leader:KEY"), and a
// resignation ([Lock.Release]) announces the vacancy. [Locker.Leader] reads
// the holder of the key on a quorum. [Locker.Observe] streams the changes:
// from the announcements, and from a read of the leader once its lock would
// have expired, which catches a leader that died without resigning.
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
//   - A node that restarts without its data forgets its locks: it can let a
//     second holder in. Run the nodes with persistence (appendonly yes;
//     appendfsync always for the strictest guarantee), or keep a restarted
//     node out of service for at least one TTL (delayed restart). The same
//     holds for a failover (Sentinel, Cluster) to a replica that had not
//     yet received a lock: its holder learns it at its next renewal,
//     through Lost, and another process may hold it meanwhile;
//     [WithReplicaAck] closes that window. Fences survive a restart and a
//     failover (see Fencing) as long as the servers' clocks do not step
//     back, and, over a quorum, the nodes' clocks agree within the time the
//     node stayed out. A Cluster master that freezes instead of dying keeps
//     renewals waiting on go-redis' read timeouts until its replica takes
//     over and go-redis finds it: a lock survives that only if 2/3 of its
//     TTL exceeds the failover time plus up to 20s (about 60s at Redis'
//     default cluster-node-timeout; docs/reliability.md); otherwise Lost
//     closes before its key can expire.
//   - On a Redis Cluster, the message that wakes a waiter travels over the
//     cluster bus, from the node of the lock to the node of the waiter's
//     subscription; Redis drops a bus link that stalls for half the node
//     timeout, and the messages on it. A waiter whose wake-up was lost
//     wakes on the holder's TTL or on its fallback timer (seconds).
//   - A waiter woken by a release that freezes before taking the lock (its
//     process is stopped, but its connections stay open) leaves it reserved
//     for a moment (100ms on one Redis); the waiter after it stands in for
//     it after that. If both freeze, the others wake on their fallback timer
//     (seconds). A waiter whose process died or closed its Locker is passed
//     over at once (see Closing), but on a Cluster, where it is handled as a
//     frozen one.
package dlock
