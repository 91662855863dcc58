package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-dev/dlock"
)

// DefaultKeyPrefix is put in front of a job's name to make the name of its
// lock, so that jobs do not share locks with other users of the same
// dlock.Locker: the job "report" is the dlock lock "gocron:report" (the
// Redis key "dlock:{gocron:report}" with dlock's default prefix).
const DefaultKeyPrefix = "gocron:"

// DefaultMinHold is how long a job's lock is held at least, counted from the
// acquisition, when WithMinHold is not given. See WithMinHold.
const DefaultMinHold = time.Second

// Option configures a Locker.
type Option func(*config)

type config struct {
	prefix   string
	minHold  time.Duration
	lockOpts []dlock.LockOption
}

// WithKeyPrefix sets the prefix put in front of a job's name to make the
// name of its lock (default DefaultKeyPrefix). Every instance that runs the
// same jobs must use the same prefix; different services sharing one Redis
// should use different ones.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithMinHold sets how long a job's lock is held at least, counted from its
// acquisition (default DefaultMinHold, 1s). When a run ends sooner, Unlock
// returns at once and the lock is released in the background once d has
// passed; it stays renewed meanwhile. d ≤ 0 releases the lock at Unlock.
//
// Why: gocron gives the Locker the job's name only, not the time the run was
// scheduled for, and every instance fires the same tick at its own moment
// (clock skew between hosts, scheduling delays). A run that ended and
// released its lock before a later instance fired the same tick would let
// that instance run the tick again. Holding the lock for d covers a skew of
// up to d.
//
// A lock held past Unlock does not block the next tick of the instance that
// holds it: its next Lock for the same job takes the held lock over (same
// fence; one Extend by the lock's TTL, so that the run has a whole lease
// even without auto-renewal), so d may be longer than the job's
// interval. Another instance skips the job while the lock is held; with d at
// least the interval, one instance keeps the job for as long as it fires it
// (which also gives "once per interval across the fleet" for DurationJobs
// whose instances started at different times). The price: when the
// instance that holds the lock stops firing the job without closing its
// dlock.Locker (the job was removed, the scheduler stopped, the process
// died), the other instances skip the job until d (the TTL, for a process
// that died) has passed. Closing the dlock.Locker releases held locks at
// once.
func WithMinHold(d time.Duration) Option {
	return func(c *config) { c.minHold = max(d, 0) }
}

// WithLockOptions passes options to every acquisition of a job's lock, for
// example dlock.WithTTL (how long other instances wait for the lock of an
// instance that died while running the job; the default TTL is 30s) or
// dlock.WithMetadata (who holds it, for `dlock status`). The lock is
// renewed while held unless dlock.WithAutoRenew(false) is among them, which
// makes a job that runs longer than the TTL lose its lock; dlock.WithLimit
// lets that many instances run the job at once. An invalid option makes
// every Lock fail with an error wrapping dlock.ErrInvalid.
func WithLockOptions(opts ...dlock.LockOption) Option {
	return func(c *config) { c.lockOpts = append(c.lockOpts, opts...) }
}

// Locker is a gocron.Locker backed by a dlock.Locker: pass it to
// gocron.WithDistributedLocker (or gocron.WithDistributedJobLocker) in every
// instance, and each tick of a job runs on at most one instance. Make it with
// NewLocker. It is safe for concurrent use.
//
// Jobs are told apart by name alone (gocron passes the job's name: give
// every job a unique one with gocron.WithName; the default is the Go
// function's name). A Locker allows one run of a job at a time in its own
// instance too: a run that starts while an earlier run still holds the lock
// is skipped.
type Locker struct {
	l   *dlock.Locker
	cfg config

	mu   sync.Mutex
	jobs map[string]*jobLock // by lock name
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a gocron.Locker that takes a dlock lock for every run of
// a job: the lock named prefix + the job's name (see WithKeyPrefix), taken
// with TryAcquire, renewed while the job runs, and held at least the minimum
// hold (see WithMinHold). Close l when the scheduler has shut down: that
// releases the locks still held. Give each scheduler a Locker of its own:
// runs of one Locker take over each other's held lock, so two schedulers
// sharing one would run the same tick twice.
func NewLocker(l *dlock.Locker, opts ...Option) *Locker {
	cfg := config{prefix: DefaultKeyPrefix, minHold: DefaultMinHold}
	for _, o := range opts {
		o(&cfg)
	}
	return &Locker{l: l, cfg: cfg, jobs: map[string]*jobLock{}}
}

// jobLock is the lock of one job in one instance: held by a run (active),
// or held past Unlock until the minimum hold has passed (lingering).
type jobLock struct {
	lk    *Locker
	name  string // the lock's name
	lock  *dlock.Lock
	until time.Time // the minimum hold ends

	// Guarded by lk.mu.
	active    bool          // a run holds it: between Lock and Unlock
	timer     *time.Timer   // releases a lingering lock
	hold      uint64        // counts the holds (runs) of this lock: a timer of an earlier one is stale
	releasing chan struct{} // closed when a release under way is done; nil: none
}

// Lock takes the lock of the job named key for one run, without waiting: it
// makes one attempt (dlock's TryAcquire). gocron runs the job when Lock
// returns nil, and skips this run when it returns an error. The error wraps
//
//   - dlock.ErrNotAcquired: another instance holds the lock (it runs this
//     tick, or holds the lock for the minimum hold after running it), or a
//     run of this instance is still in progress;
//   - dlock.ErrUnavailable: Redis did not answer in time (down, frozen,
//     partitioned): no instance that cannot reach Redis runs the job;
//   - dlock.ErrMisconfigured, dlock.ErrClosed, dlock.ErrInvalid: see dlock.
//
// gocron passes the error to the job's AfterLockError listeners. When this
// instance still holds the job's lock from its last run (the minimum hold),
// Lock takes that lock over, extending it by its TTL (one round trip; if
// Redis does not confirm, the lock is released and Lock asks for it anew).
//
// gocron calls Unlock on the returned gocron.Lock when the run ends. Unlock
// returns nil at once while the minimum hold lasts (the lock is released in
// the background when it ends), and releases the lock otherwise. It returns
// an error wrapping dlock.ErrLockLost when the lock was lost before Unlock
// (the run may have overlapped a run on another instance), and one wrapping
// dlock.ErrUnavailable when the release could not be confirmed (the lock
// then expires after its TTL). gocron discards that error.
func (lk *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	name := lk.cfg.prefix + key
	for {
		lk.mu.Lock()
		j := lk.jobs[name]
		switch {
		case j == nil:
			lk.mu.Unlock()
			return lk.acquire(ctx, name)
		case j.releasing != nil:
			// A release is under way: wait for it (it is bounded by the
			// node timeout), then ask Redis.
			done := j.releasing
			lk.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %q: %w", dlock.ErrNotAcquired, name, ctx.Err())
			}
			continue
		case j.active:
			lk.mu.Unlock()
			return nil, fmt.Errorf("%w: %q: a run of this instance is in progress", dlock.ErrNotAcquired, name)
		case lost(j.lock):
			// Lingering, but lost meanwhile: let it go, then ask Redis.
			j.beginRelease()
			lk.mu.Unlock()
			j.finishRelease()
			continue
		default:
			// Lingering and held: this instance ran the job last and still
			// holds the lock; the new run takes it over, once Redis has
			// confirmed a whole TTL from now (without auto-renewal, the
			// rest of the last run's lease could be short).
			j.timer.Stop() // if it fired already, its callback finds itself stale
			j.timer = nil
			j.active = true
			j.hold++
			hold := j.hold
			j.until = time.Now().Add(lk.cfg.minHold)
			lk.mu.Unlock()
			if err := j.lock.Extend(ctx, j.lock.TTL()); err != nil {
				// Lost, or not confirmed: let it go, then ask Redis.
				lk.mu.Lock()
				j.active = false
				j.beginRelease()
				lk.mu.Unlock()
				_ = j.finishRelease()
				continue
			}
			return run{j, hold}, nil
		}
	}
}

// acquire makes one attempt at the lock named name.
func (lk *Locker) acquire(ctx context.Context, name string) (gocron.Lock, error) {
	start := time.Now()
	k, err := lk.l.TryAcquire(ctx, name, lk.cfg.lockOpts...)
	if err != nil {
		return nil, err
	}
	j := &jobLock{lk: lk, name: name, lock: k, until: start.Add(lk.cfg.minHold), active: true}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	// Redis granted the lock, so an entry found here (two Lock calls at
	// once for one name: two jobs with the same name) is being released or
	// has lost its lock; the new run takes its place.
	if old := lk.jobs[name]; old != nil && old.releasing == nil && !old.active {
		// A lingering lock that was lost: release it in the background
		// (a lost lock's Release only cleans up).
		old.beginRelease()
		go func() { _ = old.finishRelease() }()
	}
	lk.jobs[name] = j
	return run{j, j.hold}, nil
}

// Held returns the dlock lock that the run of the job named name (the name
// gocron passes, without the prefix) holds in this instance while the run is
// in progress, or nil. A job can watch its Lost channel, which closes when
// the lock can no longer be guaranteed (before the lock can have expired in
// Redis), and stop; and pass its Fence to storage that rejects writes
// carrying a smaller fence than one it has seen. A run that took over the
// lock its instance held from the last run has that run's fence.
func (lk *Locker) Held(name string) *dlock.Lock {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if j := lk.jobs[lk.cfg.prefix+name]; j != nil && j.active {
		return j.lock
	}
	return nil
}

// Unlock ends the run's hold on the lock. If the minimum hold (WithMinHold)
// has not passed, it returns nil at once and the lock is released in the
// background when it has (or taken over by this instance's next run of the
// job); otherwise the lock is released now.
//
// It returns an error wrapping dlock.ErrLockLost when the lock was lost
// before Unlock (dlock's Lost had closed: Redis did not confirm a renewal in
// time, the lock was force-released, or the dlock.Locker was closed): the
// run may then have overlapped a run on another instance. An error wrapping
// dlock.ErrUnavailable means that the release could not be confirmed: the
// lock then expires after its TTL. gocron ignores the error. Unlock after
// Unlock returns nil.
func (r run) Unlock(ctx context.Context) error { return r.j.unlock(r.hold) }

// run is the gocron.Lock of one run: the hold-th of its jobLock, so that an
// Unlock of an earlier run does nothing to a later one.
type run struct {
	j    *jobLock
	hold uint64
}

var _ gocron.Lock = run{}

func (j *jobLock) unlock(hold uint64) error {
	lk := j.lk
	lk.mu.Lock()
	if !j.active || j.hold != hold {
		lk.mu.Unlock()
		return nil
	}
	j.active = false
	if wait := time.Until(j.until); wait > 0 && !lost(j.lock) {
		hold := j.hold
		j.timer = time.AfterFunc(wait, func() { j.expire(hold) })
		lk.mu.Unlock()
		return nil
	}
	j.beginRelease()
	lk.mu.Unlock()
	err := j.finishRelease()
	if errors.Is(err, dlock.ErrNotHeld) {
		return fmt.Errorf("%w: %q: %w", dlock.ErrLockLost, j.name, err)
	}
	return err
}

// expire releases a lingering lock once the minimum hold of its hold-th run
// has passed, unless a later run took it over.
func (j *jobLock) expire(hold uint64) {
	lk := j.lk
	lk.mu.Lock()
	if j.hold != hold || j.active || j.releasing != nil {
		lk.mu.Unlock()
		return
	}
	j.beginRelease()
	lk.mu.Unlock()
	_ = j.finishRelease()
}

// beginRelease marks the lock as being released; lk.mu must be held.
func (j *jobLock) beginRelease() {
	j.releasing = make(chan struct{})
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
}

// finishRelease releases the lock and forgets it; lk.mu must not be held.
func (j *jobLock) finishRelease() error {
	err := j.lock.Release(context.Background())
	lk := j.lk
	lk.mu.Lock()
	if lk.jobs[j.name] == j {
		delete(lk.jobs, j.name)
	}
	close(j.releasing)
	lk.mu.Unlock()
	return err
}

// lost reports whether k's Lost channel is closed.
func lost(k *dlock.Lock) bool {
	select {
	case <-k.Lost():
		return true
	default:
		return false
	}
}
