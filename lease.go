package dlock

import (
	"slices"
	"time"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// nodeLease is what a Lock knows of its key on one node. The validity of the
// lock is the time until which a quorum of nodes is known to hold the key.
type nodeLease struct {
	// until: the key holds the token at least until then, less the drift (a
	// command confirmed by the node ran after the start of its round, so the
	// TTL it set runs at least from then: no command of dlock moves a key's
	// expiry earlier, so a command that runs late, after a later one, cannot
	// cut it short). Zero: not known to hold it.
	until time.Time
	// unknown counts the commands sent to the node whose effect is not
	// known: no answer came, so they may have run or may still run (a frozen
	// node runs them when it resumes). Once the lock is dead, such a node is
	// cleaned up (see cleaner).
	unknown int
	// again: a command of the lock that sets the key (its acquisition, a
	// regain) was written to the node more than once (a client's retry, an
	// extra's resend: see node.Copies), so that a copy of it may still run
	// there, even after the lock's release; the token is buried there when
	// the lock dies (see cleanLeftovers).
	again bool
	// mayHold: a command answered after its round that it set the key
	// (not counted in until): the node may hold the token, and is cleaned
	// up when the lock dies unless a release there was answered after.
	mayHold bool
	// released: a release sent to the node may have run (it was written
	// more than once, or went unanswered): a later release that finds the
	// key no longer holding the token there counts it as released, not as
	// taken (see releaseRound).
	released bool
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
	// effUnknown: no answer, or a refusal of a command written more than
	// once. The command may have run, or may still run.
	effUnknown
	// effSetAgain: the node confirmed that the command set the key, and a
	// copy of it, written more than once, may still run.
	effSetAgain
)

// cleans reports whether the key must be cleaned up after a command with
// this effect once its token is dead (see cleaner): after a command that set
// the key, or may have; and whether the command may still run, so that the
// clean-up must also bury the token (a tombstone that refuses it: see
// release.lua).
func (e effect) cleans() (clean, bury bool) { return e != effNone, e == effUnknown || e == effSetAgain }

// sets reports whether the node confirmed that the command set the key.
func (e effect) sets() bool { return e == effSet || e == effSetAgain }

// effectOf is what node i's answer (err, and set when it confirmed) shows,
// for a command written more than once if again is set.
func (l *Locker) effectOf(i int, err error, set, again bool) effect {
	switch {
	case err == nil && set && again:
		return effSetAgain
	case err == nil && set:
		return effSet
	case again:
		// Refused here, or failed (an error reply counts: the retry got
		// it, BUSY or LOADING, while the first copy is held up), but a
		// copy may still run.
		return effUnknown
	case err == nil || !mayHaveRun(l.nodes[i], err):
		return effNone
	default:
		return effUnknown
	}
}

// recordRound records what a round's answers show, for a command that would
// make the key hold the token until bound: the nodes of the round (idx, or
// all) that did not answer in it are unknown until their answer comes.
// again tells, per result, a command written more than once (nil: none).
// k.mu is held.
func (k *Lock) recordRound(results []quorum.Result[int64], idx []int, bound time.Time, again []bool) {
	var buf [8]bool
	answered := perNode(buf[:], len(k.nodes))
	for j, r := range results {
		answered[r.Node] = true
		k.record(r.Node, k.l.effectOf(r.Node, r.Err, r.Val == 1, again != nil && again[j]), r.Err == nil && r.Val != 1, bound)
	}
	for i := range k.nodes {
		if !answered[i] && (idx == nil || slices.Contains(idx, i)) {
			k.record(i, effUnknown, false, bound)
		}
	}
}

// record notes what node i's answer to a command that would make the key
// hold the token until bound (or the absence of an answer) shows; refused
// is true when the node answered that the key is not ours there. If the
// lock is already dead, the node is cleaned up instead. k.mu is held.
func (k *Lock) record(i int, e effect, refused bool, bound time.Time) {
	n := &k.nodes[i]
	if k.cleanIfDead(i, e) {
		return
	}
	switch e {
	case effSet, effSetAgain:
		n.until = bound
		n.again = n.again || e == effSetAgain
	case effUnknown:
		n.unknown++
	default:
		if refused {
			n.until = time.Time{}
		}
	}
}

// cleanIfDead reports whether the lock is dead (released or lost) and then
// has node i cleaned up after a command whose answer showed e. k.mu is held.
func (k *Lock) cleanIfDead(i int, e effect) bool {
	switch {
	case k.alive() || k.state == stateReleased && !k.releaseSent:
		// Alive, or released but the release is not sent yet (it will
		// run after this command and cover what it set).
		return false
	case k.state == stateDetached:
		return true // the hold is another process's now: nothing is cleaned
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
	// unknown. What it set is not counted (its round did not count it).
	if e.sets() {
		n.mayHold = true
	}
	n.again = n.again || e == effSetAgain
	if e != effUnknown && n.unknown > 0 {
		n.unknown--
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
	if k.state == stateDetached || k.keep {
		return // see cleanIfDead; a failed Adopt's: see Adopt
	}
	at := time.Now()
	if !k.relBegun {
		at = k.heldUntil().Add(2 * drift(k.ttl))
	}
	k.l.clean(i, k.names, k.Token(), k.ttl, bury, at, true)
	k.nodes[i].released = true // the cleaner's release may run before a Release's
}

// heldUntil is the validity, or, when no quorum is known to hold the key
// (a zero validity), the latest time until which a node is known to hold
// it: the lock is lost, and the key still keeps others out until then.
// k.mu is held.
func (k *Lock) heldUntil() time.Time {
	if !k.validUntil.IsZero() {
		return k.validUntil
	}
	var last time.Time
	for _, n := range k.nodes {
		if n.until.After(last) {
			last = n.until
		}
	}
	return last
}

// cleanLeftovers has node i cleaned up after the lock's death: where a
// command of the lock may still run, burying the token (even where a
// release was answered: the command may come after it; see cleaner),
// unless that release buried it itself (buried); where the key may hold
// the token, unless released (a release answered there). k.mu is held.
func (k *Lock) cleanLeftovers(i int, released, buried bool) {
	n := &k.nodes[i]
	switch {
	case buried:
	case n.unknown > 0 || n.again:
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
		return k.nodes[0].until
	}
	ts := make([]time.Time, len(k.nodes))
	for i := range k.nodes {
		ts[i] = k.nodes[i].until
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return b.Compare(a) })
	return ts[q-1]
}

// grantedLeases records in leases what an acquisition's round showed of each
// node (effects): held until validUntil where it set the key, unknown
// where its answer was missed.
func grantedLeases(leases []nodeLease, effects []effect, validUntil time.Time) {
	for i, e := range effects {
		switch e {
		case effSet, effSetAgain:
			leases[i].until = validUntil
			leases[i].again = e == effSetAgain
		case effUnknown:
			leases[i].unknown = 1
		}
	}
}
