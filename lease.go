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
	var buf [8]bool
	answered := perNode(buf[:], len(k.nodes))
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
		at = k.heldUntil().Add(2 * drift(k.ttl))
	}
	k.l.clean(i, k.names, k.Token(), k.ttl, bury, at, true)
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

// grantedLeases records in leases what an acquisition's round showed of each
// node (effects): held until validUntil where it set the key, unknown
// where its answer was missed.
func grantedLeases(leases []nodeLease, effects []effect, validUntil time.Time) {
	for i, e := range effects {
		switch e {
		case effSet:
			leases[i].until = validUntil
		case effUnknown:
			leases[i].unknown = 1
		}
	}
}
