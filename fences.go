package dlock

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// A claim's ladder (see claimFences) starts one plus a random part below
// the step above a base (the largest fence issued; after a lost round the
// top of its ladder, or the largest counter answered if larger), and its
// ladderRungs rungs climb by the step, then by twice and four times it.
// The step starts at claimJitter and doubles with every round a holder
// loses, up to maxClaimStep. A node takes the lowest rung above its
// counter, so a claim puts a counter at most one step past the base or four
// past where it was, and a lost round puts the next base at most eight
// steps above the last one or the counters answered: counters stay behind
// the servers' clocks (see base.lua's fence) unless a key's claims move
// them by more than a second per second.
const (
	claimJitter  = 16
	maxClaimStep = 1 << 12
	ladderRungs  = 4
)

// claimFences makes fence, the largest the granting nodes issued, or a
// larger value, the holder's own on a majority of the nodes, and returns
// it; false if none was before deadline (the grant is then given back and
// the caller tries again, as for a grant with no validity left). It gives
// up earlier only when too few nodes answer, or ctx ends. q is the grant's
// quorum, cfg the acquisition's shape.
//
// Safety. A node counts for a value when this holder's grant issued it
// there, or when raise.lua moved that node's counter from below the value
// to it for this holder (a second copy of that command answers the same
// value and moves nothing: see raise.lua). A counter never goes down, so
// one command per node moves it past a value: no two holders count one
// node for one value, and two majorities share a node, so no two holders
// get one fence. The next holder (one that starts after this claim
// returned) has grants from a quorum, which shares a node with this
// majority, whose counter is at least the fence by then: that node issues
// more, and the next fence is at least what its grants issued. Neither
// argument asks which value above fence is claimed, nor which nodes
// granted: so a holder may climb, and on every node.
//
// Adopt (see adoptFanout) needs more: q of the nodes that hold the token
// telling the fence. A holder with an entry "f:TOKEN" (a permit, a shared
// hold, a holder with metadata) claims on every node, and then records its
// fence in the entry of the granting nodes that claimed another value or
// none (raise.lua's record); a plain lock without metadata, whose grant
// recorded each node's own fence (lock.lua's KEYS[4]) and whose raises
// replace it, claims on the granting nodes only, until q of them agree (a
// node whose grant answered late records the fence then: recordFence).
//
// Liveness. Concurrent grants reach the nodes in other orders, so under
// contention the fence issued is often passed on the other nodes before
// the claim arrives, and a claim of one value above it would be passed
// again. A claim therefore names a ladder of values, and each node takes
// the lowest rung above its counter: nodes whose counters moved on alike
// (counters are equal across nodes but for the commands in flight) take
// the same rung. The first round claims fence and a ladder above it on the
// nodes that did not issue it; each later one, on all the nodes where a
// claim counts, a ladder above the last one's top rung and the largest
// counter answered, with the step doubled (each round's values above the
// last's: a late copy of an earlier claim never moves a counter or an entry
// that reached the fence). A round is lost only when the top rung was
// passed on too many nodes, or rungs lay between the counters of nodes
// that would have agreed; with the step doubled, the ladder reaches twice
// as far and its rungs are twice as far apart, while what grants (one
// each) add in a round does not grow and other holders climb from the
// counters this one saw: the chance of losing again falls with every round
// lost (until the step is maxClaimStep), and the rounds go on for as long
// as the grant's validity allows (thousands of round trips), not a fixed
// few, so a claim ends, with probability one.
func (l *Locker) claimFences(ctx context.Context, nm *keys.Names, token string, cfg lockConfig, fence uint64,
	results []quorum.Result[script.AcquireReply], q int, timeout time.Duration, deadline time.Time) (uint64, bool) {
	cl := claim{l: l, nm: nm, token: token, ttl: cfg.ttl, timeout: timeout, deadline: deadline}
	var granting []int
	issued := make([]bool, len(l.nodes))
	for _, r := range results {
		if r.Err == nil && r.Val.OK {
			granting = append(granting, r.Node)
			issued[r.Node] = r.Val.Fence == fence
		}
	}
	nodes, need := granting, q
	if !cfg.plain() {
		nodes, need = make([]int, len(l.nodes)), len(l.nodes)/2+1
		for i := range nodes {
			nodes[i] = i
		}
	}
	won, claimed, ok := cl.rounds(ctx, fence, issued, nodes, need)
	if !ok || cfg.plain() {
		return won, ok
	}
	var others []int // granting nodes whose entry must be told the fence
	for _, i := range granting {
		if !claimed[i] {
			others = append(others, i)
		}
	}
	if told := len(granting) - len(others); told < q {
		return won, told+cl.record(ctx, won, others, q-told) >= q
	}
	return won, true
}

// claim is what the rounds of a claim share.
type claim struct {
	l        *Locker
	nm       *keys.Names
	token    string
	ttl      time.Duration
	timeout  time.Duration
	deadline time.Time
}

// rounds claims fence, or a larger value, on need of nodes (issued: those
// whose grant issued fence), as claimFences says; it returns the value and
// the nodes that count for it.
func (c *claim) rounds(ctx context.Context, fence uint64, issued []bool, nodes []int, need int) (uint64, []bool, bool) {
	have := 0 // nodes that count for values[0]
	var low []int
	for _, i := range nodes {
		if issued[i] {
			have++
		} else {
			low = append(low, i)
		}
	}
	if have >= need {
		return fence, issued, true
	}
	step := uint64(claimJitter)
	values := append([]uint64{fence}, ladder(fence, step)...)
	for idx := low; ; idx, have = nodes, 0 {
		wait := min(c.timeout, time.Until(c.deadline))
		if wait <= 0 || ctx.Err() != nil {
			return fence, nil, false
		}
		won, at, highest, failed := c.round(ctx, values, idx, have, need, wait)
		if won != 0 {
			if have > 0 && won == fence {
				for i, is := range issued {
					at[i] = at[i] || is
				}
			}
			return won, at, true
		}
		if len(idx) == len(nodes) && failed > len(nodes)-need {
			return fence, nil, false // too few nodes answered
		}
		step = min(2*step, maxClaimStep)
		if values = ladder(max(values[len(values)-1], highest), step); len(values) == 0 {
			return fence, nil, false // no larger fence a counter can hold
		}
	}
}

// ladder is a claim's values above base with step (see claimFences),
// those below 2^63-1.
func ladder(base, step uint64) []uint64 {
	vs := make([]uint64, 0, ladderRungs)
	v := base + 1 + mrand.Uint64N(step)
	for i := range ladderRungs {
		if v < base || v >= math.MaxInt64 {
			break
		}
		vs = append(vs, v)
		v += step << i
	}
	return vs
}

// round claims values (ascending) with raise.lua on the nodes idx, until a
// value has need nodes (have of them counted for values[0] already) or
// none can; it returns that value (0 if none) and the nodes that claimed
// it, the largest counter or value the nodes answered, and how many failed
// to answer.
func (c *claim) round(ctx context.Context, values []uint64, idx []int, have, need int, timeout time.Duration) (
	won uint64, at []bool, highest uint64, failed int) {
	raise := script.RaiseArgs{Value: strconv.FormatUint(values[0], 10), Life: c.l.counterLife(c.ttl), Token: c.token}
	for _, v := range values[1:] {
		raise.More = append(raise.More, strconv.FormatUint(v, 10))
	}
	count := make([]int, len(values))
	tally := func(rs []quorum.Result[script.RaiseReply]) (best int) {
		clear(count)
		count[0] = have
		for _, r := range rs {
			if i := rung(values, r); i >= 0 {
				count[i]++
			}
		}
		for i, n := range count {
			if n > count[best] {
				best = i
			}
		}
		return best
	}
	rs, missing := c.raiseOn(ctx, raise, idx, timeout, func(rs []quorum.Result[script.RaiseReply], suspects int) bool {
		best := count[tally(rs)]
		return best >= need || best+len(idx)-len(rs)-suspects < need
	})
	best := tally(rs)
	if count[best] >= need {
		won, at = values[best], make([]bool, len(c.l.nodes))
	}
	for _, r := range rs {
		switch {
		case r.Err != nil:
			failed++
		case won != 0 && rung(values, r) == best:
			at[idx[r.Node]] = true
			fallthrough
		default:
			highest = max(highest, r.Val.Counter)
		}
	}
	return won, at, highest, failed + len(missing)
}

// record has the entries of the granting nodes idx tell fence (see
// raise.lua's record), until need of them do or cannot; it returns how
// many do.
func (c *claim) record(ctx context.Context, fence uint64, idx []int, need int) (told int) {
	wait := min(c.timeout, time.Until(c.deadline))
	if wait <= 0 {
		return 0
	}
	raise := script.RaiseArgs{Value: strconv.FormatUint(fence, 10), Life: c.l.counterLife(c.ttl), Token: c.token, More: []any{"="}}
	ok := func(r quorum.Result[script.RaiseReply]) bool { return r.Err == nil && r.Val.Claimed }
	rs, _ := c.raiseOn(ctx, raise, idx, wait, func(rs []quorum.Result[script.RaiseReply], suspects int) bool {
		n := 0
		for _, r := range rs {
			if ok(r) {
				n++
			}
		}
		return n >= need || n+len(idx)-len(rs)-suspects < need
	})
	for _, r := range rs {
		if ok(r) {
			told++
		}
	}
	return told
}

// raiseOn runs raise.lua with raise on the nodes idx (see quorum.Fanout;
// a result's Node is its index in idx).
func (c *claim) raiseOn(ctx context.Context, raise script.RaiseArgs, idx []int, timeout time.Duration,
	done func([]quorum.Result[script.RaiseReply], int) bool) ([]quorum.Result[script.RaiseReply], []quorum.Missing) {
	args := raise.Command(c.nm.RaiseKeys())
	return quorum.Fanout(ctx, c.l.subset(idx), timeout,
		quorum.RunFunc[script.RaiseReply](func(ctx context.Context, _ int, conn node.Conn) (script.RaiseReply, error) {
			v, err := runOn(ctx, conn, script.Raise, args)
			if err != nil {
				return script.RaiseReply{}, err
			}
			return script.ParseRaise(v)
		}), done, nil)
}

// rung is the index in values of the value that r claimed, -1 if none.
func rung(values []uint64, r quorum.Result[script.RaiseReply]) int {
	if r.Err != nil || !r.Val.Claimed {
		return -1
	}
	for i, v := range values {
		if v == r.Val.Counter {
			return i
		}
	}
	return -1
}

// subset is the nodes idx of the Locker.
func (l *Locker) subset(idx []int) []*quorum.Node {
	ns := make([]*quorum.Node, len(idx))
	for i, j := range idx {
		ns[i] = l.nodes[j]
	}
	return ns
}
