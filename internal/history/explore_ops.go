package history

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// exploreOps are the operations a worker draws, by weight.
var exploreOps = []struct {
	name   string
	weight int
	run    func(x *exploreRun, rnd *rand.Rand)
}{
	{"lock", 24, (*exploreRun).opLock},
	{"do", 5, (*exploreRun).opDo},
	{"all", 5, (*exploreRun).opAll},
	{"rw", 10, (*exploreRun).opRW},
	{"sem", 10, (*exploreRun).opSem},
	{"burst", 6, (*exploreRun).opBurst},
	{"campaign", 8, (*exploreRun).opCampaign},
	{"observe", 2, (*exploreRun).opObserve},
	{"request", 3, (*exploreRun).opRequest},
	{"force", 1, (*exploreRun).opForce},
	{"race", 4, (*exploreRun).opRace},
	{"close", 1, (*exploreRun).opClose},
	{"quiet", 6, (*exploreRun).opQuiet},
}

// worker draws operations until the run stops.
func (x *exploreRun) worker(w int) {
	rnd := rand.New(rand.NewPCG(x.seed, uint64(100+w)))
	total := 0
	for _, o := range exploreOps {
		total += o.weight
	}
	for !x.stopped() {
		if x.sab.closeReleases() && rnd.IntN(4) == 0 {
			// The sabotage of Close shows where a Detach meets a Close:
			// one operation in four races them (and the draws of a run
			// without it stay those of its seed).
			x.ops.Add(1)
			x.opRace(rnd)
			x.sleep(ms(rnd, 1, 10)) // a slot being made again is skipped
			continue
		}
		n := rnd.IntN(total)
		for _, o := range exploreOps {
			if n -= o.weight; n < 0 {
				x.ops.Add(1)
				o.run(x, rnd)
				break
			}
		}
	}
}

// pick returns a Locker slot (not the changer's) and its Locker, or nil.
func (x *exploreRun) pick(rnd *rand.Rand, not int) (int, *dlock.Locker, int) {
	s := rnd.IntN(slots)
	if s == not {
		s = (s + 1 + rnd.IntN(slots-1)) % slots
	}
	l, gen := x.slots[s].locker()
	return s, l, gen
}

// ttlOf draws a lock's TTL.
func ttlOf(rnd *rand.Rand) time.Duration {
	return []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}[rnd.IntN(5)]
}

// ms is n to m ms, drawn.
func ms(rnd *rand.Rand, n, m int) time.Duration {
	return time.Duration(n+rnd.IntN(m-n+1)) * time.Millisecond
}

// acquire takes key in shape sh with Acquire (waiting up to 0.5 to 4s) or
// TryAcquire, records the call, and returns the hold or nil.
func (x *exploreRun) acquire(rnd *rand.Rand, s int, l *dlock.Locker, gen int, key string, sh shape, ttl time.Duration, try bool) *holding {
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 200, 2000))
	defer cancel()
	c := &claim{kind: "acquire", op: "Acquire", key: key, shape: sh, slot: s, gen: gen, start: now(), limit: sh.limit}
	var k *dlock.Lock
	var err error
	if try {
		c.op = "TryAcquire"
		k, err = l.TryAcquire(c.ctx(ctx), key, sh.opts(ttl)...)
	} else {
		k, err = l.Acquire(c.ctx(ctx), key, sh.opts(ttl)...)
	}
	ret := now()
	x.after(c, err)
	if err != nil {
		return nil
	}
	g := x.newHolding(c.op, k, sh, ttl, s, gen, l, c.start, ret)
	c.got = g.h
	return g
}

// body is a holder's work: waits (ended early by Lost or Asked), Extends
// longer and shorter, and a shortening Extend followed at once by a
// longer one. It reports whether the hold may go on.
func (x *exploreRun) body(g *holding, rnd *rand.Rand) bool {
	ttl := g.h.ttl
	for i := rnd.IntN(5); i > 0; i-- {
		switch rnd.IntN(6) {
		case 0, 1:
			if !g.wait(ms(rnd, 0, int(ttl.Milliseconds()/4)), true) {
				return false
			}
		case 2:
			g.extend(shorter(rnd, ttl))
		case 3:
			// More time for the work: a longer TTL, then the work.
			long := longer(rnd, ttl)
			g.extend(long)
			if !g.wait(ms(rnd, int(long.Milliseconds()/2), int(long.Milliseconds())), true) {
				return false
			}
		default:
			// Less, then more after all.
			g.extend(shorter(rnd, ttl))
			long := longer(rnd, ttl)
			g.extend(long)
			if !g.wait(ms(rnd, int(long.Milliseconds()/2), int(long.Milliseconds())), true) {
				return false
			}
		}
		if g.lostNow() {
			return false
		}
	}
	return true
}

func shorter(rnd *rand.Rand, ttl time.Duration) time.Duration {
	return max(ttl/4+time.Duration(rnd.Int64N(int64(ttl/4))), 100*time.Millisecond)
}

func longer(rnd *rand.Rand, ttl time.Duration) time.Duration {
	return min(ttl+time.Duration(rnd.Int64N(int64(ttl))), maxTTL)
}

// finish ends a hold: Release mostly; or a hand-over (Detach, then Adopt in
// another slot's Locker, sometimes with another shape first); or a Release
// or Detach and an Adopt of the token that was released or has expired.
func (x *exploreRun) finish(g *holding, rnd *rand.Rand, depth int) {
	p := rnd.IntN(100)
	if !g.h.shape.exclusive() && p >= 60 && p < 76 {
		p += 10 // permits and shared holds: more Adopts in another shape
	}
	switch {
	case p < 60 || depth >= 2:
		g.release()
	case p < 76:
		x.handOver(g, rnd, depth, false)
	case p < 86:
		x.handOver(g, rnd, depth, true)
	case p < 93:
		g.release()
		x.adoptDead(g, rnd, "adopt released")
	default:
		// Expired: twice its TTL after the copies held back of its last
		// commands (delivered within 2.5s) could have run.
		g.detach()
		if g.h.ttl > time.Second {
			return // (its key expires after a while)
		}
		x.sleep(2*g.h.ttl + 2500*time.Millisecond)
		if !x.stopped() {
			x.adoptDead(g, rnd, "adopt expired")
		}
	}
}

// handOver detaches g's lock and adopts it in another slot's Locker (with
// wrong, after an Adopt with another shape or limit), then holds it.
func (x *exploreRun) handOver(g *holding, rnd *rand.Rand, depth int, wrong bool) {
	h := g.detach()
	s, l, gen := x.pick(rnd, g.h.slot)
	if l == nil {
		return
	}
	sh := handoffShape(h, g.h.shape)
	if wrong {
		if g2 := x.adopt(rnd, s, l, gen, h, wrongShape(rnd, sh), g.h, "adopt other shape"); g2 != nil {
			x.hold(g2, rnd, depth+1)
			return
		}
	}
	if g2 := x.adopt(rnd, s, l, gen, h, sh, g.h, "adopt live"); g2 != nil {
		x.hold(g2, rnd, depth+1)
	}
}

// handoffShape is the shape a Handoff names (what an adopter passes to
// Adopt: a permit's limit is the one its Lock holds, which SetLimit may
// have moved from the one its acquisition asked for), or sh for a Handoff
// without a token.
func handoffShape(h dlock.Handoff, sh shape) shape {
	if h.Token == "" {
		return sh
	}
	return shape{limit: h.Limit, shared: h.Shared}
}

// hold runs a hold's body, then finishes it.
func (x *exploreRun) hold(g *holding, rnd *rand.Rand, depth int) {
	if x.body(g, rnd) {
		x.finish(g, rnd, depth)
		return
	}
	g.release()
}

// adoptDead adopts the token of g's hold, which was released or has
// expired, in another slot's Locker (that must fail).
func (x *exploreRun) adoptDead(g *holding, rnd *rand.Rand, kind string) {
	s, l, gen := x.pick(rnd, g.h.slot)
	if l == nil {
		return
	}
	h := dlock.Handoff{Key: g.h.key, Token: g.h.token}
	if g2 := x.adopt(rnd, s, l, gen, h, g.h.shape, g.h, kind); g2 != nil {
		g2.release()
	}
}

// wrongShape is another shape than sh.
func wrongShape(rnd *rand.Rand, sh shape) shape {
	switch {
	case sh.shared:
		return shape{limit: 2 + rnd.IntN(4)}
	case sh.limit > 1:
		if rnd.IntN(3) == 0 {
			return shape{shared: true}
		}
		return shape{limit: sh.limit + []int{-1, 1, 2}[rnd.IntN(3)]%8}
	}
	return shape{shared: true}
}

// adopt adopts h in slot s's Locker l in shape sh, records the call (kind
// says what is expected), and returns the hold or nil.
func (x *exploreRun) adopt(rnd *rand.Rand, s int, l *dlock.Locker, gen int, h dlock.Handoff, sh shape, from *hold, kind string) *holding {
	if sh.limit == 1 {
		sh.limit = 0
	}
	ttl := from.ttl
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 500, 2000))
	defer cancel()
	c := &claim{kind: kind, op: "Adopt", key: h.Key, shape: sh, slot: s, gen: gen, start: now(), h: from}
	k, err := l.Adopt(c.ctx(ctx), h.Key, h.Token, sh.opts(ttl)...)
	ret := now()
	x.after(c, err)
	if err != nil {
		return nil
	}
	g := x.newHolding("Adopt", k, sh, ttl, s, gen, l, c.start, ret)
	g.h.from, c.got = from, g.h
	return g
}

// opLock holds kLock or kLock2.
func (x *exploreRun) opLock(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	key := []string{kLock, kLock, kLock2}[rnd.IntN(3)]
	if g := x.acquire(rnd, s, l, gen, key, shape{}, ttlOf(rnd), rnd.IntN(3) == 0); g != nil {
		x.hold(g, rnd, 0)
	}
}

// opRW takes kRW shared (two times in three) or exclusive.
func (x *exploreRun) opRW(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	sh := shape{shared: rnd.IntN(3) != 0}
	if g := x.acquire(rnd, s, l, gen, kRW, sh, ttlOf(rnd), rnd.IntN(3) == 0); g != nil {
		x.hold(g, rnd, 0)
	}
}

// opSem takes a permit of kSem with the fleet's limit (the changer's).
func (x *exploreRun) opSem(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	sh := shape{limit: x.changer.current()}
	if g := x.acquire(rnd, s, l, gen, kSem, sh, ttlOf(rnd), rnd.IntN(3) != 0); g != nil {
		x.hold(g, rnd, 0)
	}
}

// opBurst has 4 to 16 goroutines TryAcquire a permit of kSemBig at once
// (fence claims under contention), hold it up to 30ms and release it,
// three times each.
func (x *exploreRun) opBurst(rnd *rand.Rand) {
	n := 4 + rnd.IntN(13)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		s, l, gen := x.pick(rnd, -1)
		if l == nil {
			continue
		}
		r := rand.New(rand.NewPCG(rnd.Uint64(), uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 3 {
				if g := x.acquire(r, s, l, gen, kSemBig, shape{limit: semBigLimit}, time.Second, true); g != nil {
					g.wait(ms(r, 0, 30), false)
					g.release()
				}
			}
		}()
	}
	close(start)
	wg.Wait()
}

// opDo runs Do on kLock: its function holds the lock a while (Extend
// included).
func (x *exploreRun) opDo(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	ttl := ttlOf(rnd)
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 500, 4000))
	defer cancel()
	start := now()
	var c *claim
	var g *holding
	tr := &claim{}
	err := l.Do(tr.ctx(ctx), kLock, func(ctx context.Context) error {
		k, _ := dlock.LockFromContext(ctx)
		g = x.newHolding("Do", k, shape{}, ttl, s, gen, l, start, now())
		if rnd.IntN(2) == 0 {
			g.extend(longer(rnd, ttl))
		}
		g.wait(ms(rnd, 0, int(ttl.Milliseconds()/2)), false)
		c = g.before("do", "Do")
		g.ended(c.start, "Do's function returned")
		return nil
	}, dlock.WithTTL(ttl))
	if c == nil {
		c = &claim{kind: "acquire", op: "Do", key: kLock, slot: s, gen: gen, start: start}
	}
	c.tr = tr.tr
	x.after(c, err)
	if g != nil && err == nil {
		g.h.mu.Lock()
		g.h.free = c.end
		g.h.mu.Unlock()
	}
}

// opAll takes kLock and kLock2 with AcquireAll, holds them a while and
// releases them.
func (x *exploreRun) opAll(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	keys := []string{kLock, kLock2}
	if rnd.IntN(2) == 0 {
		keys[0], keys[1] = keys[1], keys[0]
	}
	ttl := ttlOf(rnd)
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 500, 4000))
	defer cancel()
	c := &claim{kind: "acquire", op: "AcquireAll", key: kLock, slot: s, gen: gen, start: now()}
	ks, err := l.AcquireAll(c.ctx(ctx), keys, dlock.WithTTL(ttl))
	ret := now()
	x.after(c, err)
	var gs []*holding
	for _, k := range ks {
		gs = append(gs, x.newHolding("AcquireAll", k, shape{}, ttl, s, gen, l, c.start, ret))
	}
	if len(gs) > 0 {
		gs[0].wait(ms(rnd, 0, int(ttl.Milliseconds()/2)), false)
	}
	for _, g := range gs {
		g.release()
	}
}

// opCampaign campaigns for kElect (asking for the leadership while it
// waits, one time in three), proclaims a new value, leads a while and
// resigns.
func (x *exploreRun) opCampaign(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	ttl := ttlOf(rnd)
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 500, 3000))
	defer cancel()
	asked := make(chan struct{})
	if rnd.IntN(3) == 0 {
		go func() {
			defer close(asked)
			x.requestLeadership(ctx, s, l, gen)
		}()
	} else {
		close(asked)
	}
	c := &claim{kind: "acquire", op: "Campaign", key: kElect, slot: s, gen: gen, start: now()}
	k, err := l.Campaign(c.ctx(ctx), kElect, fmt.Sprintf("slot%d", s), dlock.WithTTL(ttl))
	ret := now()
	cancel()
	<-asked
	x.after(c, err)
	if err != nil {
		return
	}
	g := x.newHolding("Campaign", k, shape{}, ttl, s, gen, l, c.start, ret)
	c.got = g.h
	if rnd.IntN(2) == 0 {
		pc := g.before("proclaim", "Proclaim")
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		x.after(pc, k.Proclaim(pc.ctx(pctx), fmt.Sprintf("slot%d'", s)))
		pcancel()
	}
	x.hold(g, rnd, 2)
}

// requestLeadership asks, from l, for kElect's leadership once l's
// Campaign waits, until ctx ends or a leader was asked.
func (x *exploreRun) requestLeadership(ctx context.Context, s int, l *dlock.Locker, gen int) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(30 * time.Millisecond):
		}
		c := &claim{kind: "request", op: "RequestLeadership", key: kElect, slot: s, gen: gen, start: now()}
		err := l.RequestLeadership(c.ctx(ctx), kElect, "hand over")
		x.after(c, err)
		if err == nil || isErr(err, dlock.ErrNotHeld) || isErr(err, dlock.ErrClosed) {
			return
		}
	}
}

// opObserve observes kElect for 0.5 to 2s: the terms it receives never
// decrease.
func (x *exploreRun) opObserve(rnd *rand.Rand) {
	s, l, _ := x.pick(rnd, -1)
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 500, 2000))
	defer cancel()
	var last uint64
	for ld := range l.Observe(ctx, kElect) {
		if ld.Term != 0 && ld.Term < last {
			x.violation("terms", "Observe on slot %d: term %d after term %d", s, ld.Term, last)
		}
		if ld.Term != 0 {
			last = ld.Term
		}
	}
}

// opRequest asks the holders of a key to release it.
func (x *exploreRun) opRequest(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	key := []string{kLock, kRW, kSem}[rnd.IntN(3)]
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := &claim{kind: "request", op: "RequestRelease", key: key, slot: s, gen: gen, start: now()}
	x.after(c, l.RequestRelease(c.ctx(ctx), key, "asked by the explorer"))
}

// opForce force-releases a lock key (never the semaphore's, whose limit
// changes are checked).
func (x *exploreRun) opForce(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	key := []string{kLock, kLock2, kRW}[rnd.IntN(3)]
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := &claim{kind: "force", op: "ForceRelease", key: key, slot: s, gen: gen, start: now()}
	_, err := l.ForceRelease(c.ctx(ctx), key)
	x.after(c, err)
	x.mu.Lock()
	x.forces = append(x.forces, span{key: key, start: c.start, end: c.end})
	x.mu.Unlock()
}

// opClose closes a slot's Locker at any moment (its holders, waiters and
// calls under way meet it) and makes a new one.
func (x *exploreRun) opClose(rnd *rand.Rand) {
	x.closeSlot(x.slots[rnd.IntN(slots)], true)
}

// opRace takes a hold with Do, then, in Do's function, Detaches it while
// its Locker closes, and adopts it in another slot's Locker. The cause of
// the end of Do's context tells which came first: "detached" (Detach; the
// hold was handed over alive: Adopt must take it) or ErrClosed (Close;
// the Handoff names a hold that was given back).
func (x *exploreRun) opRace(rnd *rand.Rand) {
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	key, sh := kLock2, shape{}
	switch rnd.IntN(4) {
	case 0:
		key, sh = kSem, shape{limit: x.changer.current()}
	case 1:
		key, sh = kRW, shape{shared: true}
	}
	ttl := ttlOf(rnd)
	ctx, cancel := context.WithTimeout(context.Background(), ms(rnd, 500, 3000))
	defer cancel()
	start := now()
	var g2 *holding
	_ = l.Do(ctx, key, func(dctx context.Context) error {
		k, _ := dlock.LockFromContext(dctx)
		g := x.newHolding("Do", k, sh, ttl, s, gen, l, start, now())
		h := x.race(rnd, g)
		g.h.mu.Lock()
		cause := context.Cause(dctx)
		g.h.detachWon = isErr(cause, dlock.ErrLockLost) && !isErr(cause, dlock.ErrClosed)
		g.h.mu.Unlock()
		if s2, l2, gen2 := x.pick(rnd, s); l2 != nil {
			g2 = x.adopt(rnd, s2, l2, gen2, h, handoffShape(h, sh), g.h, "adopt live")
		}
		return nil
	}, sh.opts(ttl)...)
	if g2 != nil {
		x.hold(g2, rnd, 1)
	}
}

// race detaches g's lock while its Locker closes (and is made again).
func (x *exploreRun) race(rnd *rand.Rand, g *holding) dlock.Handoff {
	var h dlock.Handoff
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	delay := time.Duration(rnd.IntN(100)) * time.Microsecond
	go func() {
		defer wg.Done()
		<-start
		for t := time.Now(); time.Since(t) < delay; {
			runtime.Gosched()
		}
		h = g.detach()
	}()
	go func() {
		defer wg.Done()
		<-start
		x.closeSlot(x.slots[g.h.slot], true)
	}()
	close(start)
	wg.Wait()
	return h
}

// opQuiet uses kQuiet, a key that only one operation uses at a time (the
// others skip it): it takes it, releases it, and a moment later takes it
// again, TryAcquire or Acquire, from another slot: on a quiet key nothing
// but a dead token can refuse that.
func (x *exploreRun) opQuiet(rnd *rand.Rand) {
	if !x.quiet.TryLock() {
		return
	}
	defer x.quiet.Unlock()
	s, l, gen := x.pick(rnd, -1)
	if l == nil {
		return
	}
	ttl := []time.Duration{time.Second, 3 * time.Second, 5 * time.Second}[rnd.IntN(3)]
	if g := x.acquire(rnd, s, l, gen, kQuiet, shape{}, ttl, rnd.IntN(2) == 0); g != nil {
		g.wait(ms(rnd, 0, 20), false)
		g.release()
	}
	x.sleep(ms(rnd, 50, 700))
	s, l, gen = x.pick(rnd, s)
	if l == nil {
		return
	}
	if g := x.acquire(rnd, s, l, gen, kQuiet, shape{}, ttl, rnd.IntN(2) == 0); g != nil {
		g.release()
	}
}
