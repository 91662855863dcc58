package dlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// RequestLeadership asks the leader of the election key to hand the
// leadership to this Locker: its Campaign for key that waits (started
// before, on another goroutine) is put first among the waiting candidates
// on every node that answers, then the leader is asked as by
// RequestRelease(ctx, key, reason). When the leader resigns (Release), that
// Campaign is woken first; the leader decides whether and when, and may
// never resign. It works the same for an exclusive Acquire of key that
// waits (the first to take the lock when its holder lets go).
//
// A Campaign registers as a candidate on each node with its first attempt
// that finds the leadership taken. Where that registration has not landed
// yet (its attempt is on its way), RequestLeadership waits for it, and
// moves it when it comes: until it is first on every node that answered,
// ctx ends, the Campaign ends, or three node timeouts (WithNodeTimeout)
// passed. It asks the leader only once the Campaign is first on a quorum
// of nodes (N/2+1; every node on one Redis). On one Redis a release keeps
// the lock for the first candidate a moment; on a Redlock it reserves
// nothing (each node would pick its own candidate), so a Campaign that is
// not first on every node, or that does not attempt within 50 ms of its
// wake-up, may see another candidate take the leadership first.
//
// It returns an error wrapping ErrInvalid when no Campaign (or exclusive
// Acquire) of this Locker waits for key (it leads already, has not
// started, or has ended), when its registration did not reach a quorum in
// that time (also wrapping ctx's error if ctx ended; it may stand first on
// the nodes it reached), for an empty key or a reason over MaxMetadata
// bytes; otherwise what RequestRelease returns (a vacant leadership is
// ErrNotHeld: the Campaign takes it without help). If fewer than a quorum
// of nodes answered the move, it returns an error wrapping ErrUnavailable
// (or ErrMisconfigured) with each node's failure, and asks no one. Its
// cost: one command per node to move the candidate (again on the nodes it
// was missing from, at each registration that lands meanwhile), and
// RequestRelease's.
func (l *Locker) RequestLeadership(ctx context.Context, key, reason string) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if len(reason) > MaxMetadata {
		return invalid("a release request's reason of %d bytes: at most MaxMetadata (%d)", len(reason), MaxMetadata)
	}
	l.mu.Lock()
	ks := l.keys[waitSlot{key: key}]
	l.mu.Unlock()
	notWaiting := invalid("RequestLeadership(%q): no Campaign of this Locker waits for it", key)
	if ks == nil {
		return notWaiting
	}
	n := len(l.nodes)
	limit := time.NewTimer(3 * l.nodeTimeout(DefaultTTL))
	defer limit.Stop()
	// first[i] is the queue position of the member on node i once it was
	// put first there ("": not yet).
	first := make([]string, n)
	moved, member := 0, ""
	for {
		m, changed := ks.watch()
		if changed == nil {
			return notWaiting
		}
		if m != member {
			// A new registration (the first, or the old one's member was
			// rotated): the moves made for the old member are gone with it.
			member, moved = m, 0
			clear(first)
		}
		missing := n
		if member != "" {
			got, absent, err := l.prefer(ctx, ks, member, first)
			if err != nil {
				return err
			}
			moved, missing = moved+got, absent
		}
		if moved >= l.quorum && missing == 0 {
			return l.RequestRelease(ctx, key, reason)
		}
		select {
		case <-changed:
			continue
		case <-limit.C:
			if moved >= l.quorum {
				return l.RequestRelease(ctx, key, reason)
			}
		case <-ctx.Done():
		case <-l.done:
			return closedErr(key)
		}
		what := fmt.Sprintf("RequestLeadership(%q): its Campaign is first on %d of %d nodes (a quorum is %d; not yet registered on %d): the leader was not asked", key, moved, n, l.quorum, missing)
		if moved == 0 {
			what = fmt.Sprintf("RequestLeadership(%q): its Campaign is registered on no node yet: the leader was not asked", key)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalid, what, ctx.Err())
		}
		return invalid("%s", what)
	}
}

// prefer puts member first in the waiting queue of ks's key on each node
// where it is not yet (first[i] == ""), and registered; it records the
// positions in first and in ks (see keyState.moved), and returns how many
// nodes moved it now, and how many answered that it is not registered
// there. It fails, with each node's failure, when fewer than a quorum of
// nodes answered.
func (l *Locker) prefer(ctx context.Context, ks *keyState, member string, first []string) (moved, absent int, err error) {
	args := script.PreferCommand([]any{ks.names.Waiters()}, member)
	n := len(l.nodes)
	done := slices.Clone(first) // read by the calls, which may outlive Fanout
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[string](func(ctx context.Context, i int, c node.Conn) (string, error) {
			if done[i] != "" {
				return done[i], nil // moved there already
			}
			v, err := runOn(ctx, c, script.Prefer, args)
			if err != nil {
				return "", err
			}
			pos, _ := v.(string) // 0: not registered there
			return pos, nil
		}),
		func(rs []quorum.Result[string], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
	o := l.newOutcome(ks.key, l.quorum)
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
			continue
		case r.Val == "":
			absent++
		case first[r.Node] == "":
			ks.moved(r.Node, member, r.Val)
			first[r.Node] = r.Val
			moved++
		}
		o.confirmed()
	}
	o.missed(l, missing)
	o.decided(ctx.Err() != nil)
	if class := o.class(ErrUnavailable); class != nil {
		return moved, absent, o.wrap(class, fmt.Sprintf("leadership request for %q: too few nodes answered%s", ks.key, o.counts("answered")))
	}
	return moved, absent, nil
}
