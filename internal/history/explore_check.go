package history

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// The explorer's checks, on the recorded history once the run is over.
// Every hold counts from the return of the call that granted it to the end
// of its guaranteed ownership as the library reported it (ValidUntil,
// capped by a shortening Extend from the call's start), or to when its
// holder stopped claiming it (Release, Detach, Close, ForceRelease).

// waitBound is how long a key may stay free while a waiter waits: a node
// timeout, the wake-up, a reservation and a stand-in, with room for a
// loaded machine.
const waitBound = 2 * time.Second

// result runs the checks and returns the run's result.
func (x *exploreRun) result(d time.Duration) Result {
	x.mu.Lock()
	defer x.mu.Unlock()
	sort.Slice(x.holds, func(i, j int) bool { return x.holds[i].begin < x.holds[j].begin })
	sort.Slice(x.limits, func(i, j int) bool { return x.limits[i].start < x.limits[j].start })
	x.endHolds()
	x.ix = x.build()
	for _, key := range []string{kLock, kLock2, kRW, kElect, kQuiet} {
		x.checkExclusion(key)
	}
	x.checkPermits(kSem)
	x.checkPermits(kSemBig)
	for _, key := range []string{kLock, kLock2, kRW, kElect, kSem, kSemBig, kQuiet} {
		x.checkFences(key)
	}
	for _, c := range x.claims {
		x.judge(c)
	}
	x.checkLosses()
	x.checkDeadTokens()
	for _, key := range []string{kLock, kLock2, kQuiet} {
		x.checkWaiters(key)
	}
	sort.Slice(x.viol, func(i, j int) bool { return x.viol[i].At < x.viol[j].At })
	return Result{Family: x.e.Family.Name, Topology: x.top.Name, Seed: x.seed, Duration: d,
		Operations: int(x.ops.Load()), Faults: x.kinds, Violations: x.viol}
}

// endHolds ends the guarantee of the holds that a ForceRelease of their
// key may have met (from its start, or from the grant of a hold granted
// while it ran: AcquireAll's lock may have been granted long before it
// returned), and of those of a Locker that closed (from the Close).
func (x *exploreRun) endHolds() {
	byKey := map[string][]*hold{}
	var most int64
	for _, h := range x.holds {
		byKey[h.key] = append(byKey[h.key], h)
		if !h.anchor {
			most = max(most, h.gEnd()-h.asked)
		}
	}
	for _, f := range x.forces {
		hs := byKey[f.key]
		i := sort.Search(len(hs), func(i int) bool { return hs[i].begin >= f.start-most })
		for ; i < len(hs) && hs[i].begin <= f.end+int64(5*time.Second); i++ {
			if h := hs[i]; h.asked <= f.end && h.gEnd() > f.start {
				h.capEnd(max(h.begin, f.start), 0)
			}
		}
	}
	closes := map[[2]int]closeRec{}
	for _, c := range x.closes {
		if p, ok := closes[[2]int{c.slot, c.gen}]; !ok || c.start < p.start {
			closes[[2]int{c.slot, c.gen}] = c
		}
	}
	for _, h := range x.holds {
		if c, ok := closes[[2]int{h.slot, h.gen}]; ok && h.gEnd() > c.start {
			free := int64(0)
			if c.ok {
				free = c.end
			}
			h.capEnd(c.start, free)
		}
	}
}

func nonZero(v, or int64) int64 {
	if v == 0 {
		return or
	}
	return v
}

// report records a violation found by a check, at t, on key, with the
// history around it (see historyOf) of the holds involved.
// (The first 10 of each kind of message get a history: a long run of a
// library that has a defect can report thousands.)
func (x *exploreRun) report(check string, t int64, key string, involved []*hold, format string, args ...any) {
	v := Violation{Check: check, At: x.since(t), Message: fmt.Sprintf(format, args...)}
	sig := check + ": " + variable.ReplaceAllString(v.Message, "")
	if x.histories[sig] < 10 {
		x.histories[sig]++
		v.History = x.historyOf(key, t, involved)
	}
	x.viol = append(x.viol, v)
}

// variable is what varies between messages of one kind: names, numbers.
var variable = regexp.MustCompile(`"[^"]*"|[0-9.]+(ms|µs|s)?|#[0-9]+|token [0-9a-f]+|\([^)]*\)`)

// checkExclusion: no two holders of key at once, unless both hold it
// shared.
func (x *exploreRun) checkExclusion(key string) {
	hs := x.ix.holds[key]
	for j, b := range hs {
		if b.gEnd() <= b.begin {
			continue // returned when its guarantee was over (a closing Locker's)
		}
		for i := j - 1; i >= 0 && hs[i].begin >= b.begin-x.ix.span; i-- {
			a := hs[i]
			if a.gEnd() <= b.begin || (!a.shape.exclusive() && !b.shape.exclusive()) || b.from == a || a.from == b {
				continue
			}
			x.report("exclusion", b.begin, key, []*hold{a, b}, "%s held (until %s) when %s began at %s",
				a, x.since(a.gEnd()), b, x.since(b.begin))
		}
	}
}

// checkPermits: at each grant of a permit of key, the permits held (of
// any shape: an Adopt that took another shape counts) never exceed the
// largest limit any of them could have been counted against; and, once a
// limit is settled, an acquisition that began after it is not granted
// while the limit's worth of permits is held.
func (x *exploreRun) checkPermits(key string) {
	var all []*hold
	x.ix.holdsNear(key, 0, 1<<62, func(h *hold) { all = append(all, h) })
	sort.Slice(all, func(i, j int) bool { return all[i].begin < all[j].begin })
	for i, s := range all {
		var live []*hold
		for j := i; j >= 0 && (all[j].begin >= s.begin-x.ix.span || all[j].anchor); j-- {
			if q := all[j]; q.gEnd() > s.begin && q.gEnd() > q.begin {
				live = append(live, q)
			}
		}
		for j := i - 1; j >= 0 && all[j].begin < s.begin-x.ix.span; j-- {
			if q := all[j]; q.anchor && q.gEnd() > s.begin {
				live = append(live, q)
			}
		}
		if bound := x.permitBound(key, s, live); len(live) > bound {
			x.report("limit", s.begin, key, live, "%d holders of %q (bound %d) when %s began", len(live), key, bound, s)
		}
	}
}

// permitBound is the most holders of key there may be when s was granted
// with live.
func (x *exploreRun) permitBound(key string, s *hold, live []*hold) int {
	if key != kSem {
		return semBigLimit
	}
	bound := 0
	for _, q := range live {
		r := q.root() // an adopted permit was counted when it was granted
		bound = max(bound, x.limitsIn(r.asked, r.begin))
	}
	if n, since, ok := x.settled(s.begin); ok && s.from == nil && s.asked > since && len(live) > n {
		bound = n
	}
	return bound
}

// checkFences: no two holds of key get one fence (an Adopt keeps the
// fence of the hold it took on), and a hold whose acquisition began after
// another's returned has a larger fence.
func (x *exploreRun) checkFences(key string) {
	seen := map[uint64]*hold{}
	var hs []*hold
	var all []*hold
	x.ix.holdsNear(key, 0, 1<<62, func(h *hold) { all = append(all, h) })
	sort.Slice(all, func(i, j int) bool { return all[i].begin < all[j].begin })
	for _, h := range all {
		if h.from != nil {
			if h.fence != h.from.fence && h.shape == h.from.shape {
				x.report("fence", h.begin, key, []*hold{h.from, h}, "%s adopted %s with another fence", h, h.from)
			}
			continue
		}
		if p := seen[h.fence]; p != nil {
			x.report("fence", h.begin, key, []*hold{p, h}, "%s and %s got one fence", p, h)
		}
		seen[h.fence] = h
		hs = append(hs, h)
	}
	var most *hold
	j := 0
	byAsk := append([]*hold(nil), hs...)
	sort.Slice(byAsk, func(a, b int) bool { return byAsk[a].asked < byAsk[b].asked })
	for _, h := range byAsk {
		for ; j < len(hs) && hs[j].begin < h.asked; j++ {
			if most == nil || hs[j].fence > most.fence {
				most = hs[j]
			}
		}
		if most != nil && h.fence <= most.fence {
			x.report("fence", h.begin, key, []*hold{most, h}, "%s, asked at %s, after %s had returned at %s", h, x.since(h.asked), most, x.since(most.begin))
		}
	}
}

// excused reports whether a hold of slot/gen on key may have ended without
// its holder's doing in [from, to]: a ForceRelease of the key, its
// Locker's Close (not for slot < 0), a server that lost its data.
func (x *exploreRun) excused(key string, slot, gen int, from, to int64) bool {
	return x.ix.forced(key, from, to) || slot >= 0 && x.ix.closedBy(slot, gen, to) || x.dataLost(from, to)
}

// excusedHold is excused for hold h, whose Locker's Close does not excuse
// its end once it was detached alive (see opRace).
func (x *exploreRun) excusedHold(h *hold, from, to int64) bool {
	slot := h.slot
	if h.detachWon {
		slot = -1
	}
	return x.excused(h.key, slot, h.gen, from, to)
}

// slotTroubled reports whether a command of slot on key, or of any slot
// when key is "", went unanswered (or failed) in [from, to], or a server
// fault hit it.
func (x *exploreRun) slotTroubled(slot int, key string, from, to int64) bool {
	cs := x.ix.badKey[key]
	if key == "" {
		cs = x.ix.badSlot[slot]
	}
	return x.ix.badNear(cs, from, to, func(c cmdRec) bool {
		return (slot < 0 || c.slot == slot) && c.end >= from
	}) || x.globalDuring(from, to)
}

// takes reports a script that may set a key (an acquisition's, an
// Adopt's): one that failed or went unanswered may leave the key held
// until its clean-up. (A failed release or renewal leaves what its hold
// held: see hold.freeAt.)
func takes(what string) bool {
	for _, s := range []string{"lock.lua", "acquire.lua", "semaphore.lua", "shared.lua", "adopt.lua"} {
		if strings.HasPrefix(what, s) {
			return true
		}
	}
	return false
}

// takesTroubled reports whether a command that may set key failed or went
// unanswered in [from, to] (or its clean-up may not have run by then), or
// a server fault hit it.
func (x *exploreRun) takesTroubled(key string, from, to int64) bool {
	return x.ix.badNear(x.ix.badKey[key], from, to, func(c cmdRec) bool {
		return takes(c.what) && c.end+int64(time.Second) >= from
	}) || x.globalDuring(from, to)
}

// checkLosses: a hold is not lost with a quorum saying it is no longer
// its holder's (ValidUntil zero) unless something could end it.
func (x *exploreRun) checkLosses() {
	for _, h := range x.holds {
		if h.lost == 0 || !h.lostQ {
			continue
		}
		// (A node that missed the renewals for a TTL lets the key expire,
		// and then says it no longer holds it.)
		recent := h.lost - int64(h.ttl) - int64(time.Second)
		if x.excused(h.key, h.slot, h.gen, h.asked, h.lost) || x.slotTroubled(h.slot, h.key, recent, h.lost) || x.byOtherShape(h) || x.raced(h) {
			continue
		}
		x.report("lost untrue", h.lost, h.key, []*hold{h}, "%s lost at %s (no quorum holds it) with no fault, Close or ForceRelease to end it", h, x.since(h.lost))
	}
}

// byOtherShape reports a hold adopted in another shape (a violation of its
// own), or adopted from one.
func (x *exploreRun) byOtherShape(h *hold) bool {
	for q := h; q != nil; q = q.from {
		if q.from != nil && q.shape != q.from.shape {
			return true
		}
	}
	return false
}

// judge judges a call's result (see the kinds in explore_ops.go).
func (x *exploreRun) judge(c *claim) {
	closed := x.ix.closedBy(c.slot, c.gen, c.end)
	// (The caller's own deadline ends a call as a node's silence does.)
	if isErr(c.err, dlock.ErrUnavailable) && !c.troubled && !c.lateTrouble() && !closed && !x.suspected(c) && !c.ctxEnded {
		x.report("ErrUnavailable untrue", c.end, c.key, c.holds(), "%s %q (%s) on slot %d: ErrUnavailable though every node answered it: %v", c.op, c.key, c.shape, c.slot, c.err)
	}
	if isErr(c.err, dlock.ErrMisconfigured) && x.falseMisconfigured(c) {
		x.report("ErrMisconfigured untrue", c.end, c.key, c.holds(), "%s %q (%s) on slot %d: ErrMisconfigured without a misconfiguration: %v", c.op, c.key, c.shape, c.slot, c.err)
	}
	switch c.kind {
	case "release", "extend", "do", "proclaim":
		x.judgeHeld(c)
	case "acquire":
		x.judgeFree(c)
	case "setlimit":
		if isErr(c.err, dlock.ErrNotHeld) && x.anchored(c.start, c.end) {
			x.report("ErrNotHeld untrue", c.end, c.key, nil, "SetLimit(%d): ErrNotHeld while the anchor's permit was held", c.limit)
		}
	case "request":
		if c.op == "RequestRelease" && isErr(c.err, dlock.ErrNotHeld) && x.heldThrough(c.key, c.start, c.end) {
			x.report("ErrNotHeld untrue", c.end, c.key, nil, "RequestRelease %q: ErrNotHeld while a holder held it throughout", c.key)
		}
	default:
		x.judgeAdopt(c)
	}
}

// suspected reports an error that names a node not waited for because it
// recently did not answer in time (quorum.ErrNotWaited), when a command of
// the slot did go unanswered (or failed) within the last 11s: the
// suspicion lasts 10s.
func (x *exploreRun) suspected(c *claim) bool {
	return isErr(c.err, quorum.ErrNotWaited) && x.slotTroubled(c.slot, "", c.start-int64(11*time.Second), c.end)
}

// raced reports a hold whose lineage was detached while its Locker closed,
// when Close may have come first (Detach racing Close: then Close's
// release ends the hold the Handoff named, even after an Adopt), unless
// Detach is known to have come first (see opRace).
func (x *exploreRun) raced(h *hold) bool {
	for q := h; q != nil; q = q.from {
		if q.how == "detached" && !q.detachWon && x.ix.closedBy(q.slot, q.gen, q.end+int64(time.Millisecond)) {
			return true
		}
	}
	return false
}

// releaseSent reports a hold adopted from a token whose holder released
// it (the explorer's "adopt released", after a Release that was not
// confirmed): that release may still land, after the Adopt, and end the
// adopted hold, as Adopt's doc says of a first holder that did not Detach.
func releaseSent(h *hold) bool {
	for q := h.from; q != nil; q = q.from {
		q.mu.Lock()
		how := q.how
		q.mu.Unlock()
		if how == "released" {
			return true
		}
	}
	return false
}

// falseMisconfigured reports an ErrMisconfigured with no misconfiguration:
// on a key of one shape, or on kSem when the limit asked is the settled
// one and no SetLimit ran during the call.
func (x *exploreRun) falseMisconfigured(c *claim) bool {
	switch c.key {
	case kSem:
		if c.op == "SetLimit" {
			return true
		}
		n, since, ok := x.settled(c.start)
		if !ok || n != c.limit || c.start <= since {
			return false
		}
		n2, since2, ok2 := x.settled(c.end)
		return ok2 && n2 == n && since2 == since
	case kLock, kLock2, kRW, kElect, kSemBig, kQuiet:
		return !strings.HasPrefix(c.kind, "adopt")
	}
	return false
}

// judgeHeld: Release, Extend, Do's end and Proclaim on a hold whose Lost
// had not closed and whose validity was not over when the call began do
// not report it not held (ErrNotHeld, or ErrLockLost for Do), unless
// something could have ended it.
func (x *exploreRun) judgeHeld(c *claim) {
	notHeld := isErr(c.err, dlock.ErrNotHeld) || c.kind == "do" && isErr(c.err, dlock.ErrLockLost)
	// (Lost closes up to 50ms before the validity ends: a call that ends
	// later may find the lock lost by then.)
	if !notHeld || c.lostBefore || c.vu < c.end+int64(60*time.Millisecond) || c.h == nil {
		return
	}
	// (From the acquisition's start: a ForceRelease may meet the grant
	// before the call returns it, AcquireAll's long before.)
	if x.excused(c.key, c.slot, c.gen, c.h.asked, c.end) || x.byOtherShape(c.h) || x.raced(c.h) || releaseSent(c.h) {
		return
	}
	x.report("ErrNotHeld untrue", c.end, c.key, c.holds(), "%s of %s at %s, valid for %s more and not lost: %v", c.op, c.h, x.since(c.start),
		time.Duration(c.vu-c.start).Round(time.Millisecond), c.err)
}

// heldThrough reports whether a hold of key was guaranteed through [from,
// to].
func (x *exploreRun) heldThrough(key string, from, to int64) bool {
	held := false
	x.ix.holdsNear(key, from, to, func(h *hold) {
		held = held || h.begin <= from && h.gEnd() >= to && !x.excused(key, h.slot, h.gen, h.begin, to)
	})
	return held
}

// judgeAdopt: an Adopt of a live hold succeeds, with its fence, unless a
// node did not answer or its hold could have ended; an Adopt in another
// shape, or of a released or expired token, fails.
func (x *exploreRun) judgeAdopt(c *claim) {
	from := c.h
	switch c.kind {
	case "adopt other shape":
		if c.ok && !x.limitInPlay(c) {
			x.report("shape", c.end, c.key, c.holds(), "Adopt of %s as a %s succeeded", from, c.shape)
		}
	case "adopt released":
		if c.ok && from.free != 0 {
			x.report("Adopt untrue", c.end, c.key, c.holds(), "Adopt of %s, released at %s, succeeded", from, x.since(from.free))
		}
	case "adopt expired":
		if c.ok {
			x.report("Adopt untrue", c.end, c.key, c.holds(), "Adopt of %s, detached at %s and expired, succeeded", from, x.since(from.end))
		}
	case "adopt live":
		live := from.valid > c.start+int64(20*time.Millisecond)
		if isErr(c.err, dlock.ErrNotHeld) && live && !x.excusedHold(from, from.begin, c.end) && !x.raced(from) &&
			!x.slotTroubled(from.slot, c.key, from.begin, c.end) && !x.slotTroubled(c.slot, c.key, from.begin, c.end) {
			x.report("Adopt untrue", c.end, c.key, c.holds(), "Adopt of %s on slot %d: ErrNotHeld while its hold was live (valid %s more)", from, c.slot,
				time.Duration(from.valid-c.start).Round(time.Millisecond))
		}
	}
}

// judgeFree: a TryAcquire (Acquire that ran out of time) refused as busy
// while nothing held the key and every node answered is a violation: a
// lock's key held by nobody, or a semaphore with a free permit.
func (x *exploreRun) judgeFree(c *claim) {
	if c.op != "TryAcquire" || !isErr(c.err, dlock.ErrNotAcquired) || c.troubled {
		return
	}
	busy := x.busy(c.key, c.start-int64(time.Second), c.end)
	limit := 1
	switch c.key {
	case kSemBig:
		// (A burst's attempts that got no quorum give their permits
		// back after the round: others of the burst may meet them.)
		if x.contended(c) {
			return
		}
		limit = semBigLimit
	case kSem:
		n, _, ok := x.settled(c.start)
		if !ok || n != c.limit || x.contended(c) {
			return
		}
		limit = n
	case kRW, kElect:
		return
	default:
		if x.contended(c) {
			return
		}
	}
	if busy < limit && !x.takesTroubled(c.key, c.start-int64(time.Second), c.end) {
		x.report("liveness", c.end, c.key, nil, "TryAcquire %q (%s) on slot %d refused with %d holders or leftovers of %d: %v", c.key, c.shape, c.slot, busy, limit, c.err)
	}
}

// busy counts the holds of key that may have held it at some time in
// [from, to] (from a second before their grant returned to when the key
// is known free of them).
func (x *exploreRun) busy(key string, from, to int64) int {
	n := 0
	x.ix.holdsNear(key, from, to, func(h *hold) {
		if h.begin-int64(time.Second) <= to && h.freeAt() >= from {
			n++
		}
	})
	return n
}

// contended reports whether another acquisition (or Adopt) of c's key was
// under way from a second before c to its end: a waiter may hold a
// reservation or a place in the queue, and on a Redlock two attempts can
// each take a minority of the nodes for a moment (a split vote).
func (x *exploreRun) contended(c *claim) bool {
	found := false
	x.ix.claimsNear(c.key, c.start-int64(time.Second), c.end, func(o *claim) {
		found = found || o != c && (o.kind == "acquire" || strings.HasPrefix(o.kind, "adopt"))
	})
	return found
}

// checkWaiters: while an Acquire of a lock's key waits, the key is not
// left free (no hold, no leftover of a command that failed) for longer
// than waitBound.
func (x *exploreRun) checkWaiters(key string) {
	busy := x.busyOf(key)
	for _, c := range x.ix.claims[key] {
		if c.kind != "acquire" || c.op == "TryAcquire" || c.op == "AcquireAll" {
			continue
		}
		at := c.start
		k := sort.Search(len(busy), func(k int) bool { return busy[k].b >= c.start })
		for ; k < len(busy) && busy[k].a <= c.end; k++ {
			if busy[k].a-at > int64(waitBound) {
				x.report("liveness", at, key, nil, "%q free from %s to %s while %s on slot %d waited (%s to %s)", key,
					x.since(at), x.since(busy[k].a), c.op, c.slot, x.since(c.start), x.since(c.end))
				return
			}
			at = max(at, busy[k].b)
		}
		if c.end-at > int64(waitBound) && !errors.Is(c.err, dlock.ErrClosed) {
			x.report("liveness", at, key, nil, "%q free from %s while %s on slot %d waited until %s: %v", key, x.since(at), c.op, c.slot, x.since(c.end), c.err)
			return
		}
	}
}

// interval is [a, b], in Unix ns.
type interval struct{ a, b int64 }

// busyOf is when key may not have been free, as disjoint intervals in
// order: its holds (from a second before their grant returned), the
// commands that may set it and failed or went unanswered (a second more,
// for their clean-up), the server faults, the ForceReleases.
func (x *exploreRun) busyOf(key string) []interval {
	var busy []interval
	x.ix.holdsNear(key, 0, 1<<62, func(h *hold) { busy = append(busy, interval{h.begin - int64(time.Second), h.freeAt()}) })
	for _, c := range x.ix.badKey[key] {
		if takes(c.what) {
			busy = append(busy, interval{c.start, c.end + int64(time.Second)})
		}
	}
	for _, g := range x.global {
		busy = append(busy, interval{g.start, g.end + int64(time.Second)})
	}
	for _, f := range x.ix.forces[key] {
		busy = append(busy, interval{f.start, f.end})
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i].a < busy[j].a })
	var merged []interval
	for _, b := range busy {
		if n := len(merged); n > 0 && b.a <= merged[n-1].b {
			merged[n-1].b = max(merged[n-1].b, b.b)
			continue
		}
		merged = append(merged, b)
	}
	return merged
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if sub != "" && strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// holds are the holds a call was about, and returned.
func (c *claim) holds() []*hold {
	var hs []*hold
	for _, h := range []*hold{c.h, c.got} {
		for ; h != nil; h = h.from {
			hs = append(hs, h)
		}
	}
	return hs
}
