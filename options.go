package dlock

import (
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults. They are documented on the options that change them.
const (
	DefaultTTL    = 30 * time.Second
	DefaultPrefix = "dlock:"

	// MinTTL is the shortest TTL accepted. Below it the clock-drift margin
	// (TTL·1% + 2ms) leaves too little validity to do anything under the lock.
	MinTTL = 10 * time.Millisecond

	// maxNodeTimeout caps the default per-node timeout: a node that has not
	// answered a lock command in a second is treated as down.
	maxNodeTimeout = time.Second

	// reserveFor is how long a release keeps the lock for the waiter it woke
	// (single Redis only), so that a newcomer cannot barge in ahead of it.
	// A live waiter takes the lock within a round trip; a dead one delays the
	// others until their fallback wake-up.
	reserveFor = 100 * time.Millisecond

	// standInAfter is how long after a wake-up the next waiter waits for the
	// woken one to take the lock before it tries itself (on top of the
	// reservation, on one Redis). Being woken itself cancels standing in.
	standInAfter = 50 * time.Millisecond

	// After a split vote on a quorum (some nodes granted, too few), a
	// contender tries again after 1ms plus a random delay below splitJitter,
	// at most maxSplitRetries times per wake-up.
	splitJitter     = 5 * time.Millisecond
	maxSplitRetries = 3

	// The fallback wake-up of a waiter, in case a release notification was
	// missed: capped exponential backoff with jitter. Waiters are woken by
	// the release itself, by the holder's TTL running out, and by the
	// return of their inbox subscription after a reconnection, so the
	// fallback is slow on purpose: an idle waiter costs next to nothing.
	fallbackBase = 15 * time.Second
	fallbackCap  = 60 * time.Second

	// errorRetryCap caps the backoff of a waiter whose attempts fail on
	// node errors (down, frozen, slow): no release will wake it when the
	// nodes are back, so it tries again at most this long after.
	errorRetryCap = time.Second

	// waiterLease is how long a waiter's registration lives in Redis without
	// being refreshed; well above the longest fallback sleep, so a live
	// waiter never drops out (it rewrites its registration when a third of
	// the lease is gone), while a dead one is skipped after it.
	waiterLease = 3 * time.Minute

	// DefaultFenceRetention is how long a lock's fence counter is kept after
	// the last acquisition (see WithFenceRetention).
	DefaultFenceRetention = 24 * time.Hour

	// maxCleanups bounds, per node, the clean-ups waiting for a node that
	// does not answer (see cleaner): beyond it the oldest are dropped, and
	// their keys expire after their TTL.
	maxCleanups = 10000
)

// Option configures a Locker.
type Option func(*lockerConfig)

type lockerConfig struct {
	prefix         string
	nodeTimeout    time.Duration
	fenceRetention time.Duration
	replicaAck     int
	hooks          []Hook
	err            error
}

// WithReplicaAck makes every acquisition and renewal count on a node only
// once n of the node's replicas have the write: the script and Redis' WAIT
// run on one connection, WAIT bounded by most of the node timeout. Redis
// replicates asynchronously, so without it a failover to a replica that had
// not yet received a lock loses the lock (its holder learns it at its next
// renewal, through Lost, and another process may acquire it meanwhile).
// With it, a grant that n replicas did not acknowledge in time fails (an
// acquisition: ErrUnavailable, and the key is cleaned up; a renewal: not
// confirmed, tried again until the validity runs out), so a lock that is
// held survives the failover of its master to any replica that
// acknowledged it. It costs a replica round trip per acquisition and
// renewal, and, if fewer than n replicas are up, every acquisition: with
// exactly n replicas, a failover leaves the promoted master with n-1, and
// nothing is granted or renewed (ErrUnavailable; holders are told through
// Lost at their validity) until another replica replicates from it. The
// default, 0, waits for none; n < 0 is an error wrapping ErrInvalid.
// Releases are not acknowledged: a release lost in a failover leaves a key
// that expires after its TTL. A server without WAIT (ElastiCache Serverless,
// for one) refuses every acquisition with ErrMisconfigured, saying that
// WithReplicaAck needs WAIT; the lock its script wrote is released before
// the acquisition returns.
func WithReplicaAck(n int) Option {
	return func(c *lockerConfig) {
		if n < 0 {
			c.err = invalid("replica acknowledgements must not be negative, got %d", n)
			return
		}
		c.replicaAck = n
	}
}

// WithPrefix sets the prefix of every Redis key and channel the Locker uses
// (default "dlock:"). Lockers that must exclude each other need the same
// prefix. A prefix may not contain '{' or '}': the lock's name supplies the
// Cluster hash tag that keeps all of a lock's keys in one slot, and braces in
// the prefix would take its place (or, with "{}", leave none); such a prefix
// is an error wrapping ErrInvalid, reported by NewRedlock and by the methods
// of a Locker made by New.
func WithPrefix(prefix string) Option {
	return func(c *lockerConfig) {
		if strings.ContainsAny(prefix, "{}") {
			c.err = invalid("prefix %q contains a brace; braces would break the Cluster hash tag of the lock's keys", prefix)
			return
		}
		c.prefix = prefix
	}
}

// WithFenceRetention sets how long a lock's fence counter is kept in Redis
// after its last use (default 24h, in whole milliseconds), so that a
// service that locks one name per entity does not leave a key per name
// behind forever. While the key has a holder the counter lives at least as
// long as the holder: acquisitions, renewals and Extend keep it, whatever
// the retention, and a release leaves it the retention from then. A counter that is gone (expired, evicted, or lost in a
// restart without data) starts again from the server's time in
// microseconds, which is above every fence issued before as long as the
// server's clock has not stepped back meanwhile: see Lock.Fence.
// d < 1ms is an error wrapping ErrInvalid.
func WithFenceRetention(d time.Duration) Option {
	return func(c *lockerConfig) {
		if d < time.Millisecond {
			c.err = invalid("fence retention must be at least 1ms, got %s", d)
			return
		}
		c.fenceRetention = d.Truncate(time.Millisecond)
	}
}

// WithNodeTimeout bounds how long one round waits for a node (default: a
// fifth of the lock's TTL, at most 1s). Renewals wait up to the end of the
// current validity instead, since a late confirmation still keeps the lock. A node that has not answered by
// then counts as failed for that round. (A call on one Redis whose context
// can never be cancelled, as a Release's, shares its deadline with the
// calls that began just before it, and may end up to a 32nd sooner; never
// later.) d ≤ 0 is an error, reported by the
// Locker's methods; a value above a third of a lock's TTL is lowered to it.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *lockerConfig) {
		if d <= 0 {
			c.err = invalid("node timeout must be positive, got %s", d)
			return
		}
		c.nodeTimeout = d
	}
}

// LockOption configures one acquisition.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl       time.Duration
	autoRenew bool
	metadata  string
	limit     int  // 0: a lock (as 1)
	shared    bool // WithShared's
	election  bool // Campaign's: the lock is a leadership (see leadership)
	err       error
}

// plain reports whether the acquisition is of a plain lock, whose everyday
// scripts are lock.lua and unlock.lua: limit 1, not shared, no metadata
// (an election's value is its metadata).
func (c *lockConfig) plain() bool { return c.limit <= 1 && !c.shared && c.metadata == "" }

// MaxMetadata is the longest metadata a lock may carry, in bytes.
const MaxMetadata = 1024

// WithMetadata stores s with the lock while it is held, for people and
// tools: who holds it (a host, a process id, a command). Status returns it,
// and `dlock status` shows it; Lock.Metadata returns it to the holder. It is
// kept in the key prefix{K}:meta, with the lock's TTL, and removed by
// Release. The default is none. s longer than MaxMetadata (1 KiB) is an
// error wrapping ErrInvalid.
func WithMetadata(s string) LockOption {
	return func(c *lockConfig) {
		if len(s) > MaxMetadata {
			c.err = invalid("metadata of %d bytes is longer than %d", len(s), MaxMetadata)
			return
		}
		c.metadata = s
	}
}

// WithLimit makes the key a counting semaphore: Acquire, TryAcquire and Do
// let at most n holders hold it at once, each with a *Lock of its own (a
// permit: its own token, Lost, Extend, Release and renewal; no two permits
// of the key get the same fence; on one Redis the fences increase strictly,
// in the order the permits were granted; over NewRedlock, where the masters
// may see concurrent grants in different orders, a permit's fence is larger
// than that of every permit granted before its acquisition began, and two
// permits granted at nearly the same moment get fences of their own, in no
// particular order). WithLimit(1) is the plain lock. Waiting
// for a permit is waiting for a lock: a release wakes the next waiter. A
// permit whose holder died comes back when its TTL runs out, on the
// server's clock. Every holder of a key must use the same limit: asking
// with another one than the current holders use (a lock and a semaphore, or
// two limits) returns at once an error that names both and changes
// nothing: the copies of a fleet disagree, so it is ErrMisconfigured
// (EventAttempt and EventRefused say ResultMisconfigured; dlock run exits
// 78), and it matches ErrInvalid too. n < 1 is an error wrapping ErrInvalid.
//
// Over NewRedlock's N masters a permit needs more than N·n/(n+1) grants, not
// a majority: otherwise n+1 holders could each hold a majority (3 masters,
// n = 2: grants on {1,2}, {2,3} and {1,3}). Since each master grants at most
// n permits, n+1 holders with more than N·n/(n+1) grants each would need more
// than N·n grants. The quorum is ⌊N·n/(n+1)⌋+1: with 5 masters, 3 for a lock
// (2 may fail), 4 for n = 2 or 3 (1 may fail), 5 for n ≥ 4 (none may fail);
// with 3 masters, 3 for any n ≥ 2.
func WithLimit(n int) LockOption {
	return func(c *lockConfig) {
		if n < 1 {
			c.err = invalid("limit %d: a semaphore needs at least one permit", n)
			return
		}
		c.limit = n
	}
}

// WithShared makes the acquisition a shared (read) hold of the key: any
// number of shared holders hold it at once; none while an exclusive holder
// (a plain lock of the key, as Acquire takes without WithShared) holds it;
// and an exclusive Acquire that waits stops new shared holds from starting,
// so that writers are not starved: a shared acquisition made after an
// exclusive one began waiting waits for it. Each shared hold is a *Lock of
// its own, with its own renewal, Lost, Extend, Release and fence, from the
// key's one counter (an exclusive hold's fence is larger than the fence of
// every hold that ended before it began). Over NewRedlock a shared hold
// needs a majority, as a lock: a majority of shared grants and a majority
// of exclusive grants have a master in common.
//
// Waiting costs what waiting for a lock costs: the last shared release
// wakes the waiting writer; an exclusive release wakes every shared waiter
// queued before the next exclusive one, however many: the release wakes the
// first 100 and each shared waiter woken, as it takes its hold, wakes the
// next two (each script stays bounded). A writer that shared holds keep
// waiting holds an intent at its place in the queue, and the check of the
// intents is exact whatever their number: a shared acquisition is refused
// while any such writer queued before it (or woken and not yet come)
// waits. (A writer that waits for an exclusive holder writes no intent
// until it finds shared holds: when that holder's TTL runs out, a shared
// acquisition that tries first is granted, and the writer then waits for
// it.) A shared holder that died
// without releasing blocks a writer until its TTL runs out, as a lock's
// holder does; a writer that shared holds keep waiting claims the key on
// every attempt (at least every third of its TTL), and one that died or
// froze stops blocking new shared holds one TTL (its own) after its last
// attempt; one that gives up (its ctx ended) lets them in at once.
// A shared holder that asks for the same key without WithShared (an
// upgrade, which sync.RWMutex has not either) waits for itself: it waits
// until its ctx ends, and new shared holds wait as long. WithShared with
// WithLimit, or in Campaign, is an error
// wrapping ErrInvalid; a shared acquisition of a key held as a semaphore,
// or the other way round, is refused as a limit mismatch (see WithLimit).
func WithShared() LockOption {
	return func(c *lockConfig) { c.shared = true }
}

// WithTTL sets the lock's TTL: the lease length, and so how long other
// processes wait after a holder dies before the lock expires (default 30s).
// With auto-renewal the lock is renewed every TTL/3 for as long as it is held.
// The TTL is used in whole milliseconds (rounded down). A TTL ≤ 0 or below
// MinTTL (10ms) is an error, wrapping ErrInvalid, returned by Acquire,
// TryAcquire and Do.
func WithTTL(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if err := checkTTL(d); err != nil {
			c.err = err
			return
		}
		c.ttl = d.Truncate(time.Millisecond)
	}
}

// WithAutoRenew turns renewal on or off (default on). On: the lock is renewed
// every TTL/3 until Release, and Lost fires only if renewal fails. Off: a
// fixed lease that expires after the TTL unless Extend is called; Lost fires
// when that lease's validity runs out.
func WithAutoRenew(on bool) LockOption {
	return func(c *lockConfig) { c.autoRenew = on }
}

func checkTTL(d time.Duration) error {
	if d <= 0 {
		return invalid("TTL must be positive, got %s", d)
	}
	if d < MinTTL {
		return invalid("TTL %s is too short for the clock-drift margin (minimum %s)", d, MinTTL)
	}
	return nil
}

// drift is the clock-drift margin subtracted from a TTL: the Redlock
// reference implementation's 1% plus 2ms for Redis' expiry precision.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// WithHook adds h to the Locker's hooks; they are called in the order they
// were added (WithLogger adds one too). A nil h is ignored. With no hook, a
// Locker does not build events at all.
func WithHook(h Hook) Option {
	return func(c *lockerConfig) {
		if h != nil {
			c.hooks = append(c.hooks, h)
		}
	}
}

// asElection makes the lock a leadership (see leadership) from its start,
// so that a Close that comes before Campaign returns announces its end.
func asElection(c *lockConfig) { c.election = true }

// refuseRing records, as the configuration's error, a *redis.Ring among
// clients (see New).
func (c *lockerConfig) refuseRing(clients []redis.UniversalClient) {
	for i, cl := range clients {
		if _, ring := cl.(*redis.Ring); ring && c.err == nil {
			c.err = invalid("client %d is a *redis.Ring, which moves keys between shards when one fails, so a lock could be held twice: use NewRedlock with one client per shard, or a Cluster", i)
		}
	}
}
