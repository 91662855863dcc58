package dlock

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// RequestLeadership asks the leader of the election key to hand the
// leadership to this Locker: its Campaign for key that waits (started
// before, on another goroutine) is put first among the waiting candidates
// on every node where it is registered, then the leader is asked as by
// RequestRelease(ctx, key, reason). When the leader resigns (Release), that
// Campaign is served first; the leader decides whether and when, and may
// never resign. It works the same for an exclusive Acquire of key that
// waits (the first to take the lock when its holder lets go).
//
// It returns an error wrapping ErrInvalid when no Campaign (or exclusive
// Acquire) of this Locker is registered as waiting for key on any node (it
// leads already, has not registered yet, or has ended), for an empty key or
// a reason over MaxMetadata bytes; otherwise what RequestRelease returns (a
// vacant leadership is ErrNotHeld: the Campaign takes it without help). If
// fewer than a quorum of nodes (N/2+1) answered the move, it returns an
// error wrapping ErrUnavailable (or ErrMisconfigured) with each node's
// failure, and asks no one. Its cost: one command per node to
// move the candidate, and RequestRelease's.
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
	member := ""
	if ks != nil {
		ks.mu.Lock()
		member = ks.member
		ks.mu.Unlock()
	}
	notWaiting := invalid("RequestLeadership(%q): no Campaign of this Locker waits for it", key)
	if member == "" {
		return notWaiting
	}
	args := script.PreferCommand([]any{ks.names.Waiters()}, member)
	n := len(l.nodes)
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[string](func(ctx context.Context, _ int, c node.Conn) (string, error) {
			v, err := runOn(ctx, c, script.Prefer, args)
			if err != nil {
				return "", err
			}
			pos, _ := v.(string) // 0: not registered there
			return pos, nil
		}),
		func(rs []quorum.Result[string], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
	o := l.newOutcome(key, l.quorum)
	moved := 0
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
		case r.Val != "":
			ks.moved(r.Node, member, r.Val)
			moved++
			o.confirmed()
		default:
			o.confirmed()
		}
	}
	o.missed(l, missing)
	o.decided(ctx.Err() != nil)
	if class := o.class(ErrUnavailable); class != nil {
		return o.wrap(class, fmt.Sprintf("leadership request for %q: too few nodes answered%s", key, o.counts("answered")))
	}
	if moved == 0 {
		return notWaiting
	}
	return l.RequestRelease(ctx, key, reason)
}
