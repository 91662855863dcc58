package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// A Lock is one acquisition of a named lock. Its methods are safe for
// concurrent use. Ownership can end without the owner's doing (a process
// pause, a partition, an administrator's force release): Lost is closed when
// it can no longer be guaranteed, and storage that checks the Fence can
// reject a stale owner's writes.
type Lock struct {
	l         *Locker
	key       string
	names     *names
	token     string
	tokenArg  any // token, boxed once (see script)
	fence     uint64
	autoRenew bool
	metadata  string
	// election is the leadership's state when Campaign acquired the lock,
	// nil otherwise (see leadership; election.go owns it).
	election *leadership
	limit    int // WithLimit's n; 0 for a lock
	// quorum is the number of nodes that must hold the key (see
	// Locker.quorumFor).
	quorum int

	// ops serialises the rounds that set the TTL (renewal and Extend), so
	// that the validity always reflects the round that ran last. A channel,
	// not a mutex, so that Extend can stop waiting when its ctx ends.
	ops chan struct{}

	mu         sync.Mutex
	ttl        time.Duration
	nodes      []nodeLease  // per node
	oneNode    [1]nodeLease // nodes on one Redis
	validUntil time.Time
	// For the hook: the start of the acquiring round (zero for a lock
	// given back before Acquire returned), the acquisition's context (see
	// Hook.Start), whether EventAcquired was sent, and an EventLost held
	// back until it is.
	acquiredAt  time.Time
	hookCtx     context.Context
	told        bool
	pendingLost *Event
	lostCh      chan struct{}
	lost        bool // ownership ended while held (or Close took the lock back)
	released    bool
	// rel is the latest Release round: concurrent Release calls share it.
	// The first one is firstRel (most locks are released once).
	rel      *releaseRound
	firstRel releaseRound
	// releaseSent is set once the first release round is sent: answers
	// that come later find the lock dead. answered, while Release waits
	// for pending answers before sending (see awaitAnswers), is closed
	// when they are in.
	releaseSent bool
	answered    chan struct{}
	// timer fires at the earlier of renewAt (zero: no renewal due) and the
	// time the lost-lock signal is due (see untilLost); tick handles both.
	timer     *time.Timer
	renewAt   time.Time
	onLostFns []func(cause error)
}

// nodeLease is what a Lock knows of its key on one node. The validity of the
// lock is the time until which a quorum of nodes is known to hold the key.
type nodeLease struct {
	// until: the key holds the token at least until then, less the drift (a
	// command confirmed by the node ran after the start of its round, so the
	// TTL it set runs at least from then). Zero: not known to hold it.
	until time.Time
	// capAt is set when a command that would shorten the key's TTL (Extend
	// to a shorter TTL) went unanswered: it may still run, after any later
	// command, and the key may then expire as early as capAt (counted from
	// the start of that command's round, less the drift). The lock is valid
	// on this node until capAt at most, until a command sent after every
	// earlier one has answered (see settledAt) confirms. Zero: none.
	capAt time.Time
	// unknown counts the commands sent to the node whose effect is not
	// known: no answer came, so they may have run or may still run (a frozen
	// node runs them when it resumes). Once the lock is dead, such a node is
	// cleaned up (see cleaner).
	unknown int
	// settledAt is when unknown last fell to 0: every command sent to the
	// node before then has run. A command sent after it runs after all of
	// them, so once it confirms, a cap no longer applies.
	settledAt time.Time
	// mayHold: a command answered after its round that it set the key
	// (not counted in until): the node may hold the token, and is cleaned
	// up when the lock dies unless a release there was answered after.
	mayHold bool
}

// effective is the time until which the node is known to hold the key.
func (n *nodeLease) effective() time.Time {
	if !n.capAt.IsZero() && n.capAt.Before(n.until) {
		return n.capAt
	}
	return n.until
}

// releaseRound is one round of Release. Its fields are guarded by the
// Lock's mu: finished is set when err is; done, made by a Release call that
// waits for the round, is closed then.
type releaseRound struct {
	finished bool
	done     chan struct{}
	err      error // what Release returns
	// roundErr is the round's own failure, if any, whether or not the lock
	// had been lost (Close reports it).
	roundErr error
}

// newLock returns a lock with a copy of nodes.
func (l *Locker) newLock(key string, nm *names, token string, tokenArg any, fence uint64, cfg lockConfig, nodes []nodeLease) *Lock {
	k := &Lock{
		l: l, key: key, names: nm, token: token, tokenArg: tokenArg, fence: fence, autoRenew: cfg.autoRenew, metadata: cfg.metadata,
		limit: cfg.limit, quorum: l.quorumFor(cfg.limit),
		ops:    make(chan struct{}, 1),
		ttl:    cfg.ttl,
		lostCh: make(chan struct{}),
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

// start registers the lock with its Locker and starts its timers. It reports
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
	k.acquiredAt = start
	if k.autoRenew {
		k.renewAt = start.Add(k.ttl / 3)
	}
	k.arm()
	return true
}

// Key returns the name of the lock, as passed to Acquire.
func (k *Lock) Key() string { return k.key }

// Metadata returns the metadata the lock was acquired with (WithMetadata),
// or "".
func (k *Lock) Metadata() string { return k.metadata }

// Token returns the owner token: 128 random bits, hex-encoded, stored as the
// lock's value in Redis.
func (k *Lock) Token() string { return k.token }

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
func (k *Lock) Lost() <-chan struct{} { return k.lostCh }

// TTL returns the lock's TTL: WithTTL's (DefaultTTL without it), or the
// last one an Extend confirmed; auto-renewals use it.
func (k *Lock) TTL() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ttl
}

// ValidUntil returns the time until which ownership is guaranteed by the last
// confirmed acquisition or renewal (on the monotonic clock), or the zero time
// once a quorum of nodes said the lock is no longer ours. Lost closes shortly
// before it (by TTL/20, at most 50ms, a margin for scheduling delays) unless
// a renewal is confirmed first.
func (k *Lock) ValidUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validUntil
}

// Extend sets the lock's TTL to ttl from now, on every node, if the caller
// still owns it; later auto-renewals use the new TTL too. It returns an error
// wrapping ErrNotHeld (and Lost closes) if the lock is no longer ours, or was
// released. It waits for a renewal under way to finish first, and returns
// ctx's error if ctx ends meanwhile (nothing was sent then).
//
// Any other error (a node that did not answer, for example) means the new
// TTL may or may not have been applied: the command may still run in Redis,
// even after later ones. Extend then assumes the worst. A longer TTL changes
// nothing (the lock is held until its current validity runs out, as
// before). A shorter TTL caps the lock's validity on that node at what that
// TTL gives from the start of the call, and Lost closes before then, unless
// the node has meanwhile answered every command sent to it and confirmed a
// later one (the late answer usually comes for a call that ran on a helper
// goroutine, on a Redlock or for a wait longer than 1s; for any other it
// does not, and the lock ends at the cap).
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if k == nil {
		return fmt.Errorf("%w: Extend on a nil *Lock", ErrNotHeld)
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	select {
	case k.ops <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("dlock: extend %q: %w", k.key, ctx.Err())
	}
	defer func() { <-k.ops }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", k.key, err)
	}
	if !k.held() {
		return fmt.Errorf("%w: %q", ErrNotHeld, k.key)
	}
	return k.extendRound(ctx, ttl, k.l.nodeTimeout(ttl))
}

func (k *Lock) held() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.lost && !k.released
}

// extendRound runs extend.lua on every node, waiting at most timeout, and
// records what each answer, or its absence, shows (see nodeLease). On a
// quorum, nodes where the key turned out to be free are then taken back
// (regain). A lock whose validity has run out, or that a quorum no longer
// holds, is reported lost; with auto-renewal, a failure is retried soon.
func (k *Lock) extendRound(ctx context.Context, ttl, timeout time.Duration) error {
	l := k.l
	n := len(l.nodes)
	start := time.Now()
	bound := start.Add(ttl - drift(ttl))
	k.mu.Lock()
	// A command with a shorter TTL than the lock's may shorten it if it
	// runs after a later one.
	shortens := ttl < k.ttl
	k.mu.Unlock()
	results, missing, recorded := k.fanout(ctx, ttl, timeout, l.nodes, nil, "0")
	o := l.ownerChecked(k.key, results, missing, k.quorum)
	k.mu.Lock()
	k.recordRound(results, nil, start, bound, shortens)
	close(recorded)
	if k.lost || k.released {
		k.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotHeld, k.key)
	}
	var err error
	switch class := o.class(ErrNotHeld); {
	case class == nil && time.Now().Before(bound):
		k.ttl = ttl
	case class == nil:
		err = o.wrap(ErrUnavailable, fmt.Sprintf("extend %q: confirmed too late, no validity left", k.key))
	case class == ErrNotHeld:
		err = fmt.Errorf("%w: %q (%d of %d nodes no longer hold it)", ErrNotHeld, k.key, o.refused, n)
	default:
		err = o.wrap(class, fmt.Sprintf("extend %q: not confirmed%s", k.key, o.counts("confirmed")))
	}
	k.validUntil = k.computeValidity()
	lost := errors.Is(err, ErrNotHeld) || k.untilLost() <= 0
	if !lost {
		k.arm()
		switch {
		case err == nil && k.autoRenew:
			// Every TTL/3, or sooner if a cap left less validity.
			k.scheduleRenew(min(time.Until(start.Add(ttl/3)), time.Until(k.validUntil)/3))
		case err != nil && k.autoRenew:
			// Transient: try again soon, until the validity runs out (then
			// the expiry timer reports the loss).
			k.scheduleRenew(min(max(k.untilLost()/4, time.Millisecond), l.nodeTimeout(ttl)))
		}
	}
	k.mu.Unlock()
	if lost {
		cause := errExpired
		switch {
		case errors.Is(err, ErrNotHeld):
			cause = fmt.Errorf("%w: %w", ErrLockLost, err)
		case err != nil:
			cause = fmt.Errorf("%w: %w", errExpired, err)
		default:
			err = fmt.Errorf("%w: %q: no validity left", ErrNotHeld, k.key)
		}
		k.markLost(cause)
		return err
	}
	if err != nil && l.hook != nil {
		l.hook.Event(k.eventCtx(), Event{Kind: EventRenewFailed, Key: k.key, Limit: k.limit, Err: err})
	}
	if err == nil && len(o.free) > 0 && n > 1 {
		// A quorum confirmed that we hold the lock, so nobody else can hold
		// one: take back the nodes where the key is free (it expired there
		// while the node was away, or a contender of a split vote let it
		// go), so that the lock survives the loss of a minority again.
		k.regain(ctx, ttl, min(timeout, l.nodeTimeout(ttl)), o.free)
	}
	return err
}

// regain sets the key on the given nodes, where it was just found free,
// after a quorum confirmed the lock (see extend.lua).
func (k *Lock) regain(ctx context.Context, ttl, timeout time.Duration, free []int) {
	start := time.Now()
	results, _, recorded := k.fanout(ctx, ttl, timeout, k.l.subset(free), free, "1")
	k.mu.Lock()
	defer k.mu.Unlock()
	k.recordRound(results, free, start, start.Add(ttl-drift(ttl)), false)
	close(recorded)
	if !k.lost && !k.released {
		k.validUntil = k.computeValidity()
		k.arm()
	}
}

// fanout runs extend.lua on nodes (idx maps them to the Locker's nodes; nil
// for all of them), deciding as soon as a quorum confirmed or cannot. Node
// numbers in the results are the Locker's. Answers that arrive after the
// round are recorded once the caller has closed the returned channel, which
// it does after recording the round's own answers.
func (k *Lock) fanout(ctx context.Context, ttl, timeout time.Duration, nodes []*quorum.Node, idx []int, regain string) ([]quorum.Result[int64], []quorum.Missing, chan struct{}) {
	l := k.l
	node := func(i int) int {
		if idx == nil {
			return i
		}
		return idx[i]
	}
	recorded := make(chan struct{})
	ttlArg, fenceArg := l.ttlArg(ttl), strconv.FormatUint(k.fence, 10)
	need := k.quorum
	if idx != nil {
		need = len(idx) // regain: as many as answer in time
	}
	results, missing := quorum.Fanout(ctx, nodes, timeout,
		func(ctx context.Context, _ int, c redis.UniversalClient) (int64, error) {
			v, err := l.runScript(ctx, c, timeout, extendScript, extendScript.args(k.names.extendKeys[:], k.tokenArg, ttlArg, regain, k.metadata, limitArg(k.limit), fenceArg, l.retentionArg))
			return intReply("extend", v, err)
		},
		func(rs []quorum.Result[int64], suspects int) bool {
			ok, bad := countOK(rs)
			return ok >= need || bad+suspects > len(nodes)-need
		},
		quorum.LateFunc[int64](func(r quorum.Result[int64]) {
			<-recorded
			k.lateAnswer(node(r.Node), l.effectOf(node(r.Node), r.Err, r.Val == 1))
		}))
	for i := range results {
		results[i].Node = node(results[i].Node)
	}
	for i := range missing {
		missing[i].Node = node(missing[i].Node)
	}
	return results, missing, recorded
}

// effect is what an answer shows about a command that may set the key.
type effect int

const (
	// effNone: the command did not set the key. It was refused, or Redis
	// answered with an error (the scripts write nothing before a step that
	// can fail), or it was never sent.
	effNone effect = iota
	// effSet: the node confirmed that the command set the key.
	effSet
	// effUnknown: no answer. The command may have run, or may still run.
	effUnknown
)

// cleans reports whether the key must be cleaned up after a command with
// this effect once its token is dead (see cleaner): after a command that set
// the key, or may have; and whether the command may still run, so that the
// clean-up must also bury the token (a tombstone that refuses it: see
// release.lua).
func (e effect) cleans() (clean, bury bool) { return e != effNone, e == effUnknown }

// effectOf is what node i's answer (err, and set when it confirmed) shows.
func (l *Locker) effectOf(i int, err error, set bool) effect {
	switch {
	case err == nil && set:
		return effSet
	case err == nil || !mayHaveRun(l.nodes[i], err):
		return effNone
	default:
		return effUnknown
	}
}

// recordRound records what a round's answers show, for a command that would
// make the key hold the token until bound: the nodes of the round (idx, or
// all) that did not answer in it are unknown until their answer comes.
// k.mu is held.
func (k *Lock) recordRound(results []quorum.Result[int64], idx []int, start, bound time.Time, shortens bool) {
	answered := make([]bool, len(k.nodes))
	for _, r := range results {
		answered[r.Node] = true
		k.record(r.Node, k.l.effectOf(r.Node, r.Err, r.Val == 1), r.Err == nil && r.Val != 1, start, bound, shortens)
	}
	for i := range k.nodes {
		if !answered[i] && (idx == nil || slices.Contains(idx, i)) {
			k.record(i, effUnknown, false, start, bound, shortens)
		}
	}
}

// record notes what node i's answer to a command sent at start that would
// make the key hold the token until bound (or the absence of an answer)
// shows; refused is true when the node answered that the key is not ours
// there, and shortens when the command's TTL is shorter than the lock's, so
// that, run late, it may cut a later command's TTL short. If the lock is
// already dead, the node is cleaned up instead. k.mu is held.
func (k *Lock) record(i int, e effect, refused bool, start, bound time.Time, shortens bool) {
	n := &k.nodes[i]
	if k.cleanIfDead(i, e) {
		return
	}
	switch e {
	case effSet:
		n.until = bound
		if n.unknown == 0 && start.After(n.settledAt) {
			n.capAt = time.Time{}
		}
	case effUnknown:
		n.unknown++
		if (shortens || bound.Before(n.until)) && (n.capAt.IsZero() || bound.Before(n.capAt)) {
			n.capAt = bound
		}
	default:
		if refused {
			n.until = time.Time{}
		}
	}
}

// cleanIfDead reports whether the lock is dead (released or lost) and then
// has node i cleaned up after a command whose answer showed e. k.mu is held.
func (k *Lock) cleanIfDead(i int, e effect) bool {
	if !k.lost && (!k.released || !k.releaseSent) {
		// Alive, or released but the release is not sent yet (it will
		// run after this command and cover what it set).
		return false
	}
	if clean, bury := e.cleans(); clean {
		k.cleanNode(i, bury)
	}
	return true
}

// lateAnswer records an answer that came after its round had decided.
func (k *Lock) lateAnswer(i int, e effect) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := &k.nodes[i]
	if k.cleanIfDead(i, e) {
		return
	}
	// The command has run (or never will): one fewer whose effect is
	// unknown. What it set is not counted (its round did not count it); a
	// cap it caused stays, since the order of its run against later commands
	// is not known.
	if e == effSet {
		n.mayHold = true
	}
	if e != effUnknown && n.unknown > 0 {
		n.unknown--
		if n.unknown == 0 {
			n.settledAt = time.Now()
		}
	}
	if k.answered != nil && !k.pendingFromLive() {
		close(k.answered)
		k.answered = nil
	}
}

// cleanNode has node i cleaned up after the lock's death, where the key may
// hold the token; bury where a command of the lock may still run (see
// cleaner). A lost lock is cleaned once its key would have expired anyway,
// so that its holder keeps the time between Lost and the expiry to stop its
// work; a released one at once. k.mu is held.
func (k *Lock) cleanNode(i int, bury bool) {
	at := time.Now()
	if !k.released {
		at = k.validUntil.Add(2 * drift(k.ttl))
	}
	k.l.clean(i, k.names, k.token, k.ttl, bury, at, true)
}

// cleanLeftovers has node i cleaned up after the lock's death: where a
// command of the lock may still run, burying the token (even where a
// release was answered: the command may come after it; see cleaner); where
// the key may hold the token, unless released (a release answered there).
// k.mu is held.
func (k *Lock) cleanLeftovers(i int, released bool) {
	n := &k.nodes[i]
	switch {
	case n.unknown > 0:
		k.cleanNode(i, true)
	case released:
	case !n.until.IsZero() || n.mayHold:
		k.cleanNode(i, false)
	}
}

// computeValidity is the time until which a quorum of nodes is known to hold
// the key; k.mu is held.
func (k *Lock) computeValidity() time.Time {
	q := k.quorum
	if len(k.nodes) == 1 {
		return k.nodes[0].effective()
	}
	ts := make([]time.Time, len(k.nodes))
	for i := range k.nodes {
		ts[i] = k.nodes[i].effective()
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return b.Compare(a) })
	return ts[q-1]
}

// renewable reports whether a renewal can lengthen the validity: on a quorum
// of nodes, no cap applies at or before it, or one that a renewal can lift.
// k.mu is held.
func (k *Lock) renewable() bool {
	free := 0
	for _, n := range k.nodes {
		if n.capAt.IsZero() || n.capAt.After(k.validUntil) || n.unknown == 0 {
			free++
		}
	}
	return free >= k.quorum
}

func countOK(rs []quorum.Result[int64]) (ok, bad int) {
	for _, r := range rs {
		if r.Err == nil && r.Val == 1 {
			ok++
		} else {
			bad++
		}
	}
	return ok, bad
}

// scheduleRenew has the lock renewed in d; k.mu is held.
func (k *Lock) scheduleRenew(d time.Duration) {
	if k.l.isClosed() {
		return
	}
	k.renewAt = time.Now().Add(d)
	k.arm()
}

// arm sets the lock's timer to the earlier of the renewal and the lost-lock
// signal; k.mu is held. One timer serves both: a lock costs one.
func (k *Lock) arm() {
	d := k.untilLost()
	if !k.renewAt.IsZero() {
		d = min(d, time.Until(k.renewAt))
	}
	if k.timer == nil {
		k.timer = time.AfterFunc(d, k.tick)
	} else {
		k.timer.Reset(d)
	}
}

// tick runs when the lock's timer fires: it reports the loss if the
// validity ran out, else renews if the renewal is due. The timer is armed
// again for the lost-lock signal before the renewal runs, so that a renewal
// stuck on slow nodes does not delay the signal.
func (k *Lock) tick() {
	k.mu.Lock()
	if k.lost || k.released {
		k.mu.Unlock()
		return
	}
	if k.untilLost() <= 0 {
		k.mu.Unlock()
		k.markLost(errExpired)
		return
	}
	renew := !k.renewAt.IsZero() && !time.Now().Before(k.renewAt)
	if renew {
		k.renewAt = time.Time{}
	}
	k.arm()
	k.mu.Unlock()
	if renew {
		k.renew()
	}
}

// renew is the auto-renewal, run by tick.
func (k *Lock) renew() {
	l := k.l
	if !l.join(&l.wg) {
		return
	}
	defer l.wg.Done()
	select {
	case k.ops <- struct{}{}:
	case <-l.renewCtx.Done():
		return
	}
	defer func() { <-k.ops }()
	k.mu.Lock()
	if k.lost || k.released || !k.renewable() {
		// A lock whose validity is capped (an unconfirmed Extend to a
		// shorter TTL) ends at that cap: renewing it would only keep its
		// key in Redis past Lost.
		k.mu.Unlock()
		return
	}
	ttl, validUntil := k.ttl, k.validUntil
	k.mu.Unlock()

	// A renewal is worth waiting for until the current validity runs out (a
	// slow but confirmed renewal still keeps the lock); the round decides as
	// soon as a quorum confirms, so a frozen minority does not slow it.
	// Close cancels it.
	ctx, cancel := context.WithDeadline(l.renewCtx, validUntil)
	defer cancel()
	_ = k.extendRound(ctx, ttl, time.Until(validUntil))
}

// untilLost is how long until the lost-lock signal is due: the end of the
// validity, less a margin for the scheduling delay of the timer and of the
// goroutine that receives from Lost, which the drift does not cover; k.mu is
// held. A healthy lock never comes near it: it is renewed every TTL/3.
func (k *Lock) untilLost() time.Duration {
	return time.Until(k.validUntil) - lostMargin(k.ttl)
}

// eventCtx is the context of the lock's background events for the hook:
// its acquisition's, without its cancellation.
func (k *Lock) eventCtx() context.Context {
	k.mu.Lock()
	ctx := k.hookCtx
	k.mu.Unlock()
	if ctx == nil {
		return context.Background()
	}
	return context.WithoutCancel(ctx)
}

// errExpired is the cause of a loss by expiry (see tick).
var errExpired = fmt.Errorf("%w: its validity ran out without a confirmed renewal", ErrLockLost)

// lostMargin is how long before the end of its validity a lock is reported
// lost (see untilLost).
func lostMargin(ttl time.Duration) time.Duration { return min(ttl/20, 50*time.Millisecond) }

// markLost records that ownership ended while held and tells the holder:
// Lost closes, and the functions registered with onLost run with cause. The
// nodes where the key may still hold the token, or where a command of the
// lock may still run, are cleaned up once the key would have expired anyway.
func (k *Lock) markLost(cause error) {
	k.mu.Lock()
	if k.lost || k.released {
		k.mu.Unlock()
		return
	}
	k.lost = true
	close(k.lostCh)
	k.stopTimers()
	for i := range k.nodes {
		k.cleanLeftovers(i, false)
	}
	fns := k.onLostFns
	k.onLostFns = nil
	k.mu.Unlock()
	k.forget()
	// The holder first (Do's context), the hook after: a slow hook must
	// not delay it.
	for _, f := range fns {
		f(cause)
	}
	if k.l.hook != nil {
		k.lostEvent(cause)
	}
}

// lostEvent tells the hook that the lock was lost, once it was told that it
// was acquired (see acquisition.end).
func (k *Lock) lostEvent(cause error) {
	k.mu.Lock()
	e := Event{Kind: EventLost, Key: k.key, Limit: k.limit, Held: time.Since(k.acquiredAt), Reason: lostReason(cause), Err: cause}
	if !k.told {
		k.pendingLost = &e
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.l.hook.Event(k.eventCtx(), e)
}

func (k *Lock) stopTimers() {
	if k.timer != nil {
		k.timer.Stop()
	}
	k.renewAt = time.Time{}
}

func (k *Lock) forget() {
	k.l.mu.Lock()
	delete(k.l.locks, k)
	k.l.mu.Unlock()
}

// onLost registers f to run when the lock is lost (not when it is released),
// with the cause of the loss.
func (k *Lock) onLost(f func(cause error)) {
	k.mu.Lock()
	if k.lost {
		k.mu.Unlock()
		f(ErrLockLost)
		return
	}
	if !k.released {
		k.onLostFns = append(k.onLostFns, f)
	}
	k.mu.Unlock()
}

func (k *Lock) wasLost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Release gives the lock up: it stops the renewal, closes Lost, and deletes
// the key on every node (only where it still holds this lock's token),
// waking the next waiter. It waits for every node that is answering (not for
// one that recently did not answer in time), so that when it returns the lock
// can be taken again at once; a node it did not wait for is cleaned up in the
// background when it answers again. It runs on a context detached from ctx's
// cancellation, with its own timeout (the node timeout, at least 100ms), so
// that a cancelled caller does not leave the lock behind.
//
// It returns nil when a quorum confirmed the release, and an error wrapping
// ErrNotHeld if the lock had been lost (Lost had fired, or the Locker was
// closed) or a quorum said it no longer held it: work done under the lock
// may then have overlapped another owner's. Any other error means the
// release could not be confirmed; the key then expires after its TTL, and
// Release may be called again. Calls made while a Release is under way wait
// for it and return its outcome; Release after a successful Release returns
// nil. Release on a nil *Lock returns an error wrapping ErrNotHeld.
func (k *Lock) Release(ctx context.Context) error {
	if k == nil {
		return fmt.Errorf("%w: Release on a nil *Lock", ErrNotHeld)
	}
	return k.release(ctx).err
}

func (k *Lock) release(ctx context.Context) *releaseRound {
	k.mu.Lock()
	if r := k.rel; r != nil {
		if !r.finished {
			if r.done == nil {
				r.done = make(chan struct{})
			}
			done := r.done
			k.mu.Unlock()
			<-done
			return r
		}
		if r.err == nil || errors.Is(r.err, ErrNotHeld) {
			k.mu.Unlock()
			return r
		}
		// Not confirmed: try again.
	}
	r := &k.firstRel
	if k.rel != nil {
		r = &releaseRound{}
	}
	k.rel = r
	wasLost, acquiredAt := k.lost, k.acquiredAt
	first := !k.released
	if first {
		k.released = true
		if !k.lost {
			close(k.lostCh)
		}
		k.stopTimers()
		k.onLostFns = nil
	}
	ttl := k.ttl
	k.mu.Unlock()
	if first {
		k.forget()
	}
	hctx := ctx
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	roundErr := k.releaseRound(ctx, ttl)
	err := roundErr
	if wasLost {
		err = fmt.Errorf("%w: %q was lost before it was released", ErrNotHeld, k.key)
	}
	// The round is over: calls waiting for it get its outcome, even if a
	// hook told of it below panics.
	k.mu.Lock()
	r.roundErr, r.err, r.finished = roundErr, err, true
	if r.done != nil {
		close(r.done)
	}
	k.mu.Unlock()
	if first && !wasLost {
		// A leader resigned: observers hear of the vacancy now.
		k.resigned()
	}
	if first && !wasLost && k.l.hook != nil && !acquiredAt.IsZero() {
		if errors.Is(roundErr, ErrNotHeld) {
			// Lost before Lost could tell (a pause past the validity, a
			// force release): for the hook, a loss.
			k.lostEvent(fmt.Errorf("%w: found by Release: %w", ErrLockLost, roundErr))
		} else {
			k.l.hook.Event(hctx, Event{Kind: EventReleased, Key: k.key, Limit: k.limit, Held: time.Since(acquiredAt), Err: roundErr})
		}
	}
	return r
}

// awaitAnswers, on a quorum, waits a little (a tenth of the round's timeout
// at most) for the answers still pending from nodes that are not suspect
// (the nodes an acquisition or a renewal decided without: they usually
// answer within a millisecond), so that the release sent next runs after
// those commands and covers what they set. Without the wait each such node
// would need one more release in the background (see cleaner), which is
// still what happens when the answer takes longer. On one Redis a command
// without an answer gives none later, and nothing is waited for. The
// release is marked as sent when it returns.
func (k *Lock) awaitAnswers(timeout time.Duration) {
	k.mu.Lock()
	if k.releaseSent || k.lost || len(k.nodes) == 1 || !k.pendingFromLive() {
		k.releaseSent = true
		k.mu.Unlock()
		return
	}
	k.answered = make(chan struct{})
	ch := k.answered
	k.mu.Unlock()
	t := time.NewTimer(timeout / 10)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	k.mu.Lock()
	k.releaseSent, k.answered = true, nil
	k.mu.Unlock()
}

// pendingFromLive reports whether a node that is not suspect has commands
// of the lock without an answer; k.mu is held.
func (k *Lock) pendingFromLive() bool {
	for i, n := range k.nodes {
		if n.unknown > 0 && !k.l.nodes[i].Suspect() {
			return true
		}
	}
	return false
}

// releaseRound deletes the key on every node where it holds the token, and
// has the nodes it could not confirm, or where a command of the lock may
// still run, cleaned up in the background.
func (k *Lock) releaseRound(ctx context.Context, ttl time.Duration) error {
	l := k.l
	n := len(l.nodes)
	timeout := max(l.nodeTimeout(ttl), 100*time.Millisecond)
	k.awaitAnswers(timeout)
	results, missing := quorum.Fanout(ctx, l.nodes, timeout,
		func(ctx context.Context, i int, c redis.UniversalClient) (int64, error) {
			return l.runRelease(ctx, i, c, k.names, k.tokenArg, "", true, k.metadata != "", false)
		},
		func(rs []quorum.Result[int64], suspects int) bool {
			// Every node that is answering: a node left holding the key
			// would refuse an acquisition made right after Release.
			return len(rs)+suspects >= n
		}, nil)
	o := l.ownerChecked(k.key, results, missing, k.quorum)
	var ansBuf [8]bool
	answered := perNode(ansBuf[:], n)
	for _, r := range results {
		answered[r.Node] = r.Err == nil
	}
	k.mu.Lock()
	for i := range k.nodes {
		k.cleanLeftovers(i, answered[i])
	}
	k.mu.Unlock()
	switch class := o.class(ErrNotHeld); class {
	case nil:
		return nil
	case ErrNotHeld:
		return fmt.Errorf("%w: %q had expired or been taken (%d of %d nodes no longer held it)", ErrNotHeld, k.key, o.refused, n)
	default:
		return o.wrap(class, fmt.Sprintf("release %q: not confirmed%s, the key expires after its TTL", k.key, o.counts("confirmed")))
	}
}
