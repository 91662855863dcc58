package dlockgocron_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockgocron"
)

func TestMain(m *testing.M) {
	// The Examples' Redis, at the address they name.
	os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379"))
}

// newDlock returns a dlock.Locker on its own client to addr, closed (with
// the client) in the test's cleanup.
func newDlock(t *testing.T, addr string, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	l := dlock.New(c, opts...)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Logf("dlock Close: %v", err)
		}
		_ = c.Close()
	})
	return l
}

// skewClock is the real clock, off by d: a scheduler on it fires every
// tick d late (d < 0) or early, as on a host whose clock is behind or ahead.
type skewClock struct {
	clockwork.Clock
	d time.Duration
}

func (c skewClock) Now() time.Time                  { return c.Clock.Now().Add(c.d) }
func (c skewClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// run is one run of a job.
type run struct {
	inst  int   // the instance that ran it
	tick  int64 // the second it was scheduled for, on its instance's clock
	fence uint64
	start time.Time
}

// instance is one scheduler with the Locker adapter, as one process of a
// service would have.
type instance struct {
	id       int
	dl       *dlock.Locker
	lk       *dlockgocron.Locker
	sched    gocron.Scheduler
	clock    skewClock
	unlock   chan error // what Unlock returned, for every run
	lockErrs chan error // what Lock returned when gocron skipped a run
	stopOnce sync.Once
}

// stop shuts the scheduler down (once), waiting for the runs in progress.
func (in *instance) stop(t *testing.T) {
	in.stopOnce.Do(func() {
		if err := in.sched.Shutdown(); err != nil {
			t.Errorf("scheduler %d: Shutdown: %v", in.id, err)
		}
	})
}

// newInstance makes an instance whose scheduler runs on a clock skewed by
// skew, with its own dlock.Locker on addr. The scheduler is shut down before
// the Locker is closed.
func newInstance(t *testing.T, id int, addr string, skew time.Duration, opts ...dlockgocron.Option) *instance {
	t.Helper()
	in := &instance{
		id:       id,
		dl:       newDlock(t, addr),
		clock:    skewClock{clockwork.NewRealClock(), skew},
		unlock:   make(chan error, 1000),
		lockErrs: make(chan error, 1000),
	}
	in.lk = dlockgocron.NewLocker(in.dl, opts...)
	s, err := gocron.NewScheduler(
		gocron.WithDistributedLocker(recLocker{in.lk, in.unlock}),
		gocron.WithClock(in.clock),
	)
	if err != nil {
		t.Fatal(err)
	}
	in.sched = s
	t.Cleanup(func() { in.stop(t) })
	return in
}

// everySecond adds a job named name that runs fn at every whole second of
// the instance's clock, and records what Lock returns when the run is
// skipped.
func (in *instance) everySecond(t *testing.T, name string, fn func(tick int64)) {
	t.Helper()
	_, err := in.sched.NewJob(
		gocron.CronJob("* * * * * *", true),
		gocron.NewTask(func() { fn(in.clock.Now().Unix()) }),
		gocron.WithName(name),
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			select {
			case in.lockErrs <- err:
			default:
			}
		})),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// recLocker records what every Unlock returned (gocron discards it).
type recLocker struct {
	gocron.Locker
	unlock chan error
}

func (r recLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := r.Locker.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return recLock{l, r.unlock}, nil
}

type recLock struct {
	gocron.Lock
	unlock chan error
}

func (r recLock) Unlock(ctx context.Context) error {
	err := r.Lock.Unlock(ctx)
	select {
	case r.unlock <- err:
	default:
	}
	return err
}

// runLog collects the runs of jobs, from any goroutine.
type runLog struct {
	mu   sync.Mutex
	runs []run
	news chan struct{} // a token after each new run
}

func newRunLog() *runLog { return &runLog{news: make(chan struct{}, 1)} }

func (l *runLog) add(r run) {
	l.mu.Lock()
	l.runs = append(l.runs, r)
	l.mu.Unlock()
	select {
	case l.news <- struct{}{}:
	default:
	}
}

func (l *runLog) snapshot() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

// waitFor waits until cond holds for the runs logged, or fails the test
// after d.
func (l *runLog) waitFor(t *testing.T, d time.Duration, what string, cond func([]run) bool) []run {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if rs := l.snapshot(); cond(rs) {
			return rs
		}
		select {
		case <-l.news:
		case <-deadline.C:
			t.Fatalf("no %s within %s; runs: %+v", what, d, l.snapshot())
		}
	}
}

// perTick counts the runs of every tick.
func perTick(rs []run) map[int64]int {
	m := map[int64]int{}
	for _, r := range rs {
		m[r.tick]++
	}
	return m
}

// ticksSeen counts the distinct ticks of rs.
func ticksSeen(n int) func([]run) bool {
	return func(rs []run) bool { return len(perTick(rs)) >= n }
}

// recv receives from ch, or fails the test after d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		panic("unreachable")
	}
}
