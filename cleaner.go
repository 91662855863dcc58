package dlock

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// A cleaner deletes, on one node, the keys of dead tokens: the token of a
// failed attempt, or of a lock that was released or lost. Such a key is left
// behind when a command's answer was missed: a node that did not answer in
// time (frozen, partitioned, slow) may have run an acquisition or a renewal,
// or may still run it when it resumes, and would then hold the key for a
// whole TTL with nobody to release it. It also removes the registrations of
// waiters that gave up (and hands on a reservation made for them), which an
// unanswered attempt may likewise write late.
//
// A command whose answer was missed may reach the node at any time: a frozen
// node runs it when it resumes, and bytes held up in the network on its own
// connection (a TCP retransmission, a stalled middlebox) arrive after
// commands sent later on other connections, even after go-redis closed that
// connection. So a release cannot be ordered after it. Instead, the release
// that cleans up after such a command also buries the dead token: it writes
// a tombstone (prefix{K}:dead, for buryFor) that makes the acquisition and
// regain scripts refuse that token and write nothing. If the missed command
// ran before the release, the release deletes what it set; if it runs
// after, it is refused. One answered release is then enough, as it is after
// a command whose answer arrived. While the node does not answer, the
// cleaner tries again with a capped backoff (50ms to 1s), for as long as the
// Locker is open: a frozen node may resume at any time and run what it
// holds. The caller never waits for it.
//
// The release only deletes a key that still holds the dead token, so a
// cleaner never touches another owner's lock, and it wakes the next waiter
// on one Redis as a release does.
type cleaner struct {
	l    *Locker
	node int

	mu      sync.Mutex
	jobs    map[string]*cleanup // by token
	running bool
	// While Close waits for the cleaner (see settle): settled is closed
	// once it need not wait any more, and unanswered records that a
	// release went unanswered since Close began.
	settled    chan struct{}
	unanswered bool
	// kick cuts a backoff short: an answer from the node came in, so it is
	// answering again.
	kick chan struct{}
}

// cleanup is one dead token, or one waiter that left, to clean on a
// cleaner's node.
type cleanup struct {
	nm *keys.Names
	// expected is the value to delete: a dead token, or "~MEMBER", the
	// reservation of a waiter that left. It names the job.
	expected string
	// leaving is the waiter to remove from the waiting set, or "".
	leaving string
	ttl     time.Duration // the lock's TTL; 0 for a waiter
	passes  int           // answered releases still needed
	// bury: a command of the dead token may still run; the release leaves
	// a tombstone that refuses it (see release.lua).
	bury  bool
	at    time.Time // not before: a lost lock's holder keeps its time
	added uint64    // order of arrival, to drop the oldest when full
	// wake: a key this release deletes may be timing the wait of sleeping
	// waiters (it was left behind, or set late): wake the next one. Not
	// for the grants of a split vote on a quorum, cleaned up at once: the
	// release that freed the lock woke a waiter already, and more would
	// only collide.
	wake bool
}

// clean has the key of token cleaned up on node i, burying the token if
// bury is set (a command of it may still run), not before at, waking a
// waiter if wake is set or the Locker has one node. It does not block.
func (l *Locker) clean(i int, nm *keys.Names, token string, ttl time.Duration, bury bool, at time.Time, wake bool) {
	l.addCleanup(i, &cleanup{nm: nm, expected: token, ttl: ttl, passes: 1, bury: bury, at: at, wake: wake || len(l.nodes) == 1})
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
	l.addCleanup(i, &cleanup{nm: nm, expected: "~" + member, leaving: member, passes: passes, at: time.Now(), wake: true})
}

func (l *Locker) addCleanup(i int, job *cleanup) {
	c := l.cleaners[i]
	c.mu.Lock()
	passes, at, wake, bury := job.passes, job.at, job.wake, job.bury
	if j := c.jobs[job.expected]; j != nil {
		j.passes = max(j.passes, passes)
		j.wake = j.wake || wake
		j.bury = j.bury || bury
		if at.Before(j.at) {
			j.at = at
		}
	} else {
		if len(c.jobs) >= maxCleanups {
			c.dropOldest()
		}
		job.added = l.seq.Add(1)
		c.jobs[job.expected] = job
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	start := !c.running && l.bg.Err() == nil
	if start {
		c.running = true
	}
	c.mu.Unlock()
	if start {
		l.spawn(c.run)
	}
}

// dropOldest drops the oldest job; c.mu is held.
func (c *cleaner) dropOldest() {
	var oldest *cleanup
	for _, j := range c.jobs {
		if oldest == nil || j.added < oldest.added {
			oldest = j
		}
	}
	delete(c.jobs, oldest.expected)
}

// next returns the due job that arrived first, or how long until one is
// due; ok is false when there is no job left.
func (c *cleaner) next() (j *cleanup, wait time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	wait = time.Hour
	closing := c.l.isClosed()
	for _, cj := range c.jobs {
		switch d := cj.at.Sub(now); {
		case d > 0 && closing:
			// Not due before Close ends: the key it is for expires after
			// its TTL (see Locker.Close).
			delete(c.jobs, cj.expected)
		case d > 0:
			wait = min(wait, d)
		case j == nil || cj.added < j.added:
			j = cj
		}
	}
	if j == nil && len(c.jobs) == 0 {
		c.setStopped()
		return nil, 0, false
	}
	return j, wait, true
}

func (c *cleaner) run() {
	l := c.l
	backoff := time.Duration(0)
	for {
		j, wait, ok := c.next()
		if !ok {
			return
		}
		if j == nil {
			if !c.sleep(wait) {
				return
			}
			continue
		}
		c.mu.Lock()
		wake, bury := j.wake, j.bury // merges change them under c.mu
		c.mu.Unlock()
		answered, drop := c.releaseOnce(j, wake, bury)
		c.mu.Lock()
		if answered {
			backoff = 0
			j.passes--
		}
		if (j.passes <= 0 || drop) && c.jobs[j.expected] == j {
			delete(c.jobs, j.expected)
		}
		if !answered && l.isClosed() {
			c.unanswered = true
		}
		c.notifySettled()
		c.mu.Unlock()
		if !answered && !drop {
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
			if !c.sleep(backoff) {
				return
			}
		}
		if l.bg.Err() != nil {
			c.stop()
			return
		}
	}
}

// sleep waits d, or until the Locker is closed (then it reports false and
// the cleaner stops).
func (c *cleaner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.kick:
		return true
	case <-c.l.bg.Done():
		c.stop()
		return false
	}
}

func (c *cleaner) stop() {
	c.mu.Lock()
	c.setStopped()
	c.mu.Unlock()
}

// setStopped records that the cleaner stopped running; c.mu is held.
func (c *cleaner) setStopped() {
	c.running = false
	c.notifySettled()
}

// closingTimeout bounds a clean-up release while the Locker is closing.
const closingTimeout = 200 * time.Millisecond

// settle waits, for Close, until the cleaner has run every job that is due
// (removals of the registrations of waiters that left, releases and
// tombstones after unanswered commands), or stopped, or a release went
// unanswered since Close began (the node is not answering: waiting longer
// would not help).
func (c *cleaner) settle() {
	c.mu.Lock()
	if c.isSettled() {
		c.mu.Unlock()
		return
	}
	if c.settled == nil {
		c.settled = make(chan struct{})
	}
	ch := c.settled
	c.mu.Unlock()
	<-ch
}

// isSettled reports whether Close need not wait for the cleaner; c.mu is
// held.
func (c *cleaner) isSettled() bool {
	if !c.running || c.unanswered {
		return true
	}
	now := time.Now()
	for _, j := range c.jobs {
		if !j.at.After(now) {
			return false
		}
	}
	return true
}

// notifySettled wakes settle when it need not wait any more; c.mu is held.
func (c *cleaner) notifySettled() {
	if c.settled != nil && c.isSettled() {
		close(c.settled)
		c.settled = nil
	}
}

// releaseOnce runs one release of the job on the node. It reports whether
// the node ran it (an error reply counts as no pass: a loading or busy
// server read the command but deleted nothing), and whether the job must be
// dropped: the client was closed, or the node refused the command for good
// (a permission), so that no later try can do better.
func (c *cleaner) releaseOnce(j *cleanup, wake, bury bool) (answered, drop bool) {
	l := c.l
	timeout := maxNodeTimeout
	if j.ttl > 0 {
		timeout = max(l.nodeTimeout(j.ttl), 100*time.Millisecond)
	}
	if l.isClosed() {
		// Close waits for this: a node that answers answers in
		// milliseconds, and one that does not (frozen) must not hold Close
		// for a whole node timeout.
		timeout = min(timeout, closingTimeout)
	}
	// Call bounds it by timeout; l.bg ends it at Close. (No deadline of its
	// own: the call can then run inline, through the node's batcher, after
	// every command sent through it before.)
	_, err, ok, _ := quorum.Call(l.bg, l.nodes[c.node], timeout, func(ctx context.Context, rc redis.UniversalClient) (int64, error) {
		return l.runRelease(ctx, c.node, rc, j.nm, j.expected, j.leaving, wake, true, bury)
	}, nil)
	return ok && err == nil, errors.Is(err, redis.ErrClosed) || permanent(err)
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
	return !errors.Is(err, redis.ErrClosed) && err.Error() != "redis: connection pool timeout"
}
