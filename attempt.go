package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// newToken returns 128 random bits from crypto/rand, hex-encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// attemptResult says why an attempt failed.
type attemptResult struct {
	outcome
	// pttl is how long until the lock may be free: the shortest remaining
	// TTL of the holder (at least 1ms: a key that expires within the
	// millisecond is timed as 1ms), or the stand-in delay for a lock
	// reserved for a woken waiter; 0 when nothing times the wait.
	pttl   time.Duration
	late   bool // quorum reached but no validity left, or the fence raise failed
	closed bool // acquired while the Locker was closed, and given back
	// notWaited counts suspect nodes the round decided without: their
	// answers, arriving after it, may show they are back.
	notWaited int
	// limitErr is set when a node holds the key with another limit (see
	// WithLimit): ErrMisconfigured (and ErrInvalid), returned at once.
	limitErr error
	// sameServer is set when two of a Redlock's nodes reach one server
	// (see serverIDs): ErrMisconfigured, returned at once.
	sameServer error
}

// class is the attempt's error class (see outcome.class): a quorum reached
// too late is ErrUnavailable (the nodes were too slow), and an acquisition
// made while the Locker was closing is ErrClosed.
func (r *attemptResult) class() error {
	switch {
	case r.closed:
		return ErrClosed
	case r.sameServer != nil:
		return ErrMisconfigured
	case r.late:
		return ErrUnavailable
	}
	return r.outcome.class(ErrNotAcquired)
}

// final reports whether waiting cannot change the attempt's answer: ctx
// ended, the nodes refused for good, the Locker was closed, or the key is
// held with another limit.
func (r *attemptResult) final(ctx context.Context) bool {
	return ctx.Err() != nil || r.class() == ErrMisconfigured || r.closed || r.limitErr != nil
}

// cutShort reports whether every failure of the attempt is a context's end
// (with cancelledOnly, a cancellation: a deadline gave the nodes all the
// time the caller had): when the caller's ctx has ended, such an attempt
// says nothing of the nodes.
func (r *attemptResult) cutShort(cancelledOnly bool) bool {
	for _, err := range r.errs {
		if !errors.Is(err, context.Canceled) && (cancelledOnly || !errors.Is(err, context.DeadlineExceeded)) {
			return false
		}
	}
	return r.ok == 0 && r.refused == 0
}

// err is the error of a failed attempt, or of a wait that ended after it
// because ctx ended (ctx's error is wrapped too, except for a permanent
// error, which did not depend on it). An attempt that ctx cut short says
// nothing of the nodes: the caller gave up, and the error is ErrNotAcquired.
func (r *attemptResult) err(key string, ctx context.Context) error {
	if r.limitErr != nil {
		return r.limitErr
	}
	if r.sameServer != nil {
		return fmt.Errorf("%w (acquiring %q)", r.sameServer, key)
	}
	class := r.class()
	if ctx.Err() != nil && r.cutShort(true) && !r.closed {
		return fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctx.Err())
	}
	var what string
	switch {
	case class == ErrClosed:
		return closedErr(key)
	case r.late:
		what = fmt.Sprintf("%q: quorum reached too late, no validity left", key)
	case class == ErrNotAcquired:
		what = fmt.Sprintf("%q is held by another owner%s", key, r.counts("granted"))
	default:
		what = fmt.Sprintf("%q%s", key, r.counts("granted"))
	}
	if ctx.Err() != nil && class != ErrMisconfigured {
		return r.wrap(class, what, ctx.Err())
	}
	return r.wrap(class, what)
}

// attempt runs one acquisition round on every node. ks is nil for an attempt
// that must not register as a waiter; otherwise it registers on the nodes
// where ready says the Locker's inbox is subscribed.
//
// Whatever the outcome, no key is left behind by it: on failure the nodes
// that granted, and those that did not answer (they may run the command when
// they resume), are cleaned up in the background (see cleaner); on success
// the lock records the nodes that did not answer, and cleans them up when it
// dies.
func (l *Locker) attempt(ctx context.Context, key string, cfg lockConfig, ks *keyState, ready []bool) (*Lock, attemptResult) {
	if err := l.servers.refusal(); err != nil {
		return nil, attemptResult{outcome: l.newOutcome(key, l.quorumFor(cfg.limit)), sameServer: err}
	}
	token := newToken()
	timeout := l.nodeTimeout(cfg.ttl)
	var nm *keys.Names
	if ks != nil {
		nm = ks.names
	} else {
		nm = l.names(key)
	}

	n := len(l.nodes)
	var regs []nodeReg
	if ks != nil {
		regs = ks.registration(ready)
	}
	q := l.quorumFor(cfg.limit)
	res := attemptResult{outcome: l.newOutcome(key, q)}
	late := l.newLateAcquire(ks, nm, regs, cfg, token, timeout)
	late.decided.Add(1)

	registers := false
	for _, r := range regs {
		registers = registers || r.member != ""
	}
	start := time.Now()
	results, missing := quorum.Fanout(ctx, l.nodes, timeout, late,
		func(rs []quorum.Result[script.AcquireReply], suspects int) bool {
			// Nodes that recently did not answer in time are not waited
			// for: with them counted as failed, the quorum is out of reach.
			// A round that did not get a quorum of grants (refused, or
			// failed) and registers the waiter on some node waits for
			// every node that is not suspect, within the round's deadline:
			// one that had not answered would be cleaned up at once
			// (cleanAttempt buries the token there) and could refuse the
			// attempt as buried, without writing its registration, so that
			// the waiter would not be woken by that node's releases (nor
			// put first there by RequestLeadership) until its next attempt.
			if registers {
				return grants(rs) >= q || quorum.AllAnswering(rs, suspects, n)
			}
			return quorum.Decided(rs, suspects, n, q, granted)
		},
		late)

	res.decided(ctx.Err() != nil)
	// effects: what each node's answer (or its absence) shows.
	// On the stack for up to 8 nodes.
	var effBuf [8]effect
	var ansBuf [8]bool
	var grantBuf [8]int
	effects, answered := perNode(effBuf[:], n), perNode(ansBuf[:], n)
	fence, grantedNodes := res.classify(l, cfg, nm, ks, regs, results, effects, answered, grantBuf[:0])
	res.settleMissing(l, ks, regs, missing, effects, answered)
	res.sameServer = l.servers.refusal()
	var k *Lock
	if res.ok >= q && res.sameServer == nil {
		k = l.grant(ctx, &res, nm, token, late.cmd.argv.Token, cfg, fence, results, timeout, start, effects)
	}
	switch {
	case k == nil && !res.closed:
		l.cleanAttempt(nm, token, cfg.ttl, effects)
	case k != nil && ks != nil:
		ks.acquired(grantedNodes)
	}
	late.k = k
	late.decided.Done()
	return k, res
}

// newLateAcquire returns an attempt's command per node and the handler of
// its late answers, in one allocation: lock.lua's command for a plain lock
// that does not register (with the metadata hash on a Redlock, where the
// holder's fence is recorded with the hold: see lock.lua's KEYS[4]), the
// shape's script's, the same for every node (a copy per node on a
// Redlock: see own), for another attempt that does not register, and
// neither for one that registers (each node's is made as it is sent).
func (l *Locker) newLateAcquire(ks *keyState, nm *keys.Names, regs []nodeReg, cfg lockConfig, token string, timeout time.Duration) *lateAcquire {
	tokenArg, ttlArg := any(token), l.ttlArg(cfg.ttl)
	late := &lateAcquire{ks: ks, token: token, ttl: cfg.ttl, cmd: attemptCmd{l: l, nm: nm, regs: regs, shared: cfg.shared, timeout: timeout,
		argv: script.AcquireArgs{Token: tokenArg, TTL: ttlArg, Retention: l.retentionArg, Metadata: cfg.metadata, Limit: limitArg(cfg.limit, cfg.shared)}}}
	cmd := &late.cmd
	n := len(l.nodes)
	cmd.copies = perNode(cmd.oneCopy[:], n)
	switch {
	case regs == nil && cfg.plain() && n > 1:
		cmd.lock = script.AppendLockCommand(cmd.lockBuf[:0], nm.LockKeysRecorded(), tokenArg, ttlArg, l.counterLife(cfg.ttl))
	case regs == nil && cfg.plain():
		cmd.lock = script.AppendLockCommand(cmd.lockBuf[:0], nm.LockKeys(), tokenArg, ttlArg, l.counterLife(cfg.ttl))
	case regs == nil:
		cmd.args = cmd.argv.Command(nm.AcquireKeys())
	}
	return late
}

// attemptCmd is an attempt's command on each node.
type attemptCmd struct {
	l       *Locker
	nm      *keys.Names
	regs    []nodeReg // the waiter's registration per node, nil for none
	shared  bool
	timeout time.Duration
	argv    script.AcquireArgs
	// lock is lock.lua's command, for a plain lock's attempt that does not
	// register (the everyday path), else nil; args the shape's script's
	// (see AcquireArgs.Script) for every node, for another attempt that does
	// not register.
	lock, args []any
	lockBuf    [script.LockCommandLen]any // lock's array
	// copies counts the copies of the command written to each node
	// (oneCopy's on one Redis).
	copies  []attemptCopies
	oneCopy [1]attemptCopies
}

// run sends the attempt's command to node i: lock.lua for a plain lock that
// does not register, then the shape's script (acquire.lua) if lock.lua
// answered Other (a key of
// another shape: one round trip more, for a plain lock asked of a key held
// as shared holds or a semaphore), within the round's deadline (with a
// client whose socket deadlines bound its calls, and that does not honour
// ctx, the second can end up to a node timeout after it); else the shape's
// script (acquire.lua, semaphore.lua or shared.lua: AcquireArgs.Script).
func (a *attemptCmd) run(ctx context.Context, i int, c node.Conn) (script.AcquireReply, error) {
	cp := &a.copies[i]
	r, err := a.send(ctx, i, c, cp)
	if err != nil {
		err = a.undoRefusedWait(ctx, i, c, err) // WithReplicaAck on a server without WAIT
	}
	r.Again = cp.N() > 1 || (cp.other != nil && cp.other.N() > 1)
	return r, err
}

// attemptCopies counts the copies written of an attempt's command on one
// node (see node.Copies): lock.lua's or the shape's script's, and the
// shape's script's after lock.lua answered Other.
type attemptCopies struct {
	node.Copies
	other *node.Copies
}

// own returns args as the command of node i alone: args itself on one
// node (an attempt's command is its own), else a copy.
func (a *attemptCmd) own(args []any) []any {
	if len(a.copies) == 1 {
		return args
	}
	return slices.Clone(args)
}

// send is run's command on node i.
func (a *attemptCmd) send(ctx context.Context, i int, c node.Conn, cp *attemptCopies) (script.AcquireReply, error) {
	asked := a.l.servers.ask(ctx, i, c) // once the node's run id is known, nothing
	defer asked()
	if a.lock != nil {
		r, err := a.l.runAcquire(ctx, c, a.timeout, script.Lock, a.own(a.lock), &cp.Copies)
		if err != nil || r.OK || r.PTTL != script.Other {
			return r, err
		}
		if err := ctx.Err(); err != nil {
			return r, err // out of time for the second command
		}
		cp.other = &node.Copies{} // the shape's script: a command of its own
	}
	args := a.args
	switch {
	case args != nil:
		args = a.own(args)
	case a.regs == nil:
		args = a.argv.Command(a.nm.AcquireKeys())
	case a.regs != nil:
		reg := a.regs[i]
		w := script.Waiter{Member: reg.member, Lease: waiterLeaseArg, Position: reg.pos, Queued: reg.queued, Refresh: reg.refresh}
		if reg.queued == queuedPopped && (a.shared || a.argv.Limit != any("1")) {
			w.Queued = "1" // only a lock's grant (acquire.lua) knows "p"
		}
		if a.shared {
			args = a.argv.SharedWaiterCommand(a.nm.AcquireKeys(), w, a.l.waker(i, a.nm))
		} else {
			args = a.argv.WaiterCommand(a.nm.AcquireKeys(), w)
		}
	}
	if cp.other != nil {
		return a.l.runAcquire(ctx, c, a.timeout, a.argv.Script(), args, cp.other)
	}
	return a.l.runAcquire(ctx, c, a.timeout, a.argv.Script(), args, &cp.Copies)
}

// runAcquire runs an acquisition's script (lock.lua or the shape's) on one
// node and reads its answer; cp counts the copies of args written (args is
// the node's own).
func (l *Locker) runAcquire(ctx context.Context, c node.Conn, timeout time.Duration, s *script.Script, args []any, cp *node.Copies) (script.AcquireReply, error) {
	v, err := l.runScriptCounted(ctx, c, timeout, s, args, cp)
	if err != nil {
		return script.AcquireReply{}, err
	}
	return script.ParseAcquire(v)
}

// granted reports whether a node granted an attempt.
func granted(r quorum.Result[script.AcquireReply]) bool { return r.Err == nil && r.Val.OK }

// grants counts the grants among an attempt's answers.
func grants(rs []quorum.Result[script.AcquireReply]) int {
	g := 0
	for _, r := range rs {
		if granted(r) {
			g++
		}
	}
	return g
}

// classify counts the answers of an attempt's round in r, records in
// effects and answered what each node's answer shows, registers the waiter
// (ks, when waiting) where a node queued it, and returns the largest fence
// granted and the nodes that granted, appended to grantedNodes.
func (r *attemptResult) classify(l *Locker, cfg lockConfig, nm *keys.Names, ks *keyState, regs []nodeReg,
	results []quorum.Result[script.AcquireReply], effects []effect, answered []bool, grantedNodes []int) (fence uint64, _ []int) {
	for i := range effects {
		effects[i] = effUnknown
	}
	for _, rs := range results {
		effects[rs.Node] = l.effectOf(rs.Node, rs.Err, rs.Val.OK, rs.Val.Again)
		answered[rs.Node] = true
		switch {
		case rs.Err != nil:
			if held, ok := limitMismatch(rs.Err); ok {
				moved, _ := limitMoved(rs.Err) // asked again with it: see SetLimit
				if r.limitErr == nil || moved > 0 {
					e := limitError(r.key, held, cfg.limit, cfg.shared)
					e.moved, r.limitErr = moved, e
				}
			}
			r.failed(l, rs.Node, rs.Err)
		case rs.Val.OK:
			r.confirmed()
			grantedNodes = append(grantedNodes, rs.Node)
			fence = max(fence, rs.Val.Fence)
		case rs.Val.PTTL == -1:
			// A value without expiry: not written by dlock, which always
			// sets one. Another program uses the key: waiting will not
			// free it.
			r.failed(l, rs.Node, script.BadReply("the lock key %s holds a value without expiry, which dlock did not write", nm.Lock()))
			if ks != nil {
				ks.registered(rs.Node, regs[rs.Node], rs.Val.Pos, rs.Val.Intent) // to remove it when leaving
			}
		default:
			r.refusal()
			r.timeBy(l, rs.Val.PTTL)
			if ks != nil {
				ks.registered(rs.Node, regs[rs.Node], rs.Val.Pos, rs.Val.Intent)
			}
		}
	}
	return fence, grantedNodes
}

// timeBy lets a refusal whose holder's remaining TTL is pttl (in ms, as
// acquire.lua answers) time the wait, if it is the shortest: 0 expires
// within the millisecond; a reservation for a woken waiter (-3) is timed
// by the stand-in delay (by then the woken waiter holds the lock, with a
// TTL that times the next try, or is gone); a key without expiry (-1)
// times nothing.
func (r *attemptResult) timeBy(l *Locker, pttl int64) {
	var p time.Duration
	switch {
	case pttl >= 0:
		p = max(time.Duration(pttl)*time.Millisecond, time.Millisecond)
	case pttl == -3:
		p = l.standIn()
	}
	if p > 0 && (r.pttl == 0 || p < r.pttl) {
		r.pttl = p
	}
}

// settleMissing counts the nodes that did not answer in an attempt's round
// (those not waited for, being suspect, apart), and tells the waiter (ks,
// when waiting) which registrations are unknown: a node that did not
// answer answers late (the late handler then settles what it did), except
// one called inline (one Redis, see quorum.Call), whose command may run at
// any time.
func (r *attemptResult) settleMissing(l *Locker, ks *keyState, regs []nodeReg, missing []quorum.Missing, effects []effect, answered []bool) {
	r.missed(l, missing)
	for _, m := range missing {
		if errors.Is(m.Err, quorum.ErrNotWaited) {
			r.notWaited++
		}
	}
	lateComes := len(effects) > 1 || len(missing) == 0 || !missing[0].Inline
	if ks != nil {
		for i, e := range effects {
			if e == effUnknown && (answered[i] || !lateComes) {
				ks.unanswered(i, regs[i])
			}
		}
	}
}

// cleanAttempt releases what a failed attempt may have set: on granted
// nodes, and on nodes whose answer was lost or late (at once, burying the
// token, also where a late answer will come: the Locker may be closed
// before it does). A grant of a split vote wakes nobody: the release that
// freed the lock woke a waiter already.
func (l *Locker) cleanAttempt(nm *keys.Names, token string, ttl time.Duration, effects []effect) {
	now := time.Now()
	for i, e := range effects {
		if clean, bury := e.cleans(); clean {
			l.clean(i, nm, token, ttl, bury, now, e == effUnknown)
		}
	}
}

// grant makes the lock of an attempt that a quorum granted, once the
// fences are raised where a Redlock needs it, if validity is left beyond
// the margin before which Lost fires. Otherwise it returns nil, with
// res.late set (too late, or the raise failed) or res.closed (the Locker
// was closed meanwhile: the lock was given back).
func (l *Locker) grant(ctx context.Context, res *attemptResult, nm *keys.Names, token string, tokenArg any, cfg lockConfig,
	fence uint64, results []quorum.Result[script.AcquireReply], timeout time.Duration, start time.Time, effects []effect) *Lock {
	ok := true
	validUntil := start.Add(cfg.ttl - drift(cfg.ttl))
	if len(l.nodes) > 1 {
		fence, ok = l.claimFences(ctx, nm, token, cfg, fence, results, res.q, timeout, validUntil.Add(-lostMargin(cfg.ttl)))
	}
	if !ok || !time.Now().Before(validUntil.Add(-lostMargin(cfg.ttl))) {
		res.late = true
		return nil
	}
	var leaseBuf [8]nodeLease
	leases := perNode(leaseBuf[:], len(l.nodes))
	grantedLeases(leases, effects, validUntil)
	k := l.newLock(res.key, nm, tokenArg, fence, cfg, leases)
	if !k.start(start) {
		// Closed meanwhile: give it back.
		k.release(context.Background())
		res.closed = true
		return nil
	}
	return k
}

// lateAcquire handles the answers to an attempt that arrive after its round:
// once the attempt's outcome is known (decided), such an answer goes to the
// lock (k) if it succeeded, or has the node cleaned up if it failed.
// It is also the round's quorum.Runner: its command per node (cmd).
type lateAcquire struct {
	cmd     attemptCmd // its Locker, names and registrations too
	ks      *keyState
	token   string
	ttl     time.Duration
	decided sync.WaitGroup
	k       *Lock // set before decided is done
}

// Run sends the attempt's command to node i (see attemptCmd.run).
func (a *lateAcquire) Run(ctx context.Context, i int, c node.Conn) (script.AcquireReply, error) {
	return a.cmd.run(ctx, i, c)
}

func (a *lateAcquire) Late(r quorum.Result[script.AcquireReply]) {
	a.decided.Wait()
	l := a.cmd.l
	e := l.effectOf(r.Node, r.Err, r.Val.OK, r.Val.Again)
	if a.ks != nil {
		a.ks.lateAnswer(r.Node, a.cmd.regs[r.Node], e, r.Val.Pos)
	}
	if a.k != nil {
		a.k.lateAnswer(r.Node, e)
		if e.sets() && r.Val.Fence != a.k.fence {
			// A Redlock's node that granted after the round, with a fence
			// of its own, recorded that one with the hold.
			a.k.recordFence(r.Node)
		}
	} else if clean, bury := e.cleans(); clean {
		l.clean(r.Node, a.cmd.nm, a.token, a.ttl, bury, time.Now(), true)
	}
}

// counterLife is how long a fence counter lives at least after a use by a
// lock with this TTL, in milliseconds, as the scripts take it: the
// retention, and at least the TTL.
func (l *Locker) counterLife(ttl time.Duration) any {
	if ttl <= l.cfg.fenceRetention {
		return l.retentionArg
	}
	return strconv.FormatInt(ttl.Milliseconds(), 10)
}

// ttlArg is ttl in milliseconds, as the scripts take it.
func (l *Locker) ttlArg(ttl time.Duration) any {
	if ttl == DefaultTTL {
		return l.defaultTTLArg
	}
	return strconv.FormatInt(ttl.Milliseconds(), 10)
}

// perNode returns n elements: buf's when n fits (an array on the caller's
// stack, so that rounds on up to len(buf) nodes allocate nothing), else new
// ones.
func perNode[T any](buf []T, n int) []T {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

// limitMismatch reports whether err is acquire.lua's refusal of a key held
// with another limit, and that limit.
func limitMismatch(err error) (held string, ok bool) {
	if !quorum.IsReply(err) {
		return "", false
	}
	rest, ok := strings.CutPrefix(err.Error(), "DLOCKLIMIT ")
	if !ok {
		return "", false
	}
	held, _, _ = strings.Cut(rest, " ")
	switch held {
	case "?":
		held = "limit above 1" // a semaphore whose limit key was lost
	case "0":
		held = "shared holds"
	default:
		held = "limit " + held
	}
	return held, true
}

// limitError is the error of an acquisition of key with limit asked while
// its holders use limit held. The copies of a fleet disagree: it is
// ErrMisconfigured (waiting cannot fix it), and also wraps ErrInvalid (the
// caller's WithLimit is the one that differs from the holders').
func limitError(key, held string, asked int, shared bool) *limitMismatchError {
	how := fmt.Sprintf("with limit %d", max(asked, 1))
	if shared {
		how = "for a shared hold"
	}
	return &limitMismatchError{msg: fmt.Sprintf("%s: %q is held with %s, asked %s: every holder of a key must give the same limit",
		ErrMisconfigured.Error(), key, held, how)}
}

type limitMismatchError struct {
	msg   string
	moved int // the limit SetLimit changed the one asked for to, within the grace; 0: none
}

func (e *limitMismatchError) Error() string { return e.msg }

// Is matches ErrMisconfigured and ErrInvalid.
func (e *limitMismatchError) Is(target error) bool {
	return target == ErrMisconfigured || target == ErrInvalid
}

// errNotAcked fails a node's grant or renewal that too few replicas
// acknowledged in time (WithReplicaAck). It is transient.
var errNotAcked = errors.New("not acknowledged by enough replicas in time (WAIT)")

// runScript runs a script that writes the lock with c (args from s.args).
// With WithReplicaAck, it also waits, on the same connection (WAIT counts the
// writes of its own connection), until enough replicas have the write, and
// fails with errNotAcked if they do not within most of timeout.
func (l *Locker) runScript(ctx context.Context, c node.Conn, timeout time.Duration, s *script.Script, args []any) (any, error) {
	return l.runScriptCounted(ctx, c, timeout, s, args, nil)
}

// runScriptCounted is runScript, with the copies of the command written
// counted by cp unless it is nil (see script.RunCounted: args must then be
// the caller's own).
func (l *Locker) runScriptCounted(ctx context.Context, c node.Conn, timeout time.Duration, s *script.Script, args []any, cp *node.Copies) (any, error) {
	if l.cfg.replicaAck == 0 {
		return runOnCounted(ctx, c, s, args, cp)
	}
	if cp != nil {
		args = s.Counted(args, cp, false)
	}
	waitMS := max(timeout.Milliseconds()*3/4, 1) // 0 would wait forever
	cmd, wait := c.DoWait(ctx, args, l.cfg.replicaAck, waitMS)
	if node.HasErrorPrefix(cmd.Err, "NOSCRIPT") {
		e := s.Eval(args)
		if cp != nil {
			e = s.EvalCounted(args, cp)
		}
		cmd, wait = c.DoWait(ctx, e, l.cfg.replicaAck, waitMS)
	}
	if cmd.Err != nil {
		return nil, noScripting(cmd.Err)
	}
	n, isInt := node.Int(wait.Val)
	switch err := wait.Err; {
	case err != nil && quorum.IsReply(err):
		// WAIT refused (an ACL without +wait): permanent, not a lag. The
		// script did write: the error must not pass for a reply that
		// wrote nothing, so that the grant is cleaned up.
		return nil, waitRefused(err)
	case err != nil || !isInt || n < int64(l.cfg.replicaAck):
		return nil, fmt.Errorf("%w: %d of %d replicas", errNotAcked, n, l.cfg.replicaAck)
	}
	return cmd.Val, nil
}
