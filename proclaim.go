package dlock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// Proclaim changes the value of a leadership (a *Lock that Campaign
// returned) without a new election: the term (Fence) stays, Leader reports
// the new value, observers (Observe) receive the leader with it, and
// Metadata returns it. value follows Campaign's rules (not empty, at most
// MaxMetadata bytes). It costs one command per node, and one PUBLISH per
// node for the observers.
//
// The value is set on each node only while the node's lock holds this
// leadership's token (proclaim.lua checks it and writes in one step): a
// Proclaim whose reply was lost, or that reaches a node late, after the
// leadership ended there, never sets the value of another leader. It
// waits for a renewal under way, and the renewals after it write the new
// value.
//
// It returns nil once a quorum of nodes holds the new value. It returns an
// error wrapping ErrNotHeld when the leadership ended (resigned, or lost:
// then nothing is sent) or a quorum of nodes no longer holds it;
// ErrInvalid for a lock that is not a leadership, or an invalid value;
// ErrUnavailable (or ErrMisconfigured) when too few nodes answered; the
// ctx's error when it ended while a renewal was under way. On failure the
// leader's value is the previous one, as Metadata returns: nodes that took
// the new one meanwhile are set back by the next renewal, and observers
// are not told.
func (k *Lock) Proclaim(ctx context.Context, value string) error {
	switch {
	case k.election == nil:
		return invalid("proclaim %q: the lock is not a leadership (Campaign)", k.key)
	case value == "":
		return invalid("a leader's value must not be empty")
	case len(value) > MaxMetadata:
		return invalid("a leader's value of %d bytes is longer than %d", len(value), MaxMetadata)
	}
	if err := k.takeOps(ctx); err != nil {
		return fmt.Errorf("%w: proclaim %q: %w", ErrNotHeld, k.key, err)
	}
	defer k.giveOps()
	if !k.held() {
		return fmt.Errorf("%w: proclaim %q: the leadership ended", ErrNotHeld, k.key)
	}
	l := k.l
	args := script.ProclaimCommand(k.names.ProclaimKeys(), k.tokenArg, value)
	n := len(l.nodes)
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(k.TTL()),
		quorum.RunFunc[int64](func(ctx context.Context, _ int, c node.Conn) (int64, error) {
			v, err := l.runScript(ctx, c, l.nodeTimeout(k.TTL()), script.Proclaim, args)
			return script.IntReply("proclaim.lua", v, err)
		}),
		func(rs []quorum.Result[int64], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
	o := l.ownerChecked(k.key, results, missing, k.quorum)
	if class := o.class(ErrNotHeld); class != nil {
		return o.wrap(class, fmt.Sprintf("proclaim %q%s", k.key, o.counts("hold it")))
	}
	k.election.proclaimed(value)
	k.announceValue(value)
	return nil
}

// announceValue tells observers the leadership's new value ("P TERM TOKEN
// VALUE"), unless its vacancy was announced first: observers never hear
// of a value after the end of its term.
func (k *Lock) announceValue(value string) {
	e := k.election
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.vacated {
		k.l.announce(k.key, "P "+strconv.FormatUint(k.fence, 10)+" "+k.Token()+" "+value)
	}
}
