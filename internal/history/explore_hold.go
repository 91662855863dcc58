package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// shape is a hold's shape: a lock (limit 1), a permit of limit permits, a
// shared hold.
type shape struct {
	limit  int
	shared bool
}

func (s shape) String() string {
	switch {
	case s.shared:
		return "shared"
	case s.limit > 1:
		return fmt.Sprintf("permit of %d", s.limit)
	}
	return "lock"
}

// opts are the options of an acquisition of this shape.
func (s shape) opts(ttl time.Duration) []dlock.LockOption {
	o := []dlock.LockOption{dlock.WithTTL(ttl)}
	if s.shared {
		o = append(o, dlock.WithShared())
	} else if s.limit > 1 {
		o = append(o, dlock.WithLimit(s.limit))
	}
	return o
}

// exclusive reports a shape that excludes every other holder.
func (s shape) exclusive() bool { return !s.shared && s.limit <= 1 }

// hold is one holder of a key, as the library reported it: from the return
// of the call that granted it to the end of its guaranteed ownership.
type hold struct {
	id        int
	op        string // the call that granted it
	key       string
	shape     shape
	slot, gen int
	token     string
	fence     uint64
	ttl       time.Duration
	asked     int64 // when the granting call began
	begin     int64 // when it returned
	anchor    bool  // the changer's permit (see changer)
	from      *hold // the detached hold that Adopt took on

	mu     sync.Mutex
	handed int    // its Handoff's Limit (SetLimit may have moved it), once detached
	valid  int64  // the latest validity reported, capped by shortening Extends
	end    int64  // when the holder stopped claiming it (0: not yet)
	how    string // how it ended
	free   int64  // from when its key is free of it (a confirmed release's return)
	lostQ  bool   // Lost closed with no quorum known to hold it (ValidUntil zero)
	lost   int64  // when its holder saw Lost closed
	// detachWon: it was detached while its Locker closed, and Detach came
	// first (see opRace).
	detachWon bool
	lateShort int64 // debug: when a shortening Extend had a copy held back
}

// capEnd ends the hold's guarantee by at, and records free (if not 0 and
// none was) as when its key was known free of it.
func (h *hold) capEnd(at, free int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.end = min(nonZero(h.end, at), at)
	if free != 0 && h.free == 0 {
		h.free = free
	}
}

// gEnd is the end of the hold's guaranteed ownership.
func (h *hold) gEnd() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end == 0 {
		return h.valid
	}
	return min(h.end, h.valid)
}

// freeAt is when the key is known free of the hold: a confirmed release's
// return, else its end plus its TTL (what the key may still hold).
func (h *hold) freeAt() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.free != 0 {
		return h.free
	}
	end := h.end
	if end == 0 {
		end = h.valid
	}
	return end + int64(h.ttl) + int64(100*time.Millisecond)
}

// root is the hold that h's lineage of hand-overs began with.
func (h *hold) root() *hold {
	for h.from != nil {
		h = h.from
	}
	return h
}

func (h *hold) String() string {
	return fmt.Sprintf("#%d %s %q (%s, token %.8s, fence %d, slot %d/%d, ttl %s)", h.id, h.op, h.key, h.shape, h.token, h.fence, h.slot, h.gen, h.ttl.Round(time.Millisecond))
}

// claim is a call's result that the checks judge once the run is over.
type claim struct {
	kind       string // what is judged: see explore_check.go
	op         string
	key        string
	shape      shape
	slot, gen  int
	start, end int64
	err        error
	troubled   bool  // a node did not answer it (see troubled)
	h          *hold // the hold the call was about
	got        *hold // the hold it returned
	limit      int   // a semaphore's limit asked (SetLimit's n)
	tr         *callTrace
	parent     context.Context // the caller's context (see ctx)
	ctxEnded   bool            // the caller's deadline had passed when the call returned
	vu         int64           // the hold's ValidUntil when the call began
	sentAtEnd  int32           // its commands sent when it returned (see lateTrouble)
	lostBefore bool            // its Lost had closed when the call began
	ok         bool
}

// holding is a hold in the hands of an operation.
type holding struct {
	x *exploreRun
	k *dlock.Lock
	h *hold
	l *dlock.Locker
}

// newHolding records the hold that a call (op, begun at asked and returned
// at ret, on slot s's Locker l of generation gen) returned.
func (x *exploreRun) newHolding(op string, k *dlock.Lock, sh shape, ttl time.Duration, s, gen int, l *dlock.Locker, asked, ret int64) *holding {
	h := &hold{id: x.id(), op: op, key: k.Key(), shape: sh, slot: s, gen: gen, token: k.Token(), fence: k.Fence(), ttl: ttl, asked: asked, begin: ret}
	g := &holding{x: x, k: k, h: h, l: l}
	h.valid = h.begin // until the first sample
	g.sample()
	x.mu.Lock()
	x.holds = append(x.holds, h)
	x.mu.Unlock()
	return g
}

// sample records the validity the lock reports now.
func (g *holding) sample() {
	vu := g.k.ValidUntil()
	t := now()
	g.h.mu.Lock()
	defer g.h.mu.Unlock()
	if vu.IsZero() {
		return
	}
	v := t + int64(time.Until(vu))
	if v > g.h.valid {
		g.h.valid = v
	}
}

// lostNow reports whether Lost closed, and records it.
func (g *holding) lostNow() bool {
	select {
	case <-g.k.Lost():
		g.sawLost()
		return true
	default:
		return false
	}
}

// sawLost records that Lost closed (once).
func (g *holding) sawLost() {
	q := g.k.ValidUntil().IsZero()
	t := now()
	g.h.mu.Lock()
	defer g.h.mu.Unlock()
	if g.h.lost == 0 {
		g.h.lost, g.h.lostQ = t, q
	}
}

// ended records that the holder stopped claiming the hold at t (the first
// end counts).
func (g *holding) ended(t int64, how string) {
	g.h.mu.Lock()
	defer g.h.mu.Unlock()
	if g.h.end == 0 {
		g.h.end, g.h.how = t, how
	}
}

// before is what a call on the hold records first: its ValidUntil and
// whether Lost had closed.
func (g *holding) before(kind, op string) *claim {
	c := &claim{kind: kind, op: op, key: g.h.key, shape: g.h.shape, slot: g.h.slot, gen: g.h.gen, h: g.h, start: now()}
	c.lostBefore = g.lostNow()
	if vu := g.k.ValidUntil(); !vu.IsZero() {
		c.vu = c.start + int64(time.Until(vu))
	}
	return c
}

// callTrace counts the commands of one call (the wrapper finds it in their
// context): those sent, those answered, and whether one failed or went
// unanswered.
type callTrace struct {
	sent, answered atomic.Int32
	bad            atomic.Bool
	late           atomic.Bool  // a copy of one of its commands was held back
	last           atomic.Int64 // when the last answer came (Unix ns)
}

// answer records an answer that came at t.
func (tr *callTrace) answer(t int64) {
	for {
		l := tr.last.Load()
		if t <= l || tr.last.CompareAndSwap(l, t) {
			break
		}
	}
	tr.answered.Add(1)
}

type traceKey struct{}

// ctx is parent carrying the claim's trace.
func (c *claim) ctx(parent context.Context) context.Context {
	if c.tr == nil {
		c.tr = &callTrace{}
	}
	c.parent = parent
	return context.WithValue(parent, traceKey{}, c.tr)
}

// traceOf is the trace a command's context carries, or nil.
func traceOf(ctx context.Context) *callTrace {
	tr, _ := ctx.Value(traceKey{}).(*callTrace)
	return tr
}

// after completes a call's claim and records it (right after the call
// returned). The call was troubled when one of its commands failed or was
// unanswered when it returned (or,
// for a call whose commands were not traced, one of its Locker's), or a
// server fault hit it.
func (x *exploreRun) after(c *claim, err error) {
	c.end, c.err, c.ok = now(), err, err == nil
	c.ctxEnded = c.parent != nil && errors.Is(c.parent.Err(), context.DeadlineExceeded)
	if c.tr != nil {
		// (An answer that came after the call returned was not waited for.)
		c.sentAtEnd = c.tr.sent.Load()
		c.troubled = c.tr.bad.Load() || c.sentAtEnd != c.tr.answered.Load() || c.tr.last.Load() > c.end
		x.mu.Lock()
		c.troubled = c.troubled || x.globalDuring(c.start, c.end)
		x.mu.Unlock()
	} else {
		c.troubled = x.troubled(c.slot, c.start)
	}
	x.mu.Lock()
	x.claims = append(x.claims, c)
	x.mu.Unlock()
}

// lateTrouble reports, once the run is over, a call troubled by what
// happened to its commands after it returned: one that the library had
// not sent yet when the call gave up on its node (a round's command waits
// for a goroutine of its node: on a loaded machine it may start after the
// round's deadline), or an answer that came after the return.
func (c *claim) lateTrouble() bool {
	return c.tr != nil && (c.tr.sent.Load() != c.sentAtEnd || c.tr.last.Load() > c.end || c.tr.bad.Load())
}

// wait sleeps d, or until Lost or Asked closes or the run stops: it reports
// whether the holder should go on.
func (g *holding) wait(d time.Duration, asked bool) bool {
	var a <-chan struct{}
	if asked {
		a = g.k.Asked()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		g.sample()
		return true
	case <-g.k.Lost():
		g.sawLost()
		return false
	case <-a:
		return false
	case <-g.x.stop:
		return false
	}
}

// extend extends the hold to ttl: a shorter TTL caps its validity from
// the call's start.
func (g *holding) extend(ttl time.Duration) {
	c := g.before("extend", "Extend")
	if ttl < g.k.TTL() {
		g.h.mu.Lock()
		g.h.valid = min(g.h.valid, c.start+int64(ttl))
		g.h.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := g.k.Extend(c.ctx(ctx), ttl)
	cancel()
	g.x.after(c, err)
	if ttl < g.h.ttl && c.tr.late.Load() {
		g.x.lateShort.Add(1)
		g.h.mu.Lock()
		g.h.lateShort = c.start
		g.h.mu.Unlock()
	}
	if err == nil {
		g.h.mu.Lock()
		g.h.ttl = max(g.h.ttl, ttl)
		g.h.mu.Unlock()
	}
	g.sample()
}

// release releases the hold.
func (g *holding) release() error {
	c := g.before("release", "Release")
	g.ended(c.start, "released")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := g.k.Release(c.ctx(ctx))
	cancel()
	g.x.after(c, err)
	if err == nil {
		g.h.mu.Lock()
		g.h.free = c.end
		g.h.mu.Unlock()
	}
	return err
}

// detach detaches the hold and returns its Handoff.
func (g *holding) detach() dlock.Handoff {
	g.sample()
	t := now()
	g.ended(t, "detached")
	h := g.k.Detach()
	g.h.mu.Lock()
	g.h.handed = h.Limit
	g.h.mu.Unlock()
	return h
}

// isErr reports whether err wraps target.
func isErr(err, target error) bool { return err != nil && errors.Is(err, target) }
