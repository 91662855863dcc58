package dlock

import (
	"context"
	"fmt"
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
// A Campaign registers as a candidate on each node once it waits: after an
// attempt found the leadership taken, where its Locker's inbox is
// subscribed. Where that registration has not landed yet (its attempt is
// on its way), RequestLeadership waits for it and moves it when it comes,
// until the Campaign is first on every node that answered, ctx ends, the
// Campaign ends, or three node timeouts (WithNodeTimeout) passed. It asks
// the leader once the Campaign is first on every node that answered and on
// a quorum (N/2+1; every node on one Redis), or, after the three node
// timeouts, on a quorum. On one Redis a release keeps the lock for the
// first candidate a moment; on a Redlock it reserves nothing (each node
// would pick its own candidate), so a Campaign that is not first on every
// node, or that does not attempt within 50 ms of its wake-up, may see
// another candidate take the leadership first.
//
// It returns an error wrapping ErrInvalid when no Campaign (or exclusive
// Acquire) of this Locker waits for key (it leads already, has not started
// waiting, or has ended), when the Campaign was first on fewer than a
// quorum of nodes when the wait ended (it stays first on those), for an
// empty key or a reason over MaxMetadata bytes; otherwise what
// RequestRelease returns (a vacant leadership is ErrNotHeld: the Campaign
// takes it without help). If fewer than a quorum of nodes answered a move,
// it returns an error wrapping ErrUnavailable (or ErrMisconfigured) with
// each node's failure, and asks no one. When ctx ends while it waits, the
// error wraps ctx's error (and ErrInvalid if the Campaign is first on fewer
// than a quorum); when the Locker is closed, ErrClosed. Its cost: one
// command per node to move the candidate (again on the nodes it was
// missing from, at each registration that lands meanwhile), and
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
	wait := 3 * l.nodeTimeout(DefaultTTL)
	deadline := time.Now().Add(wait)
	limit := time.NewTimer(time.Until(deadline))
	defer limit.Stop()
	// first[i] is the queue position of the registration on node i once it
	// was put first there ("": not yet).
	first := make([]string, n)
	moved, member, resets := 0, "", uint64(0)
	for {
		m, r, changed := ks.watch()
		if changed == nil {
			return notWaiting
		}
		if m != member || r != resets {
			// A new registration (the first; or the old one was forgotten,
			// the Campaign took the lock): the old one's moves are gone.
			member, resets, moved = m, r, 0
			clear(first)
		}
		missing := n - moved
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
			if time.Now().Before(deadline) {
				continue
			}
		case <-limit.C:
		case <-ctx.Done():
			what := fmt.Sprintf("RequestLeadership(%q): its Campaign is first on %d of %d nodes: the leader was not asked", key, moved, n)
			if moved < l.quorum {
				return fmt.Errorf("%w: %s: %w", ErrInvalid, what, ctx.Err())
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-l.done:
			return fmt.Errorf("%w: RequestLeadership(%q)", ErrClosed, key)
		}
		if moved >= l.quorum {
			return l.RequestRelease(ctx, key, reason)
		}
		return invalid("RequestLeadership(%q): its Campaign is first on %d of %d nodes, fewer than a quorum (%d), after %v: the leader was not asked",
			key, moved, n, l.quorum, wait)
	}
}

// prefer puts member first in the waiting queue of ks's key on each node
// where it is not yet (first[i] == ""), and registered; it records the
// positions in first and in ks (see keyState.moved), and returns how many
// nodes moved it now, and how many answered that it is not registered
// there. The nodes where it is first already are not asked again (and
// count as answering). It fails, with each node's failure, when fewer than
// a quorum of nodes answered.
func (l *Locker) prefer(ctx context.Context, ks *keyState, member string, first []string) (moved, absent int, err error) {
	args := script.PreferCommand([]any{ks.names.Waiters()}, member)
	o := l.newOutcome(ks.key, l.quorum)
	// The nodes to ask, and their indices in l.nodes.
	asked := make([]*quorum.Node, 0, len(l.nodes))
	index := make([]int, 0, len(l.nodes))
	for i, nd := range l.nodes {
		if first[i] != "" {
			o.confirmed()
			continue
		}
		asked = append(asked, nd)
		index = append(index, i)
	}
	if len(asked) == 0 {
		return 0, 0, nil
	}
	results, missing := quorum.Fanout(ctx, asked, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[string](func(ctx context.Context, _ int, c node.Conn) (string, error) {
			v, err := runOn(ctx, c, script.Prefer, args)
			if err != nil {
				return "", err
			}
			pos, _ := v.(string) // 0: not registered there
			return pos, nil
		}),
		func(rs []quorum.Result[string], suspects int) bool {
			return quorum.AllAnswering(rs, suspects, len(asked))
		}, nil)
	for _, r := range results {
		i := index[r.Node]
		switch {
		case r.Err != nil:
			o.failed(l, i, r.Err)
			continue
		case r.Val == "":
			absent++
		default:
			ks.moved(i, member, r.Val)
			first[i] = r.Val
			moved++
		}
		o.confirmed()
	}
	for _, m := range missing {
		o.failed(l, index[m.Node], m.Err)
	}
	o.decided(ctx.Err() != nil)
	if class := o.class(ErrUnavailable); class != nil {
		return moved, absent, o.wrap(class, fmt.Sprintf("leadership request for %q: too few nodes answered%s", ks.key, o.counts("answered")))
	}
	return moved, absent, nil
}
