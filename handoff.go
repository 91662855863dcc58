package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// A Handoff is what another process needs to take on a held lock with
// Locker.Adopt: the key and the owner token (Adopt's arguments), the fence
// (Adopt reads it from Redis again; it is here for a receiver that only
// passes the hold on, or to check), and the lock's TTL and shape, which
// Adopt's options should repeat (WithTTL, WithLimit, WithShared).
type Handoff struct {
	Key    string
	Token  string
	Fence  uint64
	TTL    time.Duration // the TTL of the last confirmed renewal
	Limit  int           // WithLimit's n; 0 for a lock or a shared hold
	Shared bool          // a shared hold (WithShared)
}

// Detach stops this process's part in the lock without releasing it, and
// returns what another process needs to adopt it (Locker.Adopt): the key
// holds the token until its TTL runs out, counted from the last renewal
// Redis ran, unless someone adopts it first.
//
// Detach waits for a renewal or an Extend under way to end (each is bounded
// by its node timeout), then stops the renewals and the lost-lock
// bookkeeping: Lost closes (this *Lock no longer guarantees ownership; Do's
// context, if the lock is Do's, is cancelled with a cause wrapping
// ErrLockLost), Extend and Release send nothing and return an error
// wrapping ErrNotHeld that says the lock was detached, and Locker.Close no
// longer releases it. A hook hears of the end of the lock as EventReleased.
//
// Once Detach returns, this process sends nothing more that could end the
// hold, whatever runs at the same time (Close, Release, a renewal, the
// lock's loss): a lock that had already ended (lost, released, or closed
// by Close) is detached too, Detach first waiting for a release under way
// to end and dropping the clean-ups still due for the token (a lost lock's
// key is otherwise released once it would have expired). When a release
// of the lock was sent before (by Release, by Close, or by the clean-up of
// a lost lock), Token is empty in the Handoff: an unanswered copy of that
// release may still reach Redis after an adoption and end the adopter's
// hold, so there is nothing to adopt (Adopt refuses an empty token with
// ErrInvalid); the key expires after its TTL if the release did not take
// it. Detach twice returns the same Handoff and does nothing
// more.
//
// Where a command of this lock that sets its key may still run (a node
// that did not answer it, or a client that sent it twice: see
// node.Copies), Detach buries the token before it returns (a tombstone
// that refuses the token's acquisitions, not its renewals or release), so
// that such a copy, run after the adopter released the hold, takes nothing
// again; it waits for that at most a node timeout. A command that runs
// late never moves the key's expiry earlier, so an adopter is never cut
// short by it.
func (k *Lock) Detach() Handoff {
	h := Handoff{Key: k.key, Token: k.Token(), Fence: k.fence, Limit: k.limit, Shared: k.shared}
	_ = k.takeOps(context.Background()) // never fails without a deadline
	k.mu.Lock()
	h.TTL = k.ttl
	was := k.state
	if was == stateDetached {
		if k.detachedEmpty {
			h.Token = ""
		}
		k.mu.Unlock()
		k.giveOps()
		return h
	}
	k.state = stateDetached // from held, or from another end (see lockState)
	late := k.lateNodes()
	if was != stateHeld {
		rel, sent := k.rel, k.relBegun
		k.mu.Unlock()
		k.giveOps()
		if k.dropCleanups(rel) || sent {
			k.mu.Lock()
			k.detachedEmpty = true
			k.mu.Unlock()
			h.Token = ""
			return h
		}
		k.bury(late)
		return h
	}
	k.endLost()
	k.stopTimers()
	fns := k.onLostFns
	k.onLostFns = nil
	acquiredAt := k.events.acquiredAt
	k.mu.Unlock()
	k.giveOps()
	k.forget()
	k.bury(late)
	cause := fmt.Errorf("%w: %q was detached", ErrLockLost, k.key)
	for _, f := range fns {
		f(cause)
	}
	if k.l.hook != nil && !acquiredAt.IsZero() {
		k.l.hook.Event(k.eventCtx(), Event{Kind: EventReleased, Key: k.key, Limit: k.limit, Held: time.Since(acquiredAt)})
	}
	return h
}

// lateNodes are the nodes where a command of the lock that sets its key
// may still run (unanswered, or written twice); k.mu is held.
func (k *Lock) lateNodes() []int {
	var idx []int
	for i, n := range k.nodes {
		if n.unknown > 0 || n.again {
			idx = append(idx, i)
		}
	}
	return idx
}

// bury buries the lock's token on the nodes idx (bury.lua), waiting at
// most a node timeout for each answering node.
func (k *Lock) bury(idx []int) {
	if len(idx) == 0 {
		return
	}
	l := k.l
	timeout := max(l.nodeTimeout(k.TTL()), 100*time.Millisecond)
	args := script.BuryCommand(k.names.BuryKeys(), k.tokenArg, buryForArg)
	nodes := l.subset(idx)
	quorum.Fanout(context.Background(), nodes, timeout,
		quorum.RunFunc[int64](func(ctx context.Context, _ int, c node.Conn) (int64, error) {
			v, err := runOn(ctx, c, script.Bury, args)
			return script.IntReply("bury", v, err)
		}),
		func(rs []quorum.Result[int64], suspects int) bool {
			return quorum.AllAnswering(rs, suspects, len(nodes))
		}, nil)
}

// dropCleanups, for a lock detached after it had ended, waits for its
// release round rel (if any) to end, then drops the clean-ups due for its
// token on every node, waiting for one under way (see cleanup.Cancel): none
// may end the hold that an adopter takes on. It reports whether a clean-up
// release was sent before.
func (k *Lock) dropCleanups(rel *releaseRound) (sent bool) {
	if rel != nil {
		k.mu.Lock()
		if !rel.finished {
			if rel.done == nil {
				rel.done = make(chan struct{})
			}
			done := rel.done
			k.mu.Unlock()
			<-done
		} else {
			k.mu.Unlock()
		}
	}
	for _, c := range k.l.cleaners {
		sent = c.Cancel(k.Token()) || sent
	}
	return sent
}

// detachedErr is the error of Extend and Release on a detached lock, nil
// for one that is not.
func (k *Lock) detachedErr(verb string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.state != stateDetached {
		return nil
	}
	return k.detachedError(verb)
}

// detachedError is the error of Extend and Release (verb) on a detached
// lock.
func (k *Lock) detachedError(verb string) error {
	return fmt.Errorf("%w: %s %q: detached (see Lock.Detach): this *Lock no longer acts on the hold", ErrNotHeld, verb, k.key)
}

// Adopt takes on a hold of key that was acquired elsewhere (another process
// that called Lock.Detach, or `dlock acquire`), given its owner token: one
// round, in which a quorum of nodes (one on one Redis, N/2+1 of a Redlock,
// the permit's quorum for WithLimit) confirm that key is held by token, in
// the shape the options name (a lock; WithLimit(n)'s permit, of a
// semaphore whose limit is n; or WithShared's hold), and make its key live
// at least WithTTL's TTL (DefaultTTL without it) from then, as Extend does.
// It returns a *Lock as Acquire's: auto-renewed (WithAutoRenew), with Lost,
// Extend, Release, the hold's fence and its metadata. Its validity is
// measured from the start of Adopt's round, never from the first holder's
// acquisition. WithMetadata is not an option of Adopt (the hold keeps its
// own): ErrInvalid.
//
// The fence is the one the hold's grant issued, recorded with the hold (a
// permit's, a shared hold's, a holder's with metadata, a lock's on a
// Redlock, whose counters move) or, for a lock on one Redis, its key's
// counter (nothing moves it while the lock is held, and a renewal restores
// a lost one): the same as Lock.Fence of the process that detached it.
// Should the counter be lost (an eviction) before any renewal restored it,
// the hold's fence is unknown: Adopt then gives it a new one, larger than
// every fence issued for the key, recorded with the hold from then on.
// A permit whose semaphore's limit SetLimit changed from n to m (within
// LimitGrace) is adopted WithLimit(n) as a permit of m (the *Lock's quorum
// is then m's, and its Handoff's Limit m): from then on, whatever SetLimit
// does, it is adopted WithLimit(n) or WithLimit(m), each limit it was
// granted or adopted as, and with no other.
//
// It returns an error wrapping ErrNotHeld when a quorum says that token does
// not hold key (it expired, was released, taken, or is held in another
// shape or with another limit), ErrUnavailable or ErrMisconfigured (with
// each node's failure as *NodeError) when too few nodes confirmed for
// another reason, ErrClosed on a closed Locker, and ErrInvalid for an empty
// key or a token that is not 32 lowercase hex characters (the form of every
// token dlock makes).
//
// On failure, Adopt ends nothing: a node that refused it changed nothing
// (Adopt waits for every node that answers before it fails, so that a hold
// in another shape is left as it was); one that confirmed made the key live
// at least its TTL from then, as a renewal would (never shorter than it
// was), and one that did not answer may still do so when the command runs
// late. So the hold, if it was live, stays so: another Adopt of the token
// (a retry) may take it on, and nothing of the failed one ends that; if
// nobody does, the key is free once that TTL runs out. Only when a quorum
// said the token no longer holds the key (the hold is gone), and no node
// said that it holds the key in another shape (where the token may hold
// it), are the nodes that confirmed released, at once. An Adopt whose
// command ran twice (a retry of the client) writes nothing more the second
// time.
//
// The token is the capability: Adopt does not exclude another Adopt of the
// same token (two *Lock would then renew one hold, each believing it
// exclusive), nor a first holder that did not Detach. Hand a token to one
// process, and Detach before handing it.
func (l *Locker) Adopt(ctx context.Context, key, token string, opts ...LockOption) (*Lock, error) {
	cfg, err := l.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	if err := checkToken(token); err != nil {
		return nil, err
	}
	if cfg.metadata != "" {
		return nil, invalid("Adopt keeps the hold's metadata: WithMetadata is not one of its options")
	}
	var a acquisition
	a.start(l, ctx, key, cfg)
	k, err := l.adopt(ctx, key, token, cfg)
	err = l.nameCauses(err, cfg.ttl)
	a.attempted(k, classOf(err))
	a.end(k, err)
	return k, err
}

// adoptError is err, a failure of Adopt's round (whose text names the
// key), said once: "dlock: adopt: " and err's text without its own "dlock:
// " (it still matches what err matches).
func adoptError(err error) error {
	return &prefixedError{msg: "dlock: adopt: " + strings.TrimPrefix(err.Error(), "dlock: "), err: err}
}

// prefixedError is err with another text.
type prefixedError struct {
	msg string
	err error
}

func (e *prefixedError) Error() string { return e.msg }
func (e *prefixedError) Unwrap() error { return e.err }

// checkToken reports a token that no Lock of dlock can have (an empty one:
// the Handoff of a lock released before Detach, with nothing to adopt).
func checkToken(token string) error {
	if token == "" {
		return invalid("an empty token: want 32 lowercase hex characters (Lock.Token's; a Handoff of a lock released before Detach has none: there is nothing to adopt)")
	}
	if len(token) != 32 {
		return invalid("token %q: want 32 lowercase hex characters (Lock.Token's), got %d characters", token, len(token))
	}
	for _, c := range []byte(token) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return invalid("token %q: want 32 lowercase hex characters (Lock.Token's)", token)
		}
	}
	return nil
}

// classOf is the class of Adopt's error for the hook's EventAttempt.
func classOf(err error) error {
	for _, c := range []error{ErrNotHeld, ErrUnavailable, ErrMisconfigured, ErrClosed} {
		if err != nil && errors.Is(err, c) {
			return c
		}
	}
	return err
}

// adopt runs Adopt's round and, on a quorum, starts the lock.
func (l *Locker) adopt(ctx context.Context, key, token string, cfg lockConfig) (*Lock, error) {
	if !l.join(&l.calls) {
		return nil, fmt.Errorf("%w: adopt %q", ErrClosed, key)
	}
	defer l.calls.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: adopt %q: %w", ErrUnavailable, key, err)
	}
	var leaseBuf [8]nodeLease
	k := l.newLock(key, l.names(key), token, 0, cfg, perNode(leaseBuf[:], len(l.nodes)))
	k.opsBusy = true // not shared yet: the round below is its first
	start := time.Now()
	results, missing, reply, agreed, otherShape, recorded := k.adoptFanout(ctx, cfg.ttl, l.nodeTimeout(cfg.ttl))
	k.fence, k.metadata = reply.Fence, reply.Metadata
	if agreed && reply.Limit != limitArg(k.limit, k.shared) {
		// SetLimit moved the semaphore's limit: the permit is one of the
		// new limit, renewed with its quorum.
		k.limit, _ = strconv.Atoi(reply.Limit)
		k.quorum = l.quorumFor(k.limit)
	}
	// Unless a quorum refused it (the hold is gone), a failed Adopt leaves
	// the hold alone: it may be live, and another Adopt of its token (a
	// retry) may take it on, whose hold a clean-up of this one would end.
	// So does one that a node refused for its shape: the token may hold
	// the key there in another, and so be live.
	o := l.ownerChecked(key, results, missing, k.quorum)
	k.mu.Lock()
	k.keep = o.class(ErrNotHeld) != ErrNotHeld || otherShape
	k.mu.Unlock()
	free, err := k.settleRound(cfg.ttl, start, results, missing, func() { close(recorded) })
	k.giveOps()
	if err != nil {
		return nil, adoptError(err)
	}
	if !agreed {
		// A quorum holds the token, but no quorum tells one fence: the
		// nodes that kept the grant's are gone (restarted empty, or down).
		// The hold is not adopted.
		err := fmt.Errorf("%w: adopt %q: no quorum of nodes agrees on the hold's fence", ErrUnavailable, key)
		k.markLost(err)
		return nil, err
	}
	k.mu.Lock()
	k.keep = false // adopted: its end cleans up as any lock's
	k.mu.Unlock()
	if !k.start(start) {
		k.release(context.Background())
		return nil, fmt.Errorf("%w: adopt %q", ErrClosed, key)
	}
	if len(free) > 0 {
		if k.takeOps(ctx) == nil {
			k.regain(ctx, cfg.ttl, l.nodeTimeout(cfg.ttl), free)
			k.giveOps()
		}
	}
	return k, nil
}

// adoptFanout runs adopt.lua on every node, as an extend round (see
// fanout), deciding as soon as a quorum confirmed with one fence, or
// cannot. reply is that of a node of that quorum (agreed), or, when no
// quorum agrees, the zero reply. Why a quorum that agrees: an
// acquisition's fence is the one that a quorum of nodes issued or were
// raised to (see claimFences), and those nodes keep it while the hold lasts
// (a counter only goes up, and only a grant, impossible while the key is
// held, moves it past the holder's fence); the other nodes may tell a
// larger one (they granted late) or a smaller one (a raise that failed),
// but never a quorum of them. The answers that come after the round are
// recorded once the caller closes recorded.
func (k *Lock) adoptFanout(ctx context.Context, ttl, timeout time.Duration) (_ []quorum.Result[int64], _ []quorum.Missing, _ script.AdoptReply, agreed, otherShape bool, _ chan struct{}) {
	l := k.l
	recorded := make(chan struct{})
	args := script.AdoptArgs{Token: k.tokenArg, TTL: l.ttlArg(ttl), Retention: l.retentionArg, Limit: limitArg(k.limit, k.shared)}
	cmd := args.Command(k.names.AdoptKeys())
	rs, missing := quorum.Fanout(ctx, l.nodes, timeout,
		quorum.RunFunc[script.AdoptReply](func(ctx context.Context, _ int, c node.Conn) (script.AdoptReply, error) {
			v, err := l.runScript(ctx, c, timeout, script.Adopt, cmd)
			if err != nil {
				return script.AdoptReply{}, err
			}
			return script.ParseAdopt(v)
		}),
		func(rs []quorum.Result[script.AdoptReply], suspects int) bool {
			// A quorum that agrees decides; short of one, every node that
			// is answering is waited for (within the round's timeout), so
			// that a refusal (another shape, a token that does not hold
			// the key) leaves no node unanswered, to be cleaned up: a failed
			// Adopt must not end a hold that is still live where it runs.
			_, ok := k.adoptAgreed(rs)
			return ok || quorum.AllAnswering(rs, suspects, len(l.nodes))
		},
		quorum.LateFunc[script.AdoptReply](func(r quorum.Result[script.AdoptReply]) {
			<-recorded
			k.lateAnswer(r.Node, l.effectOf(r.Node, r.Err, r.Val.Held == 1, false))
		}))
	reply, agreed := k.adoptAgreed(rs)
	results := make([]quorum.Result[int64], len(rs))
	for i, r := range rs {
		results[i] = quorum.Result[int64]{Node: r.Node, Val: r.Val.Held, Err: r.Err}
		otherShape = otherShape || r.Err == nil && r.Val.OtherShape
	}
	return results, missing, reply, agreed, otherShape, recorded
}

// adoptAgreed returns the reply of adopt.lua on which enough nodes agree,
// and whether there is one: one fence, told by as many nodes as a permit of
// the largest limit they tell needs (the limit asked, or one that SetLimit
// moved it to, which may not have reached every node: the adopted permit
// then takes the larger quorum), with that limit.
func (k *Lock) adoptAgreed(rs []quorum.Result[script.AdoptReply]) (script.AdoptReply, bool) {
	type agreement struct {
		n     int
		reply script.AdoptReply
		need  int
	}
	byFence := make(map[uint64]*agreement, len(rs))
	for _, r := range rs {
		if r.Err != nil || r.Val.Held != 1 {
			continue
		}
		a := byFence[r.Val.Fence]
		if a == nil {
			a = &agreement{reply: r.Val, need: k.quorum}
			byFence[r.Val.Fence] = a
		}
		a.n++
		if lim, err := strconv.Atoi(r.Val.Limit); err == nil && k.l.quorumFor(lim) > a.need {
			a.need, a.reply = k.l.quorumFor(lim), r.Val
		}
	}
	for _, a := range byFence {
		if a.n >= a.need {
			return a.reply, true
		}
	}
	return script.AdoptReply{}, false
}
