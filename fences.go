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

// maxClaimRounds bounds the rounds in which a Redlock grant claims a larger
// fence after another holder's reached its own on a node (see claimFences);
// claimJitter is the range of the random part added to such a fence, so
// that two holders that both missed do not claim one value again (it puts
// the counters that many microseconds ahead at most, per claim).
const (
	maxClaimRounds = 4
	claimJitter    = 16
)

// claimFences makes fence, the largest the granting nodes issued, the
// holder's own on at least a quorum of them: a node claims it when it
// issued it, or when raise.lua moves its counter from below it to it. Two
// holders cannot both claim one value on a node (a counter never goes
// down), and their quorums share a node: so no two holders, however close
// their grants, get one fence; and the next holder's quorum shares a node
// with this one, whose counter is at least fence by then: its fence is
// larger. When a node's counter already holds fence or more (another
// holder, granted at nearly the same moment in another order on each node,
// has it), a larger fence (the largest counter seen, plus one and a small
// jitter, claimJitter, so that two such holders do not claim one value
// again) is claimed on every granting node, for at most maxClaimRounds
// rounds. It returns the fence claimed and whether a quorum claimed it (if
// not, the grant is given back and the caller tries again, as for a grant
// with no validity left).
func (l *Locker) claimFences(ctx context.Context, nm *keys.Names, token string, ttl time.Duration, fence uint64,
	results []quorum.Result[script.AcquireReply], timeout time.Duration, q int) (uint64, bool) {
	claimed := 0
	var low, all []int
	for _, r := range results {
		if r.Err == nil && r.Val.OK {
			all = append(all, r.Node)
			if r.Val.Fence == fence {
				claimed++
			} else {
				low = append(low, r.Node)
			}
		}
	}
	for range maxClaimRounds {
		if claimed >= q {
			return fence, true
		}
		got, highest := l.raiseOn(ctx, nm, token, ttl, fence, low, q-claimed, timeout)
		if claimed += got; claimed >= q {
			return fence, true
		}
		next := max(fence, highest) + 1 + mrand.Uint64N(claimJitter)
		if next >= math.MaxInt64 || next < fence {
			return fence, false // no larger fence a counter can hold
		}
		fence, claimed, low = next, 0, all
	}
	return fence, false
}

// raiseOn claims fence with raise.lua on the nodes idx, until need of them
// did or they no longer can; it returns how many did, and the largest
// counter of those that held fence or more already.
func (l *Locker) raiseOn(ctx context.Context, nm *keys.Names, token string, ttl time.Duration, fence uint64,
	idx []int, need int, timeout time.Duration) (claimed int, highest uint64) {
	raise := script.RaiseArgs{Value: strconv.FormatUint(fence, 10), Life: l.counterLife(ttl), Token: token}
	args := raise.Command(nm.RaiseKeys())
	rs, _ := quorum.Fanout(ctx, l.subset(idx), timeout,
		quorum.RunFunc[script.RaiseReply](func(ctx context.Context, _ int, c node.Conn) (script.RaiseReply, error) {
			v, err := runOn(ctx, c, script.Raise, args)
			if err != nil {
				return script.RaiseReply{}, err
			}
			return script.ParseRaise(v)
		}),
		func(rs []quorum.Result[script.RaiseReply], _ int) bool {
			ok := 0
			for _, r := range rs {
				if r.Err == nil && r.Val.Claimed {
					ok++
				}
			}
			return ok >= need || len(rs)-ok > len(idx)-need
		}, nil)
	for _, r := range rs {
		switch {
		case r.Err != nil:
		case r.Val.Claimed:
			claimed++
		default:
			highest = max(highest, r.Val.Counter)
		}
	}
	return claimed, highest
}

func (l *Locker) subset(idx []int) []*quorum.Node {
	ns := make([]*quorum.Node, len(idx))
	for i, j := range idx {
		ns[i] = l.nodes[j]
	}
	return ns
}
