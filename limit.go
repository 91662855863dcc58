package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
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
// remembered, with the key: a node restarted without its data (or the
// key's eviction) forgets the change and its grace, so that until the
// holders of one limit have left, an acquisition asking for the other is
// ErrMisconfigured there. Processes of a dlock version before SetLimit are not told
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
// key is quiet, or accept it. While the nodes disagree (the change under
// way, and on the nodes that held no permit until its second round, which
// records the previous limit there), an acquisition on a Redlock may also
// be refused as misconfigured: try it again. One Redis and a Cluster
// change atomically.
func (l *Locker) SetLimit(ctx context.Context, key string, n int) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if n < 2 {
		return invalid("a semaphore's limit must be at least 2, not %d (a limit of 1 is a plain lock)", n)
	}
	nm := l.names(key)
	limit, grace := strconv.Itoa(n), strconv.FormatInt(max(limitGrace.Milliseconds(), 1), 10)
	o, old, free := l.setLimitRound(ctx, nm, limit, grace, "")
	if free && old != "" && o.ok >= o.q {
		// Nodes without a permit keep the previous limit too, so that an
		// acquisition that asks for it is sent to the new one there as
		// well (see SetLimit: a second round, only then).
		l.setLimitRound(ctx, nm, limit, grace, old)
	}
	return o.err(key)
}

// setLimitOutcome is a SetLimit round's outcome, and the shape that refused.
type setLimitOutcome struct {
	outcome
	shape string
}

// setLimitRound runs setlimit.lua (its ARGV[7] old) on every node and
// counts the answers; it returns the previous limit that the nodes that
// changed reported, and whether a node had no permit.
func (l *Locker) setLimitRound(ctx context.Context, nm *keys.Names, limit, grace, old string) (o setLimitOutcome, prev string, free bool) {
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[limitReply](func(ctx context.Context, i int, c node.Conn) (limitReply, error) {
			argv := script.SetLimitArgs{Limit: limit, Grace: grace, Old: old, Waker: l.waker(i, nm)}
			v, err := l.runScript(ctx, c, l.nodeTimeout(DefaultTTL), script.SetLimit, argv.Command(nm.SetLimitKeys()))
			if err != nil {
				return limitReply{}, err
			}
			return parseLimitReply(v)
		}),
		func(rs []quorum.Result[limitReply], suspects int) bool {
			return quorum.AllAnswering(rs, suspects, len(l.nodes))
		}, nil)
	o.outcome = l.newOutcome(nm.Key, l.quorum)
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
		case r.Val.code == 1:
			o.confirmed()
			prev = cmp.Or(prev, r.Val.old)
		case r.Val.code == -1:
			o.shape = "a plain lock"
			o.refusal()
		case r.Val.code == -2:
			o.shape = "shared holds"
			o.refusal()
		default:
			free = true
			o.refusal()
		}
	}
	o.missed(l, missing)
	return o, prev, free
}

// err is SetLimit's error for key, or nil.
func (o *setLimitOutcome) err(key string) error {
	class := o.class(ErrNotHeld)
	switch {
	case class == nil:
		return nil
	case o.shape != "":
		return o.wrap(ErrMisconfigured, fmt.Sprintf("set limit of %q: it is held as %s, which has no limit to change", key, o.shape))
	case class == ErrNotHeld:
		return o.wrap(ErrNotHeld, fmt.Sprintf("set limit of %q: no permit is held, so no limit is stored: the next acquisition's WithLimit sets it", key))
	}
	return o.wrap(class, fmt.Sprintf("set limit of %q%s", key, o.counts("changed it")))
}

// limitReply is setlimit.lua's reply on one node.
type limitReply struct {
	code int64
	old  string
}

// parseLimitReply reads setlimit.lua's reply: {code, woken, old}.
func parseLimitReply(v any) (limitReply, error) {
	if a, ok := v.([]any); ok && len(a) == 3 {
		code, cok := a[0].(int64)
		old, ook := a[2].(string)
		if cok && ook {
			return limitReply{code: code, old: old}, nil
		}
	}
	return limitReply{}, script.BadReply("unexpected reply of setlimit.lua: %v", v)
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
