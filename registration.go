package dlock

import (
	"strconv"
	"strings"
	"time"
)

// nodeWait is a waiter's registration on one node.
type nodeWait struct {
	pos    string    // queue position from the last reply, "0" for none
	queued bool      // the member sits in the waiting set (a reply said so)
	regAt  time.Time // when the registration was last written; zero: write it
	// maybe: an attempt that registers went unanswered, and may write the
	// registration when the node resumes, whatever a later reply says.
	maybe bool
	// popped: a release popped the registration from the waiting set (it
	// woke this waiter) and no reply said it was written again since.
	popped bool
	// intent: a reply said the waiter wrote its intent (a writer waiting
	// for shared holds), which only its grant or its leaving removes.
	intent bool
}

// waiterMember names this Locker's waiter for key; seq tells apart waiters of
// successive keyStates for the same key, so that a late removal of an old
// registration cannot remove a new one.
func (l *Locker) waiterMember(key string) string {
	return l.memberID() + ":" + strconv.FormatUint(l.seq.Add(1), 10) + ":" + key
}

// readerMember names the waiter of a shared acquisition (see
// keyState.shared): its SEQ begins with "r", which tells the scripts.
func (l *Locker) readerMember(seq uint64, key string) string {
	return l.memberID() + ":r" + strconv.FormatUint(seq, 10) + ":" + key
}

// sharedMember reports whether a waiting set's member is a shared
// acquisition's waiter (see readerMember).
func sharedMember(m string) bool {
	i := strings.IndexByte(m, ':')
	return i >= 0 && i+1 < len(m) && m[i+1] == 'r'
}

// newMember is a new member for ks's waiter, of its kind.
func (ks *keyState) newMember() string {
	if ks.shared {
		return ks.l.readerMember(ks.l.seq.Add(1), ks.key)
	}
	return ks.l.waiterMember(ks.key)
}

// nodeReg is what an attempt passes to one node about the waiter.
type nodeReg struct {
	member, pos, queued, refresh string
}

// queuedPopped is nodeReg.queued for a waiter that a release popped from
// the waiting set, without an intent: its grant removes only its lease
// (acquire.lua's ARGV[9] "p"; other shapes' scripts take it as "1").
const queuedPopped = "p"

// registration returns what an attempt passes to each node. A node may
// register the waiter only once this Locker's inbox is subscribed there, so
// that no release goes unheard. A registration is rewritten when it was
// popped by a release (the waiter was woken) or its lease is a third gone.
func (ks *keyState) registration(ready []bool) []nodeReg {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	regs := make([]nodeReg, len(ready))
	for i, r := range ready {
		if !r {
			regs[i] = nodeReg{pos: "0", queued: "0", refresh: "0"}
			continue
		}
		if ks.member == "" {
			ks.member = ks.newMember()
		}
		nw := &ks.nodes[i]
		regs[i] = nodeReg{member: ks.member, pos: nw.pos, queued: "0", refresh: "0"}
		switch {
		case nw.popped && !nw.maybe && !nw.intent:
			regs[i].queued = queuedPopped
		case nw.queued || nw.maybe:
			regs[i].queued = "1"
		}
		if nw.regAt.IsZero() || time.Since(nw.regAt) > waiterLease/3 {
			regs[i].refresh = "1"
		}
	}
	return regs
}

// registered records a failed attempt's answer from node i (intent: it
// says the waiter wrote its intent).
func (ks *keyState) registered(i int, reg nodeReg, pos string, intent bool) {
	if reg.member == "" || pos == "" || pos == "0" {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if reg.member != ks.member {
		// Rotated meanwhile (see Locker.inboxFellBack): the registration
		// this answer shows is no one's.
		ks.l.leave(i, ks.names, reg.member, 1)
		return
	}
	nw := &ks.nodes[i]
	nw.queued, nw.popped = true, false
	nw.intent = nw.intent || intent
	ks.changedReg()
	if nw.pos == "0" || posBelow(pos, nw.pos) {
		// Never later: the waiter may have been put first meanwhile
		// (moved), after this attempt was sent with its old position.
		nw.pos = pos
	}
	if reg.refresh == "1" || reg.pos == "0" {
		nw.regAt = time.Now()
	}
}

// moved records that node i put member first in its waiting queue, at
// pos (see Locker.RequestLeadership), so that the waiter's next
// registrations keep that place.
func (ks *keyState) moved(i int, member, pos string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if member == ks.member && !ks.gone {
		nw := &ks.nodes[i]
		nw.pos, nw.queued, nw.popped = pos, true, false
	}
}

// posBelow reports whether the queue position a (a decimal string) comes
// before b.
func posBelow(a, b string) bool { return len(a) < len(b) || (len(a) == len(b) && a < b) }

// unanswered records that node i did not answer an attempt that sent it
// the registration reg: it may write it when it resumes.
func (ks *keyState) unanswered(i int, reg nodeReg) {
	if reg.member == "" {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if reg.member == ks.member {
		ks.nodes[i].maybe = true
	} else {
		ks.l.leave(i, ks.names, reg.member, 2) // rotated meanwhile
	}
}

// lateAnswer settles the registration reg that an attempt sent to node i,
// whose answer (showing e, and the queue position pos on a refusal) came
// after the round: the registration exists if the node refused the lock,
// and may exist (or be written yet) if the effect is not known. If the
// waiter has moved on meanwhile (it took the lock, or gave up), the
// registration is removed at once.
func (ks *keyState) lateAnswer(i int, reg nodeReg, e effect, pos string) {
	if reg.member == "" {
		return
	}
	refused := e == effNone && pos != "" && pos != "0"
	if !refused && e != effUnknown {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	current := !ks.gone && reg.member == ks.member
	switch {
	case current && refused:
		ks.nodes[i].queued = true
		if ks.nodes[i].pos == "0" {
			ks.nodes[i].pos = pos
		}
		ks.changedReg()
	case current:
		ks.nodes[i].maybe = true
	case refused:
		ks.l.leave(i, ks.names, reg.member, 1)
	default:
		ks.l.leave(i, ks.names, reg.member, 2)
	}
}

// acquired records that this process's waiter took the lock: the nodes that
// granted it dropped the registration. The registrations that may be left
// (nodes that refused, on a quorum, and nodes where an attempt went
// unanswered) are removed in the background; the waiter then gets a new
// member, so that the removal cannot hit a later registration.
func (ks *keyState) acquired(granted []int) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, i := range granted {
		ks.nodes[i].queued = false
	}
	ks.leave()
}

// leave removes the member's registrations in the background (see
// Locker.leave) and forgets them; ks.mu is held.
func (ks *keyState) leave() {
	left := false
	for i, nw := range ks.nodes {
		switch {
		case nw.maybe:
			ks.l.leave(i, ks.names, ks.member, 2)
		case nw.queued:
			ks.l.leave(i, ks.names, ks.member, 1)
		default:
			continue
		}
		left = true
	}
	ks.reset(left)
}

// reset forgets the registration, and gives the waiter a new member if
// rotate is set; ks.mu is held.
func (ks *keyState) reset(rotate bool) {
	if rotate {
		ks.member = ks.newMember()
	}
	for i := range ks.nodes {
		ks.nodes[i] = nodeWait{pos: "0"}
	}
	ks.stopStandIn()
	ks.resets++
	ks.changedReg()
}

// watch returns the waiter's registration as a member ("" before its first
// registration) and a count that changes when it is forgotten (see reset),
// and a channel that closes at the next change of either or of a node's
// registration (changedReg); the channel is nil when the last Acquire left.
func (ks *keyState) watch() (member string, resets uint64, changed <-chan struct{}) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.gone {
		return "", 0, nil
	}
	if ks.changed == nil {
		ks.changed = make(chan struct{})
	}
	return ks.member, ks.resets, ks.changed
}

// changedReg wakes the watchers of the registration (see watch); ks.mu is
// held.
func (ks *keyState) changedReg() {
	if ks.changed != nil {
		close(ks.changed)
		ks.changed = nil
	}
}
