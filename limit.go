package dlock

import (
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
// it has holders, to n. It reads the key's limit on every node
// (limitstate.lua), then makes the change on every node, atomically on
// each (setlimit.lua): two commands per node.
//
// It returns nil once the change reached as many nodes as a permit of n
// needs (over N masters floor(N·n/(n+1))+1: three of three, five of five
// for n ≥ 4), nodes without a permit included; the acquisitions that begin
// after it are counted against n. Otherwise its error says how many nodes
// it reached and how many were needed: ErrUnavailable when nodes did not
// answer in time, ErrMisconfigured when they refused the command for good.
// Where it was made, the change stands; a node that missed it keeps the
// old limit (its holders' renewals keep it there) until the next
// acquisition that a node refuses for the limit brings it along (it reads
// the nodes and sends the last change to those behind it, then asks once
// more), or SetLimit is called again. When too few nodes answer to bring
// it along, and another node holds or recorded the limit asked, that
// acquisition fails with ErrUnavailable, not ErrMisconfigured (an Acquire
// waits the node timeout and tries again, until ctx ends). Each change is
// numbered after the last one that the nodes recorded and after their
// clocks (as fences are): its command run twice (a client's retry) answers
// alike and changes nothing twice, a copy that runs after a later change
// changes nothing, and a copy that runs more than LimitGrace after the
// nodes were read is dropped.
//
// Raising the limit wakes at once as many waiters as it frees permits (at
// most 100 per node; the others are admitted by the next release, or by
// their own wait running out, at the latest when a holder's TTL would).
// Lowering it admits no one until fewer than n permits are held: the
// holders keep their permits, renew them and release them as before.
//
// For LimitGrace after the change, an acquisition that asks for the
// previous limit is admitted against n, as if it had asked for n (it asks
// again with n: one more round; its Lock then renews with n). Beyond the
// grace, or for any other limit, an acquisition whose limit disagrees with
// the holders' is ErrMisconfigured, as before: give every process the new
// limit within the grace. A node restarted without its data (or the key's
// eviction) forgets the change: it is brought along as a node that missed
// it, from the other nodes' record of the change within the grace, and
// after it from the limit that a majority of the nodes hold. Processes of
// a dlock version before SetLimit are not told of the change: while the
// key is held, their acquisitions with the old limit are ErrMisconfigured,
// and their holders' renewals write their own limit back (each renewal of
// those versions writes the limit): change a limit once every process that
// uses the key runs this version.
//
// Only a held semaphore has a stored limit: a key with no live permit is
// limited by what its next acquisition asks for, so SetLimit then changes
// nothing and returns an error wrapping ErrNotHeld. A plain lock (limit 1)
// or shared holds (WithShared) have no limit to change: ErrMisconfigured.
// n < 2 is ErrInvalid (a limit of 1 is a plain lock, another shape). When
// fewer than a majority of the nodes answer the first command, nothing
// changes: ErrUnavailable.
//
// The bound: while a change is under way (SetLimit has not returned nil,
// or a node it missed was not brought along yet), the nodes disagree, and
// an acquisition is counted against the limit of the nodes that granted
// it, a quorum of that limit. On up to six masters the holders never
// exceed the larger of the old and the new limit (the counting argument:
// TestLimitChangeBound). A change begun while an earlier one is under way
// puts three limits in play: the holders never exceed the largest on up to
// four masters (TestLimitChangeBound3). On more masters neither is
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
	states, o := l.limitStates(ctx, nm)
	if err := o.readErr(key, states, l.quorum); err != nil {
		return err
	}
	c, readAt := nextChange(states, strconv.Itoa(n))
	o = l.applyLimit(ctx, nm, c, readAt, nil, quorum.For(len(l.nodes), n))
	return o.changeErr(key, n)
}

// setLimitOutcome is a SetLimit round's outcome, and the shape that refused.
type setLimitOutcome struct {
	outcome
	shape string
}

// limitChange is a change of a semaphore's limit, as setlimit.lua records
// it ("OLD NEW OP TOKEN"): from old to new, numbered op (the zero change:
// none), ordered by op, then token.
type limitChange struct {
	old, new string
	op       uint64
	token    string
}

// before reports whether c comes before d.
func (c limitChange) before(d limitChange) bool {
	return c.op < d.op || (c.op == d.op && c.token < d.token)
}

// parseLimitChange reads a change as setlimit.lua records it; the zero
// change for "" or a record it cannot read.
func parseLimitChange(s string) limitChange {
	f := strings.Fields(s)
	if len(f) != 4 {
		return limitChange{}
	}
	op, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return limitChange{}
	}
	return limitChange{old: f[0], new: f[1], op: op, token: f[3]}
}

// limitState is what limitstate.lua read on one node: ok when it answered.
type limitState struct {
	ok     bool
	code   int64  // 1 live permits, 0 none, -1 a plain lock, -2 shared holds
	limit  string // the stored limit, "" if none
	change limitChange
	now    uint64 // the server's time, ms
}

// limitStates reads every node's limitState (limitstate.lua), counting the
// answers in o (which needs a majority).
func (l *Locker) limitStates(ctx context.Context, nm *keys.Names) ([]limitState, setLimitOutcome) {
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[limitState](func(ctx context.Context, i int, c node.Conn) (limitState, error) {
			v, err := runOn(ctx, c, script.LimitState, script.LimitStateCommand(nm.SetLimitKeys())) // a read: no replica to wait for
			if err != nil {
				return limitState{}, err
			}
			return parseLimitState(v)
		}),
		func(rs []quorum.Result[limitState], suspects int) bool {
			return quorum.AllAnswering(rs, suspects, len(l.nodes))
		}, nil)
	o := setLimitOutcome{outcome: l.newOutcome(nm.Key, l.quorum)}
	states := make([]limitState, len(l.nodes))
	for _, r := range results {
		if r.Err != nil {
			o.failed(l, r.Node, r.Err)
			continue
		}
		o.confirmed()
		states[r.Node] = r.Val
	}
	o.missed(l, missing)
	return states, o
}

// parseLimitState reads limitstate.lua's reply: {code, limit, change, now}.
func parseLimitState(v any) (limitState, error) {
	if a, ok := v.([]any); ok && len(a) == 4 {
		code, cok := a[0].(int64)
		limit, lok := a[1].(string)
		change, chok := a[2].(string)
		now, nok := a[3].(string)
		ms, err := strconv.ParseUint(now, 10, 64)
		if cok && lok && chok && nok && err == nil {
			return limitState{ok: true, code: code, limit: limit, change: parseLimitChange(change), now: ms}, nil
		}
	}
	return limitState{}, script.BadReply("unexpected reply of limitstate.lua: %v", v)
}

// readErr is SetLimit's error from the nodes' states read before a change
// (o counted them): a shape without a limit, too few answers, or no live
// permit; nil to go on with the change.
func (o *setLimitOutcome) readErr(key string, states []limitState, majority int) error {
	held := 0
	for _, s := range states {
		switch {
		case !s.ok:
		case s.code == -1:
			o.shape = "a plain lock"
		case s.code == -2:
			o.shape = "shared holds"
		case s.code == 1:
			held++
		}
	}
	switch class := o.class(ErrUnavailable); {
	case o.shape != "":
		return o.wrap(ErrMisconfigured, fmt.Sprintf("set limit of %q: it is held as %s, which has no limit to change", key, o.shape))
	case class != nil:
		return o.wrap(class, fmt.Sprintf("set limit of %q: too few nodes answered to read its limit, nothing changed%s", key, o.counts("answered")))
	case held == 0:
		return o.wrap(ErrNotHeld, fmt.Sprintf("set limit of %q: no permit is held, so no limit is stored: the next acquisition's WithLimit sets it", key))
	}
	return nil
}

// nextChange is the change of the limit to n after the nodes' states: from
// the limit that most of the nodes with permits store (or, when the last
// change recorded already made n, from that change's old limit: SetLimit
// called again completes it), numbered after the last change recorded and
// the nodes' clocks. readAt is the latest of those clocks.
func nextChange(states []limitState, n string) (c limitChange, readAt uint64) {
	var last limitChange
	for _, s := range states {
		if s.ok {
			readAt = max(readAt, s.now)
			if last.before(s.change) {
				last = s.change
			}
		}
	}
	old, _ := mostHeld(states, last.new)
	if old == n && last.new == n {
		old = last.old
	}
	if old == "" {
		old = n
	}
	return limitChange{old: old, new: n, op: max(last.op+1, readAt), token: newToken()}, readAt
}

// mostHeld is the limit that the most nodes with live permits store, and
// how many do; prefer wins a tie.
func mostHeld(states []limitState, prefer string) (string, int) {
	counts := map[string]int{}
	for _, s := range states {
		if s.ok && s.code == 1 && s.limit != "" {
			counts[s.limit]++
		}
	}
	best, most := "", 0
	for limit, k := range counts {
		if k > most || (k == most && (limit == prefer || (best != prefer && limit < best))) {
			best, most = limit, k
		}
	}
	return best, most
}

// applyLimit sends change c, whose nodes were read at readAt (server ms),
// to the nodes that send says (every node when nil), and counts in o, which
// needs q, the nodes where it now stands: changed, recorded where no
// permit is live, or passed by a later change (it was made before it).
func (l *Locker) applyLimit(ctx context.Context, nm *keys.Names, c limitChange, readAt uint64, send []bool, q int) (o setLimitOutcome) {
	argv := script.SetLimitArgs{Limit: c.new, Old: c.old, Op: strconv.FormatUint(c.op, 10), Token: c.token,
		ReadAt: strconv.FormatUint(readAt, 10), Grace: strconv.FormatInt(max(limitGrace.Milliseconds(), 1), 10)}
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[limitReply](func(ctx context.Context, i int, conn node.Conn) (limitReply, error) {
			if send != nil && !send[i] {
				return limitReply{code: limitNotSent}, nil
			}
			argv := argv
			argv.Waker = l.waker(i, nm)
			v, err := l.runScript(ctx, conn, l.nodeTimeout(DefaultTTL), script.SetLimit, argv.Command(nm.SetLimitKeys()))
			if err != nil {
				return limitReply{}, err
			}
			return parseLimitReply(v)
		}),
		func(rs []quorum.Result[limitReply], suspects int) bool {
			return quorum.AllAnswering(rs, suspects, len(l.nodes))
		}, nil)
	o.outcome = l.newOutcome(nm.Key, q)
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
		case r.Val.code >= 0 && r.Val.code <= 2:
			o.confirmed()
		case r.Val.code == 3:
			o.failed(l, r.Node, errLateChange)
		case r.Val.code == -1:
			o.shape = "a plain lock"
			o.refusal()
		case r.Val.code == -2:
			o.shape = "shared holds"
			o.refusal()
		}
	}
	o.missed(l, missing)
	return o
}

// limitNotSent is applyLimit's reply for a node it did not send to.
const limitNotSent = -100

// errLateChange fails a node on which setlimit.lua ran more than
// LimitGrace after the nodes were read (by that node's clock).
var errLateChange = errors.New("the change of the limit arrived later than LimitGrace after the limits were read: not made (is the node's clock ahead?)")

// changeErr is SetLimit's error for key and n after the change, or nil.
func (o *setLimitOutcome) changeErr(key string, n int) error {
	class := o.class(ErrUnavailable)
	switch {
	case class == nil:
		return nil
	case o.shape != "":
		return o.wrap(ErrMisconfigured, fmt.Sprintf("set limit of %q: it is held as %s, which has no limit to change", key, o.shape))
	}
	return o.wrap(class, fmt.Sprintf("set limit of %q to %d: it reached %d of %d nodes, and a permit of limit %d needs %d; "+
		"it stands where it was made, and an acquisition that a node refuses for the limit brings the others along (or call SetLimit again)",
		key, n, o.ok, o.n, n, o.q))
}

// limitReply is setlimit.lua's reply on one node: its code.
type limitReply struct{ code int64 }

// parseLimitReply reads setlimit.lua's reply: {code, woken, limit}.
func parseLimitReply(v any) (limitReply, error) {
	if a, ok := v.([]any); ok && len(a) == 3 {
		code, cok := a[0].(int64)
		_, lok := a[2].(string)
		if cok && lok {
			return limitReply{code: code}, nil
		}
	}
	return limitReply{}, script.BadReply("unexpected reply of setlimit.lua: %v", v)
}

// convergeLimit brings along the nodes of key that missed the last change
// of its limit (catchUp), for an acquisition that a node refused for the
// limit: one round to read the nodes, one to send the change to those
// behind. It reports whether one of them took it. When none did, and a
// node says that asked is the limit (it holds it, or its last change
// records it) while another did not answer (in either round), the
// refusal shows no misconfiguration: the nodes could not be brought along,
// and it returns an error wrapping ErrUnavailable, with the nodes'
// failures, for the acquisition to return instead of ErrMisconfigured.
func (l *Locker) convergeLimit(ctx context.Context, nm *keys.Names, asked string) (bool, error) {
	if len(l.nodes) == 1 {
		return false, nil // one Redis, or a Cluster: no node to bring along
	}
	states, o := l.limitStates(ctx, nm)
	agrees := false
	for _, s := range states {
		agrees = agrees || s.ok && (s.code == 1 && s.limit == asked || s.change.op != 0 && s.change.new == asked)
	}
	unsure := func(o outcome) error {
		if !agrees || len(o.errs) == 0 {
			return nil
		}
		return o.wrap(ErrUnavailable, fmt.Sprintf("%q: a node holds it with another limit than %s, which other nodes hold or recorded, and too few nodes answered to bring it along (see SetLimit)", nm.Key, asked))
	}
	if o.ok < l.quorum {
		return false, unsure(o.outcome)
	}
	c, readAt, send := catchUp(states, l.quorum)
	if send == nil {
		return false, unsure(o.outcome)
	}
	a := l.applyLimit(ctx, nm, c, readAt, send, 1)
	if a.ok > 0 {
		return true, nil
	}
	return false, unsure(a.outcome)
}

// catchUp is the change that the nodes whose states a majority read should
// all have made, and the nodes that have not (send; nil: none to change).
// The last change recorded, when a majority of the nodes take its limit
// (they hold it, or no permit): it goes to the nodes that recorded an
// earlier one or none. Once no node records one (the grace ran out), the
// limit that a majority of the nodes hold, as a change of its own: it goes
// to the nodes that hold another.
func catchUp(states []limitState, majority int) (c limitChange, readAt uint64, send []bool) {
	for _, s := range states {
		if s.ok {
			readAt = max(readAt, s.now)
			if c.before(s.change) {
				c = s.change
			}
		}
	}
	send = make([]bool, len(states))
	behind, take := 0, 0
	for i, s := range states {
		switch {
		case !s.ok || s.code < 0:
		case c.op != 0:
			if s.code == 0 || s.limit == c.new {
				take++
			}
			if s.change.before(c) {
				send[i] = true
				behind++
			}
		case s.code == 1:
			send[i] = true // for now: those holding another limit, below
		}
	}
	if c.op == 0 {
		limit, most := mostHeld(states, "")
		take, c = most, limitChange{old: limit, new: limit, op: readAt, token: newToken()}
		for i, s := range states {
			send[i] = send[i] && s.limit != limit
			if send[i] {
				behind++
			}
		}
	}
	if take < majority || behind == 0 {
		return c, readAt, nil
	}
	return c, readAt, send
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

// limitRetry is what an acquisition did about the limits its attempts
// were refused for: how often it asked again with the limit that SetLimit
// changed the one asked for to, whether it brought the nodes along to the
// last change of the limit (see SetLimit), and, when it could not for
// want of answers, the error that says so (unsure).
type limitRetry struct {
	moves     int
	converged bool
	unsure    error
}

// again reports whether an acquisition of key with cfg whose attempt
// failed with err should make another: err says that SetLimit changed the
// limit cfg asks for within the grace (cfg then asks for the new limit;
// twice at most), or that a node holds the key with another limit and
// bringing the nodes along to the last change of the limit (once) changed
// one of them.
func (r *limitRetry) again(ctx context.Context, l *Locker, key string, cfg *lockConfig, err error) bool {
	if err == nil || ctx.Err() != nil || cfg.limit < 2 || cfg.shared {
		return false // (before errors.As, whose target escapes: no allocation on the everyday path)
	}
	return r.againAfter(ctx, l, key, cfg, err)
}

// againAfter is again for an acquisition that failed with err.
func (r *limitRetry) againAfter(ctx context.Context, l *Locker, key string, cfg *lockConfig, err error) bool {
	var e *limitMismatchError
	if !errors.As(err, &e) {
		return false
	}
	if e.moved >= 2 && e.moved != cfg.limit && r.moves < 2 {
		cfg.limit = e.moved
		r.moves++
		return true
	}
	if r.converged {
		return false
	}
	r.converged = true
	changed, unsure := l.convergeLimit(ctx, l.names(key), strconv.Itoa(cfg.limit))
	r.unsure = unsure
	return changed
}

// settle is the error of an acquisition that failed with err: ErrUnavailable
// (unsure, and ctx's error if it ended) instead of a refusal for the limit
// that the nodes could not be brought along to resolve.
func (r *limitRetry) settle(ctx context.Context, err error) error {
	if r.unsure == nil {
		return err // (before errors.As, whose target escapes: no allocation on the everyday path)
	}
	return r.settleUnsure(ctx, err)
}

// settleUnsure is settle once an attempt to bring the nodes along lacked
// answers.
func (r *limitRetry) settleUnsure(ctx context.Context, err error) error {
	var e *limitMismatchError
	if errors.As(err, &e) {
		return unsureErr(r.unsure, ctx)
	}
	return err
}

// unsureErr is unsure, with ctx's error once ctx ended.
func unsureErr(unsure error, ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", unsure, ctx.Err())
	}
	return unsure
}

// wait reports, for an Acquire whose attempt failed with err, a refusal
// for the limit that the nodes could not be brought along to resolve for
// want of answers (unsure), that it waited as for nodes that do not answer
// (the node timeout, or until ctx ends or the Locker closes) and should
// try again, bringing the nodes along again; false at once otherwise, and
// when ctx ended or the Locker closed during the wait.
func (r *limitRetry) wait(ctx context.Context, l *Locker, cfg lockConfig, err error) bool {
	if r.unsure == nil || ctx.Err() != nil {
		return false
	}
	var e *limitMismatchError
	if !errors.As(err, &e) {
		return false
	}
	t := time.NewTimer(l.nodeTimeout(cfg.ttl))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	case <-l.done:
		return false
	}
	r.converged, r.unsure = false, nil
	return true
}
