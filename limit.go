package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// LimitGrace is how long after SetLimit an acquisition that asks for the
// previous limit (WithLimit of the old value) is admitted against the new
// one, so that a fleet can be given the new limit without stopping: every
// process must ask for the new limit before it ends.
const LimitGrace = 10 * time.Minute

// limitGrace is LimitGrace; tests shorten it.
var limitGrace = LimitGrace

// SetLimit changes the limit of the semaphore named key (WithLimit) while
// it has holders, to n, atomically on each node (setlimit.lua), and on a
// quorum of them for success. It costs one command per node.
//
// Raising the limit wakes at once as many waiters as it frees permits (at
// most 100 per call; the others are admitted by the next release, or by
// their own wait running out, at the latest when a holder's TTL would).
// Lowering it admits no one until fewer than n permits are held: the
// holders keep their permits, renew them and release them as before.
//
// For LimitGrace after the change, an acquisition that asks for the
// previous limit is admitted against n, as if it had asked for n (it asks
// again with n: one more round; its Lock then renews with n). Beyond the
// grace, or for any other limit, an acquisition whose limit disagrees with
// the holders' is ErrMisconfigured, as before: give every process the new
// limit within the grace. Only the limit just before the last change is
// remembered. Processes of a dlock version before SetLimit are not told
// of the change: while the key is held, their acquisitions with the old
// limit are ErrMisconfigured, and their holders' renewals write their own
// limit back (each renewal of those versions writes the limit): change a
// limit once every process that uses the key runs this version.
//
// Only a held semaphore has a stored limit: a key with no live permit is
// limited by what its next acquisition asks for, so SetLimit then changes
// nothing and returns an error wrapping ErrNotHeld. A plain lock (limit 1)
// or shared holds (WithShared) have no limit to change: ErrMisconfigured.
// n < 2 is ErrInvalid (a limit of 1 is a plain lock, another shape);
// ErrUnavailable when too few nodes answered (the limit may then have
// changed on some: call SetLimit again, which changes nothing twice).
//
// Over N masters a permit needs floor(N·n/(n+1))+1 nodes, which depends on
// n, and the nodes change one by one: an acquisition that runs while
// SetLimit is under way is counted against the old limit by the nodes not
// yet changed (it needs the old limit's quorum of them) and refused by the
// others (it then asks again with the new limit). The new limit holds for
// the acquisitions that begin after SetLimit returned. Until then, on up to
// six masters, the holders never exceed the larger of the two limits (the
// counting argument: TestLimitChangeBound); on more masters that is not
// guaranteed while the change is under way: change the limit while the
// key is quiet, or accept it. One Redis and a Cluster change atomically.
func (l *Locker) SetLimit(ctx context.Context, key string, n int) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if n < 2 {
		return invalid("a semaphore's limit must be at least 2, not %d (a limit of 1 is a plain lock)", n)
	}
	nm := l.names(key)
	limit, grace := strconv.Itoa(n), strconv.FormatInt(max(limitGrace.Milliseconds(), 1), 10)
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[[2]int64](func(ctx context.Context, i int, c redis.UniversalClient) ([2]int64, error) {
			argv := script.SetLimitArgs{Limit: limit, Grace: grace, Waker: l.waker(i, nm)}
			v, err := l.runScript(ctx, c, l.nodeTimeout(DefaultTTL), script.SetLimit, argv.Command(nm.SetLimitKeys()))
			if err != nil {
				return [2]int64{}, err
			}
			return parsePair(v)
		}),
		func(rs []quorum.Result[[2]int64], suspects int) bool {
			return quorum.AllAnswering(rs, suspects, len(l.nodes))
		}, nil)
	o := l.newOutcome(key, l.quorum)
	shape := ""
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
		case r.Val[0] == 1:
			o.confirmed()
		case r.Val[0] == -1:
			shape = "a plain lock"
			o.refusal()
		case r.Val[0] == -2:
			shape = "shared holds"
			o.refusal()
		default:
			o.refusal()
		}
	}
	o.missed(l, missing)
	class := o.class(ErrNotHeld)
	switch {
	case class == nil:
		return nil
	case shape != "":
		return o.wrap(ErrMisconfigured, fmt.Sprintf("set limit of %q: it is held as %s, which has no limit to change", key, shape))
	case class == ErrNotHeld:
		return o.wrap(ErrNotHeld, fmt.Sprintf("set limit of %q: no permit is held, so no limit is stored: the next acquisition's WithLimit sets it", key))
	}
	return o.wrap(class, fmt.Sprintf("set limit of %q%s", key, o.counts("changed it")))
}

// parsePair reads a script's reply of two integers.
func parsePair(v any) ([2]int64, error) {
	if a, ok := v.([]any); ok && len(a) == 2 {
		x, xok := a[0].(int64)
		y, yok := a[1].(int64)
		if xok && yok {
			return [2]int64{x, y}, nil
		}
	}
	return [2]int64{}, script.BadReply("unexpected reply %v", v)
}

// limitMoved reports whether err is semaphore.lua's answer to an
// acquisition that asked for a limit that SetLimit changed within the
// grace ("DLOCKLIMIT NEW OLD moved"), and NEW.
func limitMoved(err error) (int, bool) {
	if !quorum.IsReply(err) {
		return 0, false
	}
	rest, ok := strings.CutPrefix(err.Error(), "DLOCKLIMIT ")
	if !ok || !strings.HasSuffix(rest, " moved") {
		return 0, false
	}
	held, _, _ := strings.Cut(rest, " ")
	n, perr := strconv.Atoi(held)
	return n, perr == nil && n > 1
}

// movedLimit reports whether err, an acquisition's with cfg, says that
// SetLimit changed the limit cfg asks for within the grace; then cfg asks
// for the new limit, and the caller asks again once (see SetLimit).
func movedLimit(cfg *lockConfig, err error) bool {
	if err == nil {
		return false
	}
	var e *limitMismatchError
	if !errors.As(err, &e) || e.moved < 2 || cfg.limit < 2 || e.moved == cfg.limit {
		return false
	}
	cfg.limit = e.moved
	return true
}
