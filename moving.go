package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/node"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// A Cluster slot on the move (a live migration: CLUSTER SETSLOT …
// MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE; or a failover) answers a
// script whose keys are half moved with TRYAGAIN, and one whose keys have
// all left with ASK, then MOVED once the slot has moved. go-redis' Cluster
// client follows ASK and MOVED, and tries TRYAGAIN again, a few times
// (MaxRedirects); past those the reply reaches dlock. It is transient: a
// migration moves a lock's few keys within milliseconds.

// slotMoving reports whether err is a Cluster node's MOVED or ASK that
// node i's Cluster client gave up following (after MaxRedirects): the
// key's slot is moving between masters, and a later try reaches its new
// master. The same reply to a plain client (a Cluster node behind a plain
// URL) is for good: it cannot follow it.
func (l *Locker) slotMoving(i int, err error) bool {
	return l.nodes[i].Cluster && quorum.IsReply(err) &&
		(node.HasErrorPrefix(err, "MOVED") || node.HasErrorPrefix(err, "ASK"))
}

// slotMovingError is a MOVED or ASK of a slot on the move (slotMoving):
// transient, ErrUnavailable. It is not an error reply of Redis, so that it
// counts as transient.
type slotMovingError struct{ reply error }

func (e *slotMovingError) Error() string {
	return "the key's slot is moving between the Cluster's masters (" + e.reply.Error() + "): a later try reaches its new master"
}

// whileSlotMoves runs fn, a command on node i that Redis did not run when
// it answers TRYAGAIN, MOVED or ASK, again while its key's slot is on the
// move, until ctx ends (a Release, which no caller's loop tries again, and
// which would otherwise leave the key held until its TTL).
func (l *Locker) whileSlotMoves(ctx context.Context, i int, fn func() (int64, error)) (int64, error) {
	wait := 5 * time.Millisecond
	for {
		v, err := fn()
		if err == nil || !l.nodes[i].Cluster || !(node.HasErrorPrefix(err, "TRYAGAIN") || l.slotMoving(i, err)) {
			return v, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
