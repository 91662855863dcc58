// Package cleanup runs, for one node, the background clean-up of a Locker:
// it deletes the keys of dead tokens, the token of a failed attempt or of a
// lock that was released or lost. Such a key is left behind when a
// command's answer was missed: a node that did not answer in time (frozen,
// partitioned, slow) may have run an acquisition or a renewal, or may still
// run it when it resumes, and would then hold the key for a whole TTL with
// nobody to release it. It also removes the registrations of waiters that
// gave up (and hands on a reservation made for them), which an unanswered
// attempt may likewise write late.
//
// A command whose answer was missed may reach the node at any time: a frozen
// node runs it when it resumes, and bytes held up in the network on its own
// connection (a TCP retransmission, a stalled middlebox) arrive after
// commands sent later on other connections, even after go-redis closed that
// connection. So a release cannot be ordered after it. Instead, the release
// that cleans up after such a command also buries the dead token: it writes
// a tombstone (prefix{K}:dead, for an hour) that makes the acquisition and
// regain scripts refuse that token and write nothing. If the missed command
// ran before the release, the release deletes what it set; if it runs
// after, it is refused. One answered release is then enough, as it is after
// a command whose answer arrived. While the node does not answer, the
// cleaner tries again with a capped backoff (50ms to 1s), for as long as the
// Locker is open: a frozen node may resume at any time and run what it
// holds. The caller never waits for it.
//
// The release (given by the Locker: release.lua) only deletes a key that
// still holds the dead token, so a cleaner never touches another owner's
// lock, and it wakes the next waiter on one Redis as a release does.
package cleanup

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// A Job is one dead token, or one waiter that left, to clean on a node.
type Job struct {
	Names *keys.Names
	// Expected is the value to delete: a dead token, or "~MEMBER", the
	// reservation of a waiter that left. It names the job.
	Expected string
	// Leaving is the waiter to remove from the waiting set, or "".
	Leaving string
	TTL     time.Duration // the lock's TTL; 0 for a waiter
	Passes  int           // answered releases still needed
	// Bury: a command of the dead token may still run; the release leaves
	// a tombstone that refuses it (see release.lua).
	Bury bool
	At   time.Time // not before: a lost lock's holder keeps its time
	// Wake: a key this release deletes may be timing the wait of sleeping
	// waiters (it was left behind, or set late): wake the next one. Not
	// for the grants of a split vote on a quorum, cleaned up at once: the
	// release that freed the lock woke a waiter already, and more would
	// only collide.
	Wake  bool
	added uint64 // order of arrival, to drop the oldest when full
	sent  bool   // a release of it was sent (see Cancel)
}

// Config is what a Cleaner needs of its Locker.
type Config struct {
	// Release runs one release of j on the node, with wake and bury as
	// they are when it is sent. It reports whether the node ran it, and
	// whether the job must be dropped (no later try can do better).
	Release func(j *Job, wake, bury bool) (answered, drop bool)
	// Spawn runs fn on a goroutine that the Locker's Close waits for.
	Spawn func(fn func())
	// Closing reports whether the Locker's Close has begun.
	Closing func() bool
	// Done ends when Close ends: the cleaner stops.
	Done context.Context
	// MaxJobs bounds the jobs waiting for a node that does not answer:
	// beyond it the oldest are dropped.
	MaxJobs int
}

// A Cleaner runs the clean-up jobs of one node, one at a time, the oldest
// due first, on a goroutine of its own while it has jobs.
type Cleaner struct {
	cfg Config

	mu      sync.Mutex
	jobs    map[string]*Job // by Expected
	running bool
	// current is the job whose release is under way, if any; done, made
	// by a Cancel that waits for it, is closed when that release returns.
	current *Job
	done    chan struct{}
	seq     uint64 // the last job's added
	// While Close waits for the cleaner (see Settle): settled is closed
	// once it need not wait any more, and unanswered records that a
	// release went unanswered since Close began.
	settled    chan struct{}
	unanswered bool
	// kick cuts a backoff or a wait short when a job is added.
	kick chan struct{}
}

// New returns a Cleaner with no jobs.
func New(cfg Config) *Cleaner {
	return &Cleaner{cfg: cfg, jobs: make(map[string]*Job), kick: make(chan struct{}, 1)}
}

// Add adds job, or merges it into the job with the same Expected (the most
// passes, wake or bury if either asks, the earlier time), and starts the
// cleaner if it is not running and the Locker is not done. It does not
// block.
func (c *Cleaner) Add(job *Job) {
	c.mu.Lock()
	passes, at, wake, bury := job.Passes, job.At, job.Wake, job.Bury
	if j := c.jobs[job.Expected]; j != nil {
		j.Passes = max(j.Passes, passes)
		j.Wake = j.Wake || wake
		j.Bury = j.Bury || bury
		if at.Before(j.At) {
			j.At = at
		}
	} else {
		if len(c.jobs) >= c.cfg.MaxJobs {
			c.dropOldest()
		}
		c.seq++
		job.added = c.seq
		c.jobs[job.Expected] = job
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	start := !c.running && c.cfg.Done.Err() == nil
	if start {
		c.running = true
	}
	c.mu.Unlock()
	if start {
		c.cfg.Spawn(c.run)
	}
}

// Cancel drops the job named expected, if there is one, and waits for its
// release if one is under way, so that once it returns the cleaner sends
// nothing more for it (the token was handed to another process: see the
// root package's Detach). It reports whether a release of the job was sent
// before (answered or not: one unanswered may still run).
func (c *Cleaner) Cancel(expected string) (sent bool) {
	c.mu.Lock()
	if j := c.jobs[expected]; j != nil {
		sent = j.sent
	}
	delete(c.jobs, expected)
	for c.current != nil && c.current.Expected == expected {
		if c.done == nil {
			c.done = make(chan struct{})
		}
		done := c.done
		c.mu.Unlock()
		<-done
		c.mu.Lock()
		sent = true
	}
	c.notifySettled()
	c.mu.Unlock()
	return sent
}

// Idle reports whether the cleaner has no job and is not running.
func (c *Cleaner) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.jobs) == 0 && !c.running
}

// dropOldest drops the oldest job; c.mu is held.
func (c *Cleaner) dropOldest() {
	var oldest *Job
	for _, j := range c.jobs {
		if oldest == nil || j.added < oldest.added {
			oldest = j
		}
	}
	delete(c.jobs, oldest.Expected)
}

// next returns the due job that arrived first, or how long until one is
// due; ok is false when there is no job left.
func (c *Cleaner) next() (j *Job, wait time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	wait = time.Hour
	closing := c.cfg.Closing()
	for _, cj := range c.jobs {
		switch d := cj.At.Sub(now); {
		case d > 0 && closing:
			// Not due before Close ends: the key it is for expires after
			// its TTL (see Locker.Close).
			delete(c.jobs, cj.Expected)
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

// run is the cleaner's loop: the oldest due job, released once; a job
// is done after its passes of answered releases (or dropped); while the
// node does not answer, it waits a capped backoff (50ms to 1s) or a kick.
// It ends when no job is left, or when Done ends.
func (c *Cleaner) run() {
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
		if c.jobs[j.Expected] != j {
			c.mu.Unlock() // cancelled meanwhile
			continue
		}
		wake, bury := j.Wake, j.Bury // merges change them under c.mu
		c.current, j.sent = j, true
		c.mu.Unlock()
		answered, drop := c.cfg.Release(j, wake, bury)
		c.mu.Lock()
		c.current = nil
		if c.done != nil {
			close(c.done)
			c.done = nil
		}
		if answered {
			backoff = 0
			j.Passes--
		}
		if (j.Passes <= 0 || drop) && c.jobs[j.Expected] == j {
			delete(c.jobs, j.Expected)
		}
		if !answered && c.cfg.Closing() {
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
		if c.cfg.Done.Err() != nil {
			c.stop()
			return
		}
	}
}

// sleep waits d, or until the Locker is done (then it reports false and
// the cleaner stops).
func (c *Cleaner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.kick:
		return true
	case <-c.cfg.Done.Done():
		c.stop()
		return false
	}
}

func (c *Cleaner) stop() {
	c.mu.Lock()
	c.setStopped()
	c.mu.Unlock()
}

// setStopped records that the cleaner stopped running; c.mu is held.
func (c *Cleaner) setStopped() {
	c.running = false
	c.notifySettled()
}

// Settle waits, for Close, until the cleaner has run every job that is due
// (removals of the registrations of waiters that left, releases and
// tombstones after unanswered commands), or stopped, or a release went
// unanswered since Close began (the node is not answering: waiting longer
// would not help).
func (c *Cleaner) Settle() {
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
func (c *Cleaner) isSettled() bool {
	if !c.running || c.unanswered {
		return true
	}
	now := time.Now()
	for _, j := range c.jobs {
		if !j.At.After(now) {
			return false
		}
	}
	return true
}

// notifySettled wakes Settle when it need not wait any more; c.mu is held.
func (c *Cleaner) notifySettled() {
	if c.settled != nil && c.isSettled() {
		close(c.settled)
		c.settled = nil
	}
}
