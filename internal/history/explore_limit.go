package history

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// changer changes kSem's limit (SetLimit) every 200 to 700ms, up and down
// between 2 and 5, from a Locker of its own (the slot after the workers'),
// while it holds a permit of its own (the anchor), so that the key is
// never free and its limit is SetLimit's: a settled limit (see settled)
// is then the one that every acquisition of the fleet asks for.
type changer struct {
	x *exploreRun

	mu    sync.Mutex
	limit int // the fleet's limit: the last that SetLimit set
}

// current is the fleet's limit.
func (c *changer) current() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}

func (c *changer) run() {
	x := c.x
	rnd := rand.New(rand.NewPCG(x.seed, 77))
	s := x.slots[slots]
	var anchor *holding
	for !x.stopped() {
		l, gen := s.locker()
		if anchor == nil || anchor.lostNow() {
			if anchor != nil {
				anchor.release()
			}
			anchor = x.acquire(rnd, slots, l, gen, kSem, shape{limit: c.current()}, 2*time.Second, false)
			if anchor != nil {
				anchor.h.anchor = true
			}
		}
		x.sleep(ms(rnd, 200, 700))
		if anchor == nil || x.stopped() {
			continue
		}
		anchor.sample()
		n := 2 + rnd.IntN(4)
		if n == c.current() {
			n = 2 + (n-1)%4
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cl := &claim{kind: "setlimit", op: "SetLimit", key: kSem, slot: slots, gen: gen, start: now(), limit: n}
		err := l.SetLimit(cl.ctx(ctx), kSem, n)
		cancel()
		x.after(cl, err)
		x.mu.Lock()
		x.limits = append(x.limits, limitChange{n: n, start: cl.start, end: cl.end, ok: err == nil})
		x.mu.Unlock()
		if err == nil {
			c.mu.Lock()
			c.limit = n
			c.mu.Unlock()
		}
	}
	if anchor != nil {
		anchor.release()
	}
}

// settled reports the limit of kSem at t when it is settled: a SetLimit
// returned nil at when, no SetLimit began after it until t nor failed
// right before it, the anchor held from before that SetLimit began to t,
// and no server lost its data meanwhile.
func (x *exploreRun) settled(t int64) (n int, when int64, ok bool) {
	last := sort.Search(len(x.limits), func(i int) bool { return x.limits[i].start > t }) - 1
	if last < 0 || !x.limits[last].ok || x.limits[last].end > t || last > 0 && !x.limits[last-1].ok {
		return 0, 0, false
	}
	c := x.limits[last]
	if !x.anchored(c.start, t) || x.dataLost(c.start, t) {
		return 0, 0, false
	}
	return c.n, c.end, true
}

// anchored reports whether one anchor was held (guaranteed) through
// [from, to], and no server lost its data since it was granted (its
// permit may have gone with the data).
func (x *exploreRun) anchored(from, to int64) bool {
	for _, h := range x.ix.anchors {
		if h.begin <= from && h.gEnd() >= to && !x.dataLost(h.asked, to) {
			return true
		}
	}
	return false
}

// dataLost reports whether a server lost its data in [from, to].
func (x *exploreRun) dataLost(from, to int64) bool {
	for _, g := range x.global {
		if g.kind == fRestart && g.start <= to && g.end >= from {
			return true
		}
	}
	return false
}

// limitsAt is the largest limit an acquisition that began at t could have
// been counted against: the limit of the last change that returned before
// t (semFirst before any), and of every change begun before t that had not
// returned then, or failed and was not followed by one that returned
// before t (what it changed, on some nodes, is unknown). (Test's
// checkLimits has the same rule for its changer.)
func (x *exploreRun) limitsAt(t int64) int {
	bound, lastOK, lastStart := semFirst, int64(0), int64(0)
	for _, c := range x.limits {
		if c.ok && c.end <= t {
			bound, lastOK, lastStart = c.n, c.end, c.start
		}
	}
	_ = lastOK
	for _, c := range x.limits {
		if c.start <= t && ((c.ok && c.end > t) || (!c.ok && c.start >= lastStart)) {
			bound = max(bound, c.n)
		}
	}
	return bound
}

// limitsIn is the largest limit an acquisition that began at from and was
// granted at to could have been counted against.
func (x *exploreRun) limitsIn(from, to int64) int {
	bound := x.limitsAt(from)
	for _, c := range x.limits {
		if c.start > from && c.start <= to {
			bound = max(bound, c.n)
		}
	}
	return bound
}

// isLimitErr tells the errors of a limit mismatch.
func isLimitErr(err error) bool { return isErr(err, dlock.ErrMisconfigured) }

// limitInPlay reports an Adopt of kSem with another limit than its hold's
// that may rightly succeed: a limit that SetLimit may have stored on a
// quorum of the nodes during the call, or the old limit of a change
// recorded there (adopt.lua takes a permit asked with the old limit of
// the last change as one of the new). Those are the limits of the last
// two changes that returned nil before the call, and of every change
// begun between the first of them and the call's end (nil or not: a
// failed change may have reached nodes); semFirst, before two changes
// returned.
func (x *exploreRun) limitInPlay(c *claim) bool {
	if c.key != kSem || c.shape.shared || c.h == nil || c.h.shape.shared {
		return false
	}
	// The limits the permit was known by, which adopt.lua accepts
	// whatever SetLimit did since (its "l:" entry): the one it was granted
	// with (the first hold of the chain of Adopts), each an Adopt of the
	// chain asked for, and each a Handoff of the chain named (the limit an
	// Adopt made it a permit of).
	for h := c.h; h != nil; h = h.from {
		h.mu.Lock()
		handed := h.handed
		h.mu.Unlock()
		if (h.from != nil || h.op != "Adopt") && c.shape.limit == h.shape.limit || c.shape.limit == handed {
			return true
		}
	}
	from, oks := int64(0), 0
	for i := len(x.limits) - 1; i >= 0 && oks < 2; i-- {
		if l := x.limits[i]; l.ok && l.end <= c.start {
			from, oks = l.start, oks+1
		}
	}
	if oks < 2 && c.shape.limit == semFirst {
		return true
	}
	for _, l := range x.limits {
		if l.start >= from && l.start <= c.end && l.n == c.shape.limit {
			return true
		}
	}
	return false
}
