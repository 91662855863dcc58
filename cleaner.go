package dlock

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/dlock-dev/dlock/internal/cleanup"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// The background clean-up of each node is an internal/cleanup.Cleaner (its
// package documentation says why and how); the Locker gives it the release
// (cleanRelease) and the lifetimes (spawn, isClosed, bg).

// newCleaner returns the cleaner of node i.
func (l *Locker) newCleaner(i int) *cleanup.Cleaner {
	return cleanup.New(cleanup.Config{
		Release: l.cleanRelease(i),
		Spawn:   l.spawn,
		Closing: l.isClosed,
		Done:    l.bg,
		MaxJobs: maxCleanups,
	})
}

// clean has the key of token cleaned up on node i, burying the token if
// bury is set (a command of it may still run), not before at, waking a
// waiter if wake is set or the Locker has one node. It does not block.
func (l *Locker) clean(i int, nm *keys.Names, token string, ttl time.Duration, bury bool, at time.Time, wake bool) {
	l.cleaners[i].Add(&cleanup.Job{Names: nm, Expected: token, TTL: ttl, Passes: 1, Bury: bury, At: at, Wake: wake || len(l.nodes) == 1})
}

// leave has the waiter member removed from node i's waiting set, and a
// reservation made for it handed on to the next waiter, with passes
// answered releases (1 where the registration is known, 2 where an attempt
// that may write it went unanswered: the second, sent after the first was
// answered, removes what a frozen node wrote when it resumed). A
// registration written later still (an attempt held up in the network)
// does not stall the queue: a release passes over a waiter whose wake-up
// nobody hears, its Locker hands on one it hears for a waiter that left
// (see Locker.deliver), and the registration's lease runs out.
func (l *Locker) leave(i int, nm *keys.Names, member string, passes int) {
	l.cleaners[i].Add(&cleanup.Job{Names: nm, Expected: "~" + member, Leaving: member, Passes: passes, At: time.Now(), Wake: true})
}

// closingTimeout bounds a clean-up release while the Locker is closing.
const closingTimeout = 200 * time.Millisecond

// cleanRelease is the release of node i's cleaner: one release of the job
// on the node. It reports whether the node ran it (an error reply counts as
// no pass: a loading or busy server read the command but deleted nothing),
// and whether the job must be dropped: the client was closed, or the node
// refused the command for good (a permission), so that no later try can
// do better.
func (l *Locker) cleanRelease(i int) func(j *cleanup.Job, wake, bury bool) (answered, drop bool) {
	return func(j *cleanup.Job, wake, bury bool) (answered, drop bool) {
		timeout := maxNodeTimeout
		if j.TTL > 0 {
			timeout = max(l.nodeTimeout(j.TTL), 100*time.Millisecond)
		}
		if l.isClosed() {
			// Close waits for this: a node that answers answers in
			// milliseconds, and one that does not (frozen) must not hold
			// Close for a whole node timeout.
			timeout = min(timeout, closingTimeout)
		}
		// Call bounds it by timeout; l.bg ends it at Close. (No deadline of
		// its own: the call can then run inline, through the node's
		// batcher, after every command sent through it before.)
		_, err, ok, _ := quorum.Call(l.bg, l.nodes[i], timeout, func(ctx context.Context, rc node.Conn) (int64, error) {
			return l.runRelease(ctx, i, rc, j.Names, j.Expected, j.Leaving, wake, anyShape, bury, nil)
		}, nil)
		return ok && err == nil, errors.Is(err, node.ErrClosed) || permanent(err) && !l.slotMoving(i, err)
	}
}

// mayHaveRun reports whether a command that failed with err on node n may
// have run, or may still run. Not when Redis answered with an error (the
// scripts write nothing before a step that can fail). Not when the command
// was never sent (no connection could be made, the pool was exhausted, the
// client was closed), which only the last try of a client that retries can
// tell: an earlier try may have been sent, and time out, so with retries
// every other failure counts.
func mayHaveRun(n *quorum.Node, err error) bool {
	if quorum.IsReply(err) {
		return false
	}
	if !n.NoRetries {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return !errors.Is(err, node.ErrClosed) && err.Error() != "redis: connection pool timeout"
}
