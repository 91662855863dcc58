package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// maxBatch is the most locks that one extend.lua call renews.
const maxBatch = 64

// renewals is a Locker's schedule of the auto-renewals that run together:
// a lock's regular renewal (every TTL/3, after a confirmed round) is due at
// an instant of a grid (renewGrid: a power of two milliseconds, about a
// twelfth of the TTL, in ms on the monotonic clock (monoMilli), so that a
// step of the wall clock moves no renewal), the last grid instant
// not after the renewal would have been due. When an instant comes, the
// locks due then are renewed together, and with them those due within
// the next two steps of their grid (renewed up to TTL/6 early): one
// extend.lua call per node for up to maxBatch of them (on a Cluster, those
// of one slot), so that a Locker that holds thousands of locks sends tens
// of calls per renewal interval, not thousands. Since the instant is never
// later than the lock's own due time, a lock never waits for a batch; and
// since locks renewed in one round are due again at one instant, they stay
// together. A renewal that failed is retried by the lock's own timer,
// alone (see settleRound), and so is a lock whose interval is too short
// for the grid.
type renewals struct {
	mu sync.Mutex
	// due holds, per grid instant (monoMilli), the locks whose batchAt is
	// that instant. A lock leaves it when it is taken, rescheduled,
	// released or lost (remove): the schedule keeps no lock alive.
	due   map[int64][]dueEntry
	timer *time.Timer
	at    int64 // the instant the timer is set for; 0: none
	// fire renews the locks taken from the schedule (Locker.renewDue,
	// set once by newLocker).
	fire func([]dueLock)
}

// dueEntry is a lock in the schedule, with how early (ms) it may be taken.
type dueEntry struct {
	k     *Lock
	early int64
}

// wheelPlace is where a lock is in the schedule (guarded by renewals.mu):
// due[at][idx]; at is 0 when it is not in it.
type wheelPlace struct {
	at  int64
	idx int
}

// renewGrid is the grid of a TTL's renewal instants, in ms: the largest
// power of two not above ttl/12 (at least 1).
func renewGrid(ttl time.Duration) int64 {
	g, most := int64(1), ttl.Milliseconds()/12
	for g*2 <= most {
		g *= 2
	}
	return g
}

// scheduleRenewal has the lock renewed in about d from now (see
// planRenewal), unless the Locker is closed; it arms the lock's timer
// either way. k.mu is held.
func (k *Lock) scheduleRenewal(now time.Time, d time.Duration) {
	if k.l.isClosed() {
		k.arm()
		return
	}
	k.planRenewal(now, d)
}

// planRenewal has the lock renewed in about d from now (time.Now, read by
// the caller): with the locks due at the same grid instant (see renewals),
// or alone, at d, when d is shorter than four grid steps; it arms the
// lock's timer. k.mu is held (and may be the Locker's too: start).
func (k *Lock) planRenewal(now time.Time, d time.Duration) {
	g := renewGrid(k.ttl)
	if d < 4*time.Duration(g)*time.Millisecond {
		k.leaveSchedule()
		k.renewAt = now.Add(d)
		k.arm()
		return
	}
	at := monoMilli(now.Add(d))
	at -= at % g
	k.renewAt = time.Time{}
	k.batchAt = at
	k.arm()
	k.l.renewals.add(at, dueEntry{k, 2 * g})
}

// leaveSchedule takes the lock out of the Locker's renewals, if it is in
// them: it is renewed alone, or not at all. k.mu is held.
func (k *Lock) leaveSchedule() {
	if k.batchAt != 0 {
		k.batchAt = 0
		k.l.renewals.remove(k)
	}
}

// dueLock is a lock taken from the schedule at the instant it was due.
type dueLock struct {
	k  *Lock
	at int64
}

// add puts e, whose lock's batchAt is at, in the schedule, in place of
// where it was; r.fire is given the locks due once their instant has come.
// e.k.mu is held.
func (r *renewals) add(at int64, e dueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.due == nil {
		r.due = make(map[int64][]dueEntry)
	}
	r.removeLocked(e.k)
	e.k.place = wheelPlace{at: at, idx: len(r.due[at])}
	r.due[at] = append(r.due[at], e)
	if r.at != 0 && r.at <= at {
		return
	}
	r.at = at
	d := untilMilli(at)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, func() { r.fire(r.take()) })
	} else {
		r.timer.Reset(d)
	}
}

// remove takes k out of the schedule, if it is in it (a release, a loss).
// k.mu is held.
func (r *renewals) remove(k *Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(k)
}

// removeLocked is remove; r.mu is held. The last entry of k's instant
// takes k's place.
func (r *renewals) removeLocked(k *Lock) {
	p := k.place
	k.place = wheelPlace{}
	es := r.due[p.at]
	if p.at == 0 || p.idx >= len(es) || es[p.idx].k != k {
		return
	}
	last := len(es) - 1
	es[p.idx] = es[last]
	es[p.idx].k.place.idx = p.idx
	es[last] = dueEntry{}
	// An instant left empty stays until it comes (take drops it), so
	// that the next lock due then reuses its slice: a process that takes
	// and releases one lock at a time allocates nothing here.
	r.due[p.at] = es[:last]
}

// take removes from the schedule the locks whose instant has come, and
// those that may be renewed early with them, and sets the timer for the
// next instant.
func (r *renewals) take() []dueLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := monoMilli(time.Now())
	var due []dueLock
	next := int64(0)
	for at, es := range r.due {
		kept := es[:0]
		for _, e := range es {
			if at-now <= e.early {
				e.k.place = wheelPlace{}
				due = append(due, dueLock{e.k, at})
			} else {
				e.k.place.idx = len(kept)
				kept = append(kept, e)
			}
		}
		clear(es[len(kept):]) // no pointer kept to a lock taken
		if len(kept) == 0 {
			delete(r.due, at)
			continue
		}
		r.due[at] = kept
		if next == 0 || at < next {
			next = at
		}
	}
	r.at = next
	if next != 0 {
		r.timer.Reset(untilMilli(next))
	}
	return due
}

// stop stops the timer (Close): no renewal is due any more.
func (r *renewals) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	for _, es := range r.due {
		for _, e := range es {
			e.k.place = wheelPlace{}
		}
	}
	r.due, r.at = nil, 0
}

// renewItem is one lock of a batch, whose ops slot the batch holds.
type renewItem struct {
	k          *Lock
	ttl        time.Duration
	validUntil time.Time
}

// batchKey groups the locks of one batch: of one slot (see batchSlot), one
// TTL, so that a round bounded by the validity of one lock does not cut
// short the renewal of a lock that has much more, and one shape of
// extend.lua's groups (Lock.short).
type batchKey struct {
	slot  int
	ttl   time.Duration
	short bool
}

// renewDue renews the locks whose instant has come: those still due then
// (not rescheduled, released or lost meanwhile, and renewable), in batches
// of up to maxBatch locks (see batchKey). A lock whose Extend runs
// meanwhile is renewed alone once it is over, as when its own timer fires.
func (l *Locker) renewDue(due []dueLock) {
	batches := make(map[batchKey][]renewItem)
	for _, d := range due {
		k := d.k
		k.mu.Lock()
		if k.batchAt != d.at || !k.alive() {
			k.mu.Unlock()
			continue
		}
		k.batchAt = 0
		if !k.tryOps() {
			// An Extend is under way: renew after it, as renew does.
			k.scheduleRenew(0)
			k.mu.Unlock()
			continue
		}
		it := renewItem{k: k, ttl: k.ttl, validUntil: k.validUntil}
		k.mu.Unlock()
		slot, ok := l.batchSlot(k)
		if !ok {
			l.startBatch([]renewItem{it})
			continue
		}
		bk := batchKey{slot, it.ttl, k.short()}
		b := append(batches[bk], it)
		if len(b) == maxBatch {
			l.startBatch(b)
			b = nil
		}
		batches[bk] = b
	}
	for _, b := range batches {
		if len(b) > 0 {
			l.startBatch(b)
		}
	}
}

// batchSlot is the slot by which the locks of one extend.lua call are
// grouped: 0 for every lock when each node is one server (a plain client,
// Sentinel's included), the key's hash slot when a node is a Cluster. It
// reports false for another go-redis client (a Ring, a wrapper), which may
// send the locks' keys to several servers: the lock is renewed alone.
func (l *Locker) batchSlot(k *Lock) (int, bool) {
	slot := 0
	for _, n := range l.nodes {
		switch n.Client.(type) {
		case *redis.Client:
		case *redis.ClusterClient:
			slot = keys.Slot(k.names.Lock())
		case nil: // another family's client (node.Client): one server, or a Cluster
			if n.Cluster {
				slot = keys.Slot(k.names.Lock())
			}
		default:
			return 0, false
		}
	}
	return slot, true
}

// startBatch runs renewBatch on its own goroutine, or gives the locks'
// ops slots back if Close has begun.
func (l *Locker) startBatch(items []renewItem) {
	if !l.join(&l.wg) {
		for _, it := range items {
			it.k.giveOps()
		}
		return
	}
	go func() {
		defer l.wg.Done()
		l.renewBatch(items)
	}()
}

// extendReply is one node's answer to a batch: per lock, in the batch's
// order.
type extendReply struct {
	vals []int64
	errs []error
}

// lockResults are lock j's answers in a batch's results, in buf.
func lockResults(buf []quorum.Result[int64], rs []quorum.Result[extendReply], j int) []quorum.Result[int64] {
	buf = buf[:0]
	for _, r := range rs {
		buf = append(buf, quorum.Result[int64]{Node: r.Node, Val: r.Val.vals[j], Err: r.Val.errs[j]})
	}
	return buf
}

// renewBatch renews items in one round: one extend.lua call per node for
// all of them, deciding once every lock's outcome is known (a quorum
// confirmed it, or cannot), bounded by the earliest end of their
// validities. Each lock's answers are then recorded as those of its own
// round begun when the batch's began (see extendRound): its validity is
// counted from the batch's start, a lock refused or lost leaves the batch
// without touching the others, and the ops slots are given back.
func (l *Locker) renewBatch(items []renewItem) {
	deadline := items[0].validUntil
	short := items[0].k.short() // the batch's (see batchKey)
	call := script.NewExtendCall(len(items), short, l.ttlArg(items[0].ttl), "0", l.retentionArg)
	for _, it := range items {
		deadline = minTime(deadline, it.validUntil)
		it.k.addTo(call, short)
	}
	ctx, cancel := context.WithDeadline(l.renewCtx, deadline)
	defer cancel()
	timeout := min(time.Until(deadline), l.renewTry(items[0].ttl)) // see renewTry
	start := time.Now()
	cmd := call.Command()
	n := len(l.nodes)
	buf := make([]quorum.Result[int64], 0, n) // one lock's results, on this goroutine
	// recorded is closed once every lock has recorded the round's answers
	// (settleRound calls record under each lock's mu in turn, on this
	// goroutine): the late answers wait for it.
	recorded := make(chan struct{})
	left := len(items)
	record := func() {
		if left--; left == 0 {
			close(recorded)
		}
	}
	results, missing := quorum.Fanout(ctx, l.nodes, timeout,
		quorum.RunFunc[extendReply](func(ctx context.Context, _ int, c node.Conn) (extendReply, error) {
			v, err := l.runScript(ctx, c, timeout, call.Script(), cmd)
			vals, errs := script.ExtendReplies(v, err, len(items))
			return extendReply{vals, errs}, err
		}),
		func(rs []quorum.Result[extendReply], suspects int) bool {
			for j, it := range items {
				if !quorum.Decided(lockResults(buf, rs, j), suspects, n, it.k.quorum, confirmed) {
					return false
				}
			}
			return true
		},
		quorum.LateFunc[extendReply](func(r quorum.Result[extendReply]) {
			<-recorded
			for j, it := range items {
				it.k.lateAnswer(r.Node, l.effectOf(r.Node, r.Val.errs[j], r.Val.vals[j] == 1, false))
			}
		}))
	var regains []func()
	for j, it := range items {
		free, _ := it.k.settleRound(it.ttl, start, lockResults(buf, results, j), missing, record)
		if len(free) > 0 {
			regains = append(regains, func() { it.k.regain(ctx, it.ttl, min(timeout, l.nodeTimeout(it.ttl)), free) })
		}
	}
	atOnce(len(regains), func(i int) { regains[i]() })
	for _, it := range items {
		it.k.giveOps()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
