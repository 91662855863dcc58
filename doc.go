// SPDX-License-Identifier: Apache-2.0

// Package dlock provides distributed locks on Redis: mutual exclusion between
// the processes of a service that runs on several hosts, with a TTL, an
// owner token, auto-renewal, a lost-lock signal and fencing tokens.
//
// This page says what a caller must know to use the API correctly. How each
// promise is kept (the quorum rounds, the clean-up after unanswered
// commands, waiting and wake-ups, the Redis keys) is in [docs/safety.md];
// what a user sees under each fault, measured, in [docs/reliability.md];
// running dlock (versions, go-redis settings, ACL, TLS, metrics) in
// [docs/operations.md].
//
// # Use
//
// A [Locker] is made once per process, on one Redis deployment with [New]
// (standalone, Sentinel or Cluster, through any go-redis v9 client), or on N
// independent Redis masters with [NewRedlock] (a lock needs N/2+1 of them).
// [Locker.Do] runs a function under a lock and releases it, even on panic;
// [Locker.Acquire] waits for a lock, [Locker.TryAcquire] makes one attempt,
// and [Lock.Release] gives it back. Acquire and Do wait until their context
// ends: give them a deadline, or they wait for as long as the lock is held
// elsewhere, or Redis does not answer. [Locker.Close], on shutdown, tells
// the Locker's holders and releases their locks, so that the fleet does not
// wait a TTL for them.
//
// # While a lock is held: Lost
//
// A held lock is renewed every TTL/3 ([WithTTL], 30s by default;
// [WithAutoRenew]). Ownership is guaranteed until its validity, the TTL less
// the time since the start of the last confirmed round and a drift of
// TTL·1% + 2ms, measured on the monotonic clock ([Lock.ValidUntil]).
// [Lock.Lost] closes when a quorum says the lock is no longer ours, or when
// the validity runs out without a confirmed renewal: before Redis can have
// expired the key, never after. [Locker.Do] then cancels the context of its
// function, with a cause that wraps [ErrLockLost].
//
// A lock can be lost at any moment while held: a process pause longer than
// the validity (GC, swapping, a stopped VM), a partition, an administrator's
// [Locker.ForceRelease]. Work under a lock watches Lost (or Do's context)
// and stops, and passes the fence to storage that can check it.
//
// # Fences
//
// Every acquisition returns a fence ([Lock.Fence]; inside Do,
// [LockFromContext] gives the lock) that is larger than the fence of every
// earlier acquisition of the same key: on one Redis and over a quorum,
// across a restart without data and a failover (the server's clock is its
// floor). Storage that records the largest fence it has seen and refuses a
// smaller one is safe even against a holder that was paused past its
// validity and does not know it lost the lock. For a read-modify-write the
// fence must be recorded when the holder reads, not only when it writes:
// otherwise a former holder can still write between the new holder's read
// and write, and that write is then silently overwritten. Every writer of
// the data must hold the same lock key and go through the check. Fences fit
// in 63 bits (a signed 64-bit column holds them).
//
// The check belongs to the storage, and two are shipped: the package
// github.com/dlock-dev/dlock/fenced keeps values in Redis behind it (its
// Claim records the fence before a read-modify-write), and the module
// github.com/dlock-dev/dlock/extra/dlocksql shows it in SQL.
//
// # Errors
//
// An acquisition that fails says why, in one of three disjoint classes, so
// that a misconfigured deployment never passes for a busy lock:
// [ErrNotAcquired] (held by someone else: the refusals alone put the quorum
// out of reach), [ErrUnavailable] (too few nodes answered: transient, and
// Acquire keeps trying on a short backoff until its context ends), and
// [ErrMisconfigured] (a permanent error that waiting cannot fix, such as a
// wrong password, a missing ACL permission, another type at a lock key, a
// Cluster node behind a plain client, or a holder of the key with another
// limit: returned at once). Each wraps the nodes' failures as [*NodeError].
// An acquisition that waited until its context ended matches ctx.Err() too.
// Extend and Release fail with [ErrNotHeld], ErrUnavailable or
// ErrMisconfigured in the same way (a second Release returns nil). A call on
// a closed Locker returns [ErrClosed]; a bad argument, [ErrInvalid];
// [Locker.Leader] of a vacant election, [ErrNoLeader]. The example of
// Locker.Acquire named Errors shows each class. A user whose ACL forbids the
// waiters' pub/sub channels (PREFIX + "inbox:*") can TryAcquire, but Acquire
// on a held lock returns ErrMisconfigured.
//
// # Shapes
//
// The same Lock, renewal, Lost and fences serve every shape:
//
//   - [WithLimit](n): a counting semaphore, at most n holders, each with a
//     Lock of its own; every holder of a key must give the same limit. Over
//     NewRedlock's N masters a permit needs ⌊N·n/(n+1)⌋+1 grants, so that
//     n+1 holders can never each hold a quorum. [Locker.SetLimit] changes
//     the limit while the key is held (the holders keep their permits; a
//     raise wakes waiters at once; the old limit is admitted against the
//     new one for [LimitGrace]).
//   - [WithShared]: a shared (read) hold; any number at once, none beside a
//     plain lock of the key (the writer), and a writer that waits keeps new
//     shared holds from starting.
//   - [Locker.AcquireAll]: several keys, every one or none, never
//     deadlocking with another call that names them in another order.
//   - [Locker.Campaign]: leader election; the lock is the leadership, its
//     fence the term, and Release resigns. [Locker.Leader] reads the leader
//     (with the count of terms, [Leader].Transitions), [Locker.Observe]
//     streams each change, [Lock.Proclaim] changes the leader's value in
//     its term, and [Health] answers a Kubernetes probe from the lock's
//     own state. A waiting candidate may ask for the leadership
//     ([Locker.RequestLeadership]): it is put first among the candidates,
//     and the leader is asked to resign.
//   - [WithMetadata], [Locker.Status] and [Locker.List]: who holds a key and
//     who waits for it (in queue order), and every lock of a deployment,
//     for operators.
//   - [Lock.Detach] and [Locker.Adopt]: a hold handed to another process
//     (acquire in an API, release in a worker). Detach stops renewing here
//     and releases nothing; Adopt confirms on a quorum that the token holds
//     the key and returns a Lock with renewal, Lost (its validity counted
//     from Adopt's own round) and the original fence. `dlock acquire`,
//     `dlock extend --token` and `dlock release --token` are its shell form.
//
// # Observability
//
// A [Hook] ([WithHook]) is told of every acquisition, every lock's end and
// every node failure (see [EventKind]; [Event.Result] classifies
// acquisitions); [WithLogger] logs what an operator should see through
// log/slog. Prometheus and OpenTelemetry are hooks in modules of their own,
// github.com/dlock-dev/dlock/extra/dlockprom and
// github.com/dlock-dev/dlock/extra/dlockotel, so that this one depends on
// go-redis alone.
//
// # Limits
//
// These are the limits of any lock built on leases, stated plainly
// ([docs/safety.md] has each in full):
//
//   - A lock can be lost at any moment while held (see Lost above); the
//     fence is the defence, for storage that checks it.
//   - Redlock assumes that the nodes' clocks advance at about the same rate
//     (bounded drift) and that process pauses are shorter than the validity.
//   - A node that restarts without its data forgets its locks and can let a
//     second holder in: run the nodes with persistence (appendonly yes;
//     appendfsync always for the strictest guarantee), or keep a restarted
//     node out of service for at least one TTL (delayed restart). The same
//     holds for a failover (Sentinel, Cluster) to a replica that had not yet
//     received a lock: its holder learns it at its next renewal, through
//     Lost; [WithReplicaAck] closes that window (and grants nothing while
//     fewer replicas than it waits for are up: after a failover with one
//     replica, until a replica is back).
//   - Fences never go backwards as long as the servers' clocks do not step
//     back, and, over a quorum, the nodes' clocks agree within the time a
//     restarted node stayed out; a failover faster than a second can repeat
//     a fence unless the replica acknowledged it (WithReplicaAck).
//   - A Cluster master that freezes instead of dying keeps renewals waiting
//     until its replica takes over: a lock survives that only if 2/3 of its
//     TTL exceeds the failover time plus up to 20s (about 60s at Redis'
//     default cluster-node-timeout); otherwise Lost closes first.
//
// The scripts need Redis 5.0 or later ([MinRedisVersion]); dlock is tested
// on Redis 7.0: standalone, Sentinel, Cluster with replicas, TLS and ACL
// users. Code that uses dlock can be unit-tested on miniredis (see the
// [README]), but these guarantees hold only on a real Redis.
//
// [README]: https://github.com/dlock-dev/dlock#unit-tests-without-a-redis-server
// [docs/safety.md]: https://github.com/dlock-dev/dlock/blob/main/docs/safety.md
// [docs/reliability.md]: https://github.com/dlock-dev/dlock/blob/main/docs/reliability.md
// [docs/operations.md]: https://github.com/dlock-dev/dlock/blob/main/docs/operations.md
package dlock
