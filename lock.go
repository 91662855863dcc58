package dlock

import (
	"slices"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
)

// A Lock is one acquisition of a named lock. Its methods are safe for
// concurrent use. Ownership can end without the owner's doing (a process
// pause, a partition, an administrator's force release): Lost is closed when
// it can no longer be guaranteed, and storage that checks the Fence can
// reject a stale owner's writes.
type Lock struct {
	// Set by newLock (fence and metadata by Adopt's round, before the lock
	// is shared) and never changed: read without a lock.
	l        *Locker
	key      string
	names    *keys.Names
	tokenArg any // the owner token, a string boxed once (see script)
	fence    uint64
	metadata string
	// election is the leadership's state when Campaign acquired the lock,
	// nil otherwise (see leadership; election.go owns it).
	election *leadership
	limit    int // WithLimit's n; 0 for a lock
	// quorum is the number of nodes that must hold the key (see
	// Locker.quorumFor).
	quorum    int
	autoRenew bool
	shared    bool // WithShared's

	// Everything below is guarded by mu. The type is one, split across
	// files for size: the validity and per-node knowledge are written by
	// the rounds (renew.go, renewals.go, lease.go, release.go), the end of the lock by
	// markLost and Release (lost.go, release.go), the hook's bookkeeping
	// by the methods in lost.go that hook.go calls, the timer by renew.go and timers.go.
	mu         sync.Mutex
	ttl        time.Duration
	nodes      []nodeLease  // per node
	oneNode    [1]nodeLease // nodes on one Redis
	validUntil time.Time
	// events is the hook's bookkeeping (hook.go's).
	events lockEvents
	// lostCh is Lost's channel, made by the first call of Lost (most locks
	// are released without one): closed, or closedCh, once the lock is
	// lost or released.
	lostCh chan struct{}
	// state is where the lock is in its life (see lockState); relBegun is
	// set once a Release began (after a loss too: the key is released), and
	// relValid then tells whether the lock was still valid as its first
	// round began (see releaseRound).
	state              lockState
	relBegun, relValid bool
	// detachedEmpty: Detach gave a Handoff without a token (a release was
	// sent before: see Detach). keep: a failed Adopt's lock, which cleans
	// nothing up (see Adopt).
	detachedEmpty, keep bool
	// rel is the latest Release round: concurrent Release calls share it.
	// The first one is firstRel (most locks are released once).
	rel      *releaseRound
	firstRel releaseRound
	// firstRun is the first release round's runner, and oneRelCopy its
	// count of the copies written of its command on one Redis (see
	// newReleaseRunner).
	firstRun   releaseRunner
	oneRelCopy [1]node.Copies
	// releaseSent is set once the first release round is sent: answers
	// that come later find the lock dead. answered, while Release waits
	// for pending answers before sending (see awaitAnswers), is closed
	// when they are in.
	releaseSent bool
	answered    chan struct{}
	// The Locker's timers (lockTimers) tick the lock at the earlier of
	// renewAt (zero: no renewal due) and the time the lost-lock signal is
	// due (see untilLost); tick handles both. timerIdx is the lock's place
	// there (guarded by lockTimers.mu, not mu).
	renewAt  time.Time
	timerIdx int
	// batchAt is the grid instant (monoMilli) at which the lock's renewal
	// is due with others (see renewals); 0: none.
	batchAt int64
	// place is where the lock is in its Locker's renewals (guarded by
	// renewals.mu, not mu).
	place wheelPlace
	// opsBusy is the slot that serialises the rounds that set the TTL
	// (renewal and Extend), so that the validity always reflects the
	// round that ran last (see takeOps); opsFree, made by a caller that
	// waits for it, is closed when it is given back.
	opsBusy   bool
	opsFree   chan struct{}
	onLostFns []func(cause error)
	// fenceArg is the fence, boxed by the first renewal (see addTo) and
	// kept for the next: read and written only by a holder of the ops
	// slot.
	fenceArg any
	// ask is the release request heard for the lock (asked.go's).
	ask askedHold
}

// newLock returns a lock with a copy of nodes; tokenArg is its token, a
// boxed string.
func (l *Locker) newLock(key string, nm *keys.Names, tokenArg any, fence uint64, cfg lockConfig, nodes []nodeLease) *Lock {
	k := &Lock{
		l: l, key: key, names: nm, tokenArg: tokenArg, fence: fence, autoRenew: cfg.autoRenew, metadata: cfg.metadata,
		limit: cfg.limit, shared: cfg.shared, quorum: l.quorumFor(cfg.limit),
		ttl: cfg.ttl,
	}
	if cfg.election {
		k.election = &leadership{}
	}
	if len(nodes) == 1 {
		k.oneNode[0] = nodes[0]
		k.nodes = k.oneNode[:]
	} else {
		k.nodes = slices.Clone(nodes)
	}
	k.validUntil = k.computeValidity()
	return k
}

// start registers the lock with its Locker and arms its timer. It reports
// false, and leaves the lock untouched, if the Locker was closed meanwhile.
func (k *Lock) start(start time.Time) bool {
	l := k.l
	k.mu.Lock()
	defer k.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.locks[k] = struct{}{}
	l.earlyRequestFor(k)
	k.events.started(start)
	if k.autoRenew {
		now := time.Now()
		k.planRenewal(now, start.Add(k.ttl/3).Sub(now)) // arms the timer too
	} else {
		k.arm()
	}
	return true
}

// Key returns the name of the lock, as passed to Acquire.
func (k *Lock) Key() string { return k.key }

// Metadata returns the metadata the lock was acquired with (WithMetadata),
// or ""; a leader's (Campaign), its value, the last one Proclaim set.
func (k *Lock) Metadata() string { return k.meta() }

// Token returns the owner token: 128 random bits, hex-encoded, stored as the
// lock's value in Redis.
func (k *Lock) Token() string { return k.tokenArg.(string) }

// Fence returns the fencing token of this acquisition: a number that is
// larger than the fence of every earlier acquisition of the same key. It is
// the larger of the key's counter + 1 and the server's time in microseconds
// rounded down to the second (the time itself when the counter is gone), so
// it also stays larger across a restart of Redis without its data, after
// the counter expired (see WithFenceRetention), and across a failover to a
// replica that missed the last increments, which takes more than a second,
// as long as the servers' clocks do not step back. Over a Redlock quorum it
// holds while fewer than
// a quorum of nodes lose their data at once and, for a node that restarted
// empty, as long as it stayed out of service for one TTL and the nodes'
// clocks agree within that time. Pass it to storage that can reject writes
// carrying a smaller fence than one it has already seen.
func (k *Lock) Fence() uint64 { return k.fence }

// Lost returns a channel that is closed once ownership can no longer be
// guaranteed: a quorum of nodes said the lock is no longer ours, the validity
// of the last confirmed acquisition or renewal ran out without a new
// confirmation, or the Locker was closed. It closes before the key can have
// expired in Redis (the validity subtracts a clock-drift margin), never after.
// It is also closed by Release.
func (k *Lock) Lost() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostCh == nil {
		k.lostCh = closedCh
		if k.alive() {
			k.lostCh = make(chan struct{})
		}
	}
	return k.lostCh
}

// closedCh is a closed channel: Lost's for a lock that ended before it was
// asked for.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// endLost closes Lost's channel if it was made; k.mu is held.
func (k *Lock) endLost() {
	if k.lostCh != nil && k.lostCh != closedCh {
		close(k.lostCh)
	}
	k.lostCh = closedCh
}

// TTL returns the lock's configured TTL, not the time it has left (unlike
// bsm/redislock's TTL): for that, see [Lock.ValidUntil]. It is WithTTL's
// (DefaultTTL without it), or the last one an Extend confirmed; each
// renewal makes the key live at least that long again (no command moves
// a key's expiry earlier: see Extend).
func (k *Lock) TTL() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ttl
}

// ValidUntil returns the time until which ownership is guaranteed by the last
// confirmed acquisition or renewal (on the monotonic clock), or the zero time
// once no quorum of nodes is known to hold it (a quorum said the lock is no
// longer ours, or the nodes that still confirm it are too few: Lost is then
// closed). Lost closes shortly before it (by TTL/20, at most 50ms, a margin
// for scheduling delays) unless a renewal is confirmed first.
func (k *Lock) ValidUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validUntil
}
