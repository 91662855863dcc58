package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

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
// may then have overlapped another owner's. A node where an earlier copy
// of the release may have run (the client sent it again after its first
// answer was lost, or an earlier Release went unanswered there) and that
// now finds the key gone counts as confirmed, when the lock was still
// valid as this release began: nothing but that copy, a force release or
// a loss of Redis' data can have freed it, and the work done under the lock
// did not overlap another owner's. Any other error means the
// release could not be confirmed; the key then expires after its TTL, and
// Release may be called again. Calls made while a Release is under way wait
// for it and return its outcome; Release after a successful Release returns
// nil. Release on a nil *Lock returns an error wrapping ErrNotHeld, and
// so does Release on a detached lock (see Detach), which sends nothing.
func (k *Lock) Release(ctx context.Context) error {
	if k == nil {
		return fmt.Errorf("%w: Release on a nil *Lock", ErrNotHeld)
	}
	return k.release(ctx).err
}

// release runs (or joins) a release round of k and returns it. A detached
// lock sends nothing: its round is finished at once with the error of
// Release on a detached lock (see Detach).
func (k *Lock) release(ctx context.Context) *releaseRound {
	k.mu.Lock()
	if k.state == stateDetached {
		k.mu.Unlock()
		err := k.detachedError("release")
		return &releaseRound{finished: true, err: err, roundErr: err}
	}
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
	wasLost, acquiredAt := k.state == stateLost, k.events.acquiredAt
	first := !k.relBegun
	if first {
		k.relBegun = true
		if k.end(stateReleased) {
			k.endLost()
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
	roundErr := k.l.nameCauses(k.releaseRound(ctx, ttl), ttl) // before the round's callers share it
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
	if k.releaseSent || k.state == stateLost || len(k.nodes) == 1 || !k.pendingFromLive() {
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
//
// A release may run twice (a client that sent it again after its
// connection failed, an extra's resend), or run in an earlier round: a node
// whose release was written more than once, or was answered or went
// unanswered in an earlier round, and that now finds the key no longer
// holding the token, counts as released, not as taken, when the lock was
// still valid as the first round began (its key could not have expired,
// nor been taken without an administrator's ForceRelease or a loss of
// Redis' data, before that release ran).
func (k *Lock) releaseRound(ctx context.Context, ttl time.Duration) error {
	l := k.l
	n := len(l.nodes)
	timeout := max(l.nodeTimeout(ttl), 100*time.Millisecond)
	k.awaitAnswers(timeout)
	run := k.newReleaseRunner(ttl)
	results, missing := quorum.Fanout(ctx, l.nodes, timeout, run,
		func(rs []quorum.Result[int64], suspects int) bool {
			// Every node that is answering: a node left holding the key
			// would refuse an acquisition made right after Release.
			return quorum.AllAnswering(rs, suspects, n)
		}, nil)
	o := l.ownerChecked(k.key, results, missing, k.quorum)
	var ansBuf [8]bool
	answered := perNode(ansBuf[:], n)
	for _, r := range results {
		answered[r.Node] = r.Err == nil
	}
	k.mu.Lock()
	for i := range k.nodes {
		k.cleanLeftovers(i, answered[i], answered[i] && run.bury != nil && run.bury[i])
	}
	for _, r := range results {
		// Released there by this round, or perhaps by a copy of it.
		if r.Err == nil && r.Val == 1 || run.copies[r.Node].N() > 1 || r.Err != nil && mayHaveRun(l.nodes[r.Node], r.Err) {
			k.nodes[r.Node].released = true
		}
	}
	for _, m := range missing {
		k.nodes[m.Node].released = true
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

// releaseRunner is a release round's command on each node (see
// releaseRound): unlock.lua for a plain lock of a Locker that never waited,
// which finds no waiters most of the time (and needs a TTL within the
// counter's retention); release.lua otherwise.
type releaseRunner struct {
	k     *Lock
	lean  bool
	shape releaseShape
	// copies counts the copies of each node's command written; earlier
	// tells the nodes where a release of an earlier round, or of this one
	// written more than once, may have run, valid whether the lock was
	// valid as the round began (see releaseRound).
	copies  []node.Copies
	earlier []bool
	valid   bool
	// bury tells the nodes where a command of the lock may still run (one
	// not answered, or written more than once): the release buries the
	// token there (release.lua), so that the command, run late, is refused.
	bury []bool
}

// newReleaseRunner returns the runner of a release round of k with this
// TTL.
func (k *Lock) newReleaseRunner(ttl time.Duration) *releaseRunner {
	l := k.l
	n := len(l.nodes)
	k.mu.Lock()
	r := &k.firstRun // the first round: no allocation on one Redis
	if r.k == nil {
		r.copies = perNode(k.oneRelCopy[:], n)
	} else {
		r = &releaseRunner{copies: make([]node.Copies, n)}
	}
	r.k, r.shape = k, anyShape
	if k.short() && ttl <= l.cfg.fenceRetention {
		r.shape = plainInRetention
		r.lean = !l.waitedBefore()
	} else if k.metadata == "" && n == 1 {
		r.shape = noMetadata // (a Redlock's hold records its fence there)
	}
	if r == &k.firstRun {
		k.relValid = time.Now().Before(k.validUntil)
	}
	r.valid = k.relValid
	for i := range k.nodes {
		if k.nodes[i].released {
			if r.earlier == nil {
				r.earlier = make([]bool, n)
			}
			r.earlier[i] = true
		}
		if k.nodes[i].unknown > 0 || k.nodes[i].again {
			if r.bury == nil {
				r.bury = make([]bool, n)
			}
			r.bury[i] = true
		}
	}
	k.mu.Unlock()
	return r
}

// Run releases the lock on node i.
func (r *releaseRunner) Run(ctx context.Context, i int, c node.Conn) (int64, error) {
	k := r.k
	l := k.l
	cp := &r.copies[i]
	bury := r.bury != nil && r.bury[i]
	v, err := l.whileSlotMoves(ctx, i, func() (int64, error) {
		if r.lean && !bury {
			return l.runUnlock(ctx, i, c, k.names, k.tokenArg, cp)
		}
		return l.runRelease(ctx, i, c, k.names, k.tokenArg, "", true, r.shape, bury, cp)
	})
	if err == nil && v == 0 && r.valid && (cp.N() > 1 || r.earlier != nil && r.earlier[i] || k.releasedOn(i)) {
		v = 1 // an earlier copy, or the clean-up, released it (see releaseRound)
	}
	return v, err
}

// releasedOn reports whether a release of the lock may have run on node i
// (see nodeLease.released): the clean-up's, scheduled after the round
// began.
func (k *Lock) releasedOn(i int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.nodes[i].released
}

// runUnlock releases a plain lock on node i with unlock.lua, and with
// release.lua, which wakes the next waiter, if unlock.lua found waiters
// (one round trip more, when a Locker that never waited releases a lock
// that others wait for). cp counts the copies of the first command
// written, and of the second too (either may have run).
func (l *Locker) runUnlock(ctx context.Context, i int, c node.Conn, nm *keys.Names, token any, cp *node.Copies) (int64, error) {
	v, err := runOnCounted(ctx, c, script.Unlock, script.UnlockCommand(nm.UnlockKeys(), token), cp)
	n, err := script.IntReply("unlock", v, err)
	if err != nil || n != script.Other {
		return n, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err // out of time for the second command (see attemptCmd.run)
	}
	var second node.Copies
	n, err = l.runRelease(ctx, i, c, nm, token, "", true, plainInRetention, false, &second)
	if second.N() > 1 {
		cp.Again() // counted as the first's: a copy may have run
	}
	return n, err
}

// noSlotTag is release.lua's slot tag off a Cluster.
var noSlotTag any = ""

// waker returns what a script that wakes waiters of nm on node i needs
// (release.lua, and a shared waiter's shared.lua).
func (l *Locker) waker(i int, nm *keys.Names) script.Waker {
	wk := script.Waker{InboxPrefix: l.inboxesArg, Listeners: "1", SlotTag: noSlotTag, Reserve: l.reserveArg}
	if l.nodes[i].Cluster {
		// An inbox's subscription may sit on another node of the Cluster:
		// PUBLISH does not count its receivers there.
		wk.Listeners = "0"
		// A waiter's sharded inbox listens in the key's slot.
		wk.SlotTag = keys.SlotTag(keys.Slot(nm.Lock()))
	}
	return wk
}

// What a release knows of the lock it releases (see runRelease).
type releaseShape uint8

const (
	anyShape         releaseShape = iota // metadata may be stored, the counter's life may need shortening
	noMetadata                           // no metadata stored
	plainInRetention                     // a plain lock without metadata whose TTL is within the retention
)

// runRelease runs release.lua with c, node i's client: expected is the
// owner token or a reservation "~ID"; leaving is a waiter id to remove from
// the queue, or ""; wake says whether to wake the next waiter; shape what
// the release knows of the lock (plainInRetention: the counter, whose life
// every acquisition and renewal set to the retention, needs no change);
// bury whether to leave a tombstone for expected, a dead token of which a
// command may still run (see cleaner); cp, unless nil, counts the copies of
// the command written.
func (l *Locker) runRelease(ctx context.Context, i int, c node.Conn, nm *keys.Names, expected any, leaving string, wake bool, shape releaseShape, bury bool, cp *node.Copies) (int64, error) {
	var w, m, tomb, life any = "0", "1", "0", l.retentionArg
	if wake {
		w = "1"
	}
	if shape != anyShape {
		m = "0"
	}
	if shape == plainInRetention {
		life = ""
	}
	if bury {
		tomb = buryForArg
	}
	wk := l.waker(i, nm)
	argv := script.ReleaseArgs{Expected: expected, InboxPrefix: wk.InboxPrefix, Reserve: wk.Reserve, Leaving: leaving,
		Wake: w, Metadata: m, Listeners: wk.Listeners, Bury: tomb, Retention: life, SlotTag: wk.SlotTag}
	v, err := runOnCounted(ctx, c, script.Release, argv.Command(nm.ReleaseKeys()), cp)
	return script.IntReply("release", v, err)
}
