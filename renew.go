package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// Extend makes the lock's key live at least ttl from now on every node, if
// the caller still owns it, and sets the lock's TTL to ttl: its validity is
// counted from the start of this call with ttl, and later auto-renewals use
// ttl too. It returns an error wrapping ErrNotHeld (and Lost closes) if the
// lock is no longer ours, or was released or detached (see Detach: nothing
// is sent then). It waits for a renewal under way to finish first, and
// returns ctx's error if ctx ends meanwhile (nothing was sent then).
//
// No command of dlock moves a key's expiry earlier: an Extend to a shorter
// TTL than the key has left keeps the later expiry on the nodes (the
// shorter TTL takes effect as the longer one runs out, renewal by
// renewal), so that if the holder dies right after it, the key is held
// until the longer TTL ends. The reason is a command that runs late: a
// client that sent a command again after its connection failed, or a copy
// held up on the way, may run the first copy of an earlier command after
// later ones; were a command allowed to shorten the TTL, that copy could
// cut the key short while the holder's validity, counted from a later
// command, runs on, and let a second holder in.
//
// Any other error (a node that did not answer, for example) means the new
// TTL may or may not have been applied: the command may still run in Redis,
// even after later ones, and then only lengthens the key's life. The lock
// stays valid until its current validity runs out, as before.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if k == nil {
		return fmt.Errorf("%w: Extend on a nil *Lock", ErrNotHeld)
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	if err := k.takeOps(ctx); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", k.key, err)
	}
	defer k.giveOps()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dlock: extend %q: %w", k.key, err)
	}
	if !k.held() {
		if err := k.detachedErr("extend"); err != nil {
			return err
		}
		return fmt.Errorf("%w: %q", ErrNotHeld, k.key)
	}
	return k.l.nameCauses(k.extendRound(ctx, ttl, k.l.nodeTimeout(ttl)), ttl)
}

// takeOps takes the lock's slot of the rounds that set its TTL, waiting
// while another round holds it; it returns ctx's error, without the slot,
// if ctx ends first. The holder gives it back with giveOps.
func (k *Lock) takeOps(ctx context.Context) error {
	k.mu.Lock()
	for k.opsBusy {
		if k.opsFree == nil {
			k.opsFree = make(chan struct{})
		}
		free := k.opsFree
		k.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
	}
	k.opsBusy = true
	k.mu.Unlock()
	return nil
}

// tryOps takes the slot if it is free, and reports whether it did; k.mu
// is held.
func (k *Lock) tryOps() bool {
	if k.opsBusy {
		return false
	}
	k.opsBusy = true
	return true
}

// giveOps gives the slot back, and wakes the rounds that wait for it.
func (k *Lock) giveOps() {
	k.mu.Lock()
	k.opsBusy = false
	if k.opsFree != nil {
		close(k.opsFree)
		k.opsFree = nil
	}
	k.mu.Unlock()
}

func (k *Lock) held() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.alive()
}

// extendRound runs extend.lua on every node, waiting at most timeout, and
// records what each answer, or its absence, shows (see nodeLease). On a
// quorum, nodes where the key turned out to be free are then taken back
// (regain). A lock whose validity has run out, or that a quorum no longer
// holds, is reported lost; with auto-renewal, a failure is retried soon.
func (k *Lock) extendRound(ctx context.Context, ttl, timeout time.Duration) error {
	start := time.Now()
	results, missing, recorded, _ := k.fanout(ctx, ttl, timeout, k.l.nodes, nil, "0")
	free, err := k.settleRound(ttl, start, results, missing, func() { close(recorded) })
	if len(free) > 0 && k.held() { // (a Release may have begun meanwhile: it takes no ops slot)
		k.regain(ctx, ttl, min(timeout, k.l.nodeTimeout(ttl)), free)
	}
	return err
}

// settleRound records the answers of an extend round begun at start (a
// lock's own, or a batch's: see renewBatch), calls recorded once they are
// (under k.mu: the late answers wait for it), and reports the round's
// error (err); the lock is marked lost, or its next renewal
// scheduled. free lists the nodes to take back (regain) when a quorum
// confirmed and others found the key free.
func (k *Lock) settleRound(ttl time.Duration, start time.Time, results []quorum.Result[int64], missing []quorum.Missing, recorded func()) (free []int, err error) {
	l := k.l
	n := len(l.nodes)
	bound := start.Add(ttl - drift(ttl))
	o := l.ownerChecked(k.key, results, missing, k.quorum)
	k.mu.Lock()
	k.recordRound(results, nil, bound, nil)
	recorded()
	if !k.alive() {
		k.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrNotHeld, k.key)
	}
	now := time.Now() // one reading for the checks below
	switch class := o.class(ErrNotHeld); {
	case class == nil && now.Before(bound):
		k.ttl = ttl
	case class == nil:
		err = o.wrap(ErrUnavailable, fmt.Sprintf("extend %q: confirmed too late, no validity left", k.key))
	case class == ErrNotHeld:
		err = fmt.Errorf("%w: %q (%d of %d nodes no longer hold it)", ErrNotHeld, k.key, o.refused, n)
	default:
		err = o.wrap(class, fmt.Sprintf("extend %q: not confirmed%s", k.key, o.counts("confirmed")))
	}
	k.validUntil = k.computeValidity()
	untilLost := k.untilLostAt(now)
	lost := errors.Is(err, ErrNotHeld) || untilLost <= 0
	if !lost {
		switch {
		case err == nil && k.autoRenew:
			// Every TTL/3, or sooner if less validity is left: with the
			// locks due then (see renewals). It arms the timer.
			k.scheduleRenewal(now, min(start.Add(ttl/3).Sub(now), k.validUntil.Sub(now)/3))
		case err != nil && k.autoRenew:
			// Transient: try again soon, alone, until the validity runs out
			// (then the expiry timer reports the loss).
			k.arm()
			k.scheduleRenew(min(max(untilLost/4, time.Millisecond), l.nodeTimeout(ttl)))
		default:
			k.arm()
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
		return nil, err
	}
	if err != nil && l.hook != nil {
		l.hook.Event(k.eventCtx(), Event{Kind: EventRenewFailed, Key: k.key, Limit: k.limit, Err: err})
	}
	if err == nil && len(o.free) > 0 && n > 1 {
		// A quorum confirmed that we hold the lock, so nobody else can hold
		// one: take back the nodes where the key is free (it expired there
		// while the node was away, or a contender of a split vote let it
		// go), so that the lock survives the loss of a minority again.
		return o.free, nil
	}
	return nil, err
}

// regain sets the key on the given nodes, where it was just found free,
// after a quorum confirmed the lock (see extend.lua). It sends nothing if
// the lock ended first; otherwise, until its round is recorded, each node's
// command counts as one whose effect is unknown, so that a Release that
// begins meanwhile (it takes no ops slot) buries the token there: a regain
// that reaches a node after the release set nothing.
func (k *Lock) regain(ctx context.Context, ttl, timeout time.Duration, free []int) {
	k.mu.Lock()
	if !k.alive() {
		k.mu.Unlock()
		return
	}
	for _, i := range free {
		k.nodes[i].unknown++
	}
	k.mu.Unlock()
	start := time.Now()
	results, _, recorded, again := k.fanout(ctx, ttl, timeout, k.l.subset(free), free, "1")
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, i := range free {
		k.nodes[i].unknown--
	}
	k.recordRound(results, free, start.Add(ttl-drift(ttl)), again)
	if k.answered != nil && !k.pendingFromLive() {
		close(k.answered) // a Release waits for the answers (see awaitAnswers)
		k.answered = nil
	}
	close(recorded)
	if k.alive() {
		k.validUntil = k.computeValidity()
		k.arm()
	}
}

// recordFence has node i, whose grant ran after its round (a late answer)
// and issued a fence of its own, record the holder's fence with the hold
// instead (extend.lua on that node alone, as a regain, under the ops slot),
// so that Adopt reads the hold's fence there at once, not only after the
// lock's next renewal (which writes it on every node): with a node that
// recorded the right one down, the two that answer would disagree. It is
// done unless the lock ended first (Detach included) or its Locker closed.
func (k *Lock) recordFence(i int) {
	k.inBackground(func(ttl, _ time.Duration) {
		k.regain(k.l.renewCtx, ttl, k.l.nodeTimeout(ttl), []int{i})
	})
}

// inBackground runs fn, a round of the lock that sets its TTL run in the
// background (a renewal, recordFence), with the lock's TTL and the time its
// validity has left, under the lock's ops slot and as a goroutine that
// Close waits for; not once Close began, nor once the lock ended.
func (k *Lock) inBackground(fn func(ttl, valid time.Duration)) {
	l := k.l
	if !l.join(&l.wg) {
		return
	}
	defer l.wg.Done()
	if k.takeOps(l.renewCtx) != nil {
		return
	}
	defer k.giveOps()
	k.mu.Lock()
	alive, ttl, validUntil := k.alive(), k.ttl, k.validUntil
	k.mu.Unlock()
	if alive {
		fn(ttl, time.Until(validUntil))
	}
}

// fanout runs extend.lua on nodes (idx maps them to the Locker's nodes; nil
// for all of them), deciding as soon as a quorum confirmed or cannot. Node
// numbers in the results are the Locker's. Answers that arrive after the
// round are recorded once the caller has closed the returned channel, which
// it does after recording the round's own answers. A regain, which may set
// a free key, counts the copies of its command written to each node (see
// node.Copies): again tells, per result, one written more than once, whose
// copy may still set the key later (nil for a renewal, which only sets the
// key where it holds the token, and never moves its expiry earlier).
func (k *Lock) fanout(ctx context.Context, ttl, timeout time.Duration, nodes []*quorum.Node, idx []int, regain string) ([]quorum.Result[int64], []quorum.Missing, chan struct{}, []bool) {
	l := k.l
	nodeOf := func(i int) int {
		if idx == nil {
			return i
		}
		return idx[i]
	}
	recorded := make(chan struct{})
	short := regain == "0" && k.short() // a regain is whole
	call := script.NewExtendCall(1, short, l.ttlArg(ttl), regain, l.retentionArg)
	k.addTo(call, short)
	cmd := call.Command()
	need := k.quorum
	var copies []node.Copies
	if idx != nil {
		need = len(idx) // regain: as many as answer in time
		copies = make([]node.Copies, len(nodes))
	}
	run := func(ctx context.Context, i int, c node.Conn) (int64, error) {
		var v any
		var err error
		if copies != nil {
			v, err = l.runScriptCounted(ctx, c, timeout, call.Script(), call.Script().Counted(cmd, &copies[i], true), &copies[i])
		} else {
			v, err = l.runScript(ctx, c, timeout, call.Script(), cmd)
		}
		vals, errs := script.ExtendReplies(v, err, 1)
		return vals[0], errs[0]
	}
	results, missing := quorum.Fanout(ctx, nodes, timeout, quorum.RunFunc[int64](run),
		func(rs []quorum.Result[int64], suspects int) bool {
			return quorum.Decided(rs, suspects, len(nodes), need, confirmed)
		},
		quorum.LateFunc[int64](func(r quorum.Result[int64]) {
			<-recorded
			again := copies != nil && copies[r.Node].N() > 1
			k.lateAnswer(nodeOf(r.Node), l.effectOf(nodeOf(r.Node), r.Err, r.Val == 1, again))
		}))
	var again []bool
	if copies != nil {
		again = make([]bool, len(results))
		for j, r := range results {
			again[j] = copies[r.Node].N() > 1
		}
	}
	for i := range results {
		results[i].Node = nodeOf(results[i].Node)
	}
	for i := range missing {
		missing[i].Node = nodeOf(missing[i].Node)
	}
	return results, missing, recorded, again
}

// short reports whether the lock's renewals are renew.lua's (two keys, two
// arguments: see its header), which writes what extend.lua would: a lock
// (not a semaphore or a shared hold) without metadata, on one Redis (on a
// Redlock, extend.lua records the holder's fence with the hold, where
// Adopt reads it: a Redlock's counters move). A regain is always
// extend.lua's.
func (k *Lock) short() bool {
	return k.metadata == "" && k.limit <= 1 && !k.shared && len(k.l.nodes) == 1
}

// addTo adds the lock to an extend.lua call (see script.ExtendCall), short
// if the call is; the caller holds the lock's ops slot.
func (k *Lock) addTo(c *script.ExtendCall, short bool) {
	if k.fenceArg == nil {
		k.fenceArg = k.fence // boxed once, by the first renewal
	}
	if short {
		c.AddShort(k.names.ExtendKeysShort(), k.tokenArg, k.fenceArg)
		return
	}
	c.Add(k.names.ExtendKeys(), k.tokenArg, k.meta(), limitArg(k.limit, k.shared), k.fenceArg)
}

// confirmed reports whether a node confirmed a renewal (extend.lua: 1).
func confirmed(r quorum.Result[int64]) bool { return r.Err == nil && r.Val == 1 }

// scheduleRenew has the lock renewed in d; k.mu is held.
func (k *Lock) scheduleRenew(d time.Duration) {
	if k.l.isClosed() {
		return
	}
	k.leaveSchedule()
	k.renewAt = time.Now().Add(d)
	k.arm()
}

// arm sets the lock's timer (in the Locker's lockTimers) to the earlier of
// the renewal and the lost-lock signal; k.mu is held. One timer serves
// both.
func (k *Lock) arm() {
	at := k.validUntil.Add(-lostMargin(k.ttl))
	if !k.renewAt.IsZero() && k.renewAt.Before(at) {
		at = k.renewAt
	}
	k.l.timers.set(k, at)
}

// tick runs when the lock's timer fires: it reports the loss if the
// validity ran out, else renews if the renewal is due. The timer is armed
// again for the lost-lock signal before the renewal runs, so that a renewal
// stuck on slow nodes does not delay the signal.
func (k *Lock) tick() {
	k.mu.Lock()
	if !k.alive() {
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
	// A renewal is worth waiting for until the current validity runs out (a
	// slow but confirmed renewal still keeps the lock), one try of at most
	// renewTry at a time; the round decides as soon as a quorum confirms,
	// so a frozen minority does not slow it. Close cancels it.
	k.inBackground(func(ttl, valid time.Duration) {
		ctx, cancel := context.WithTimeout(k.l.renewCtx, valid)
		defer cancel()
		_ = k.extendRound(ctx, ttl, min(valid, k.l.renewTry(ttl)))
	})
}

// renewTry bounds one try of a renewal of a lock with this TTL: a sixth of
// the TTL, at least the node timeout. A renewal that fails is tried again
// within the node timeout (see settleRound) until the validity runs out:
// a try bounded by the whole validity would wait on a node that froze
// (its connection open and silent) for all of it, while a Cluster promotes
// its replica, where the next try goes.
func (l *Locker) renewTry(ttl time.Duration) time.Duration {
	return max(ttl/6, l.nodeTimeout(ttl))
}

// untilLost is how long until the lost-lock signal is due (arm's instant
// without a renewal), untilLostAt(time.Now()).
func (k *Lock) untilLost() time.Duration { return k.untilLostAt(time.Now()) }

// untilLostAt is how long from now until the lost-lock signal is due: the
// end of the validity, less a margin for the scheduling delay of the timer and of the
// goroutine that receives from Lost, which the drift does not cover; k.mu is
// held. A healthy lock never comes near it: it is renewed every TTL/3.
//
// A zero validity (no quorum is known to hold the key) is due at once:
// Sub saturates on it, and the margin would wrap the result to centuries.
func (k *Lock) untilLostAt(now time.Time) time.Duration {
	if k.validUntil.IsZero() {
		return -1
	}
	return k.validUntil.Sub(now) - lostMargin(k.ttl)
}
