package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestMiniredis is the table of features × servers behind the README's
// "Unit tests without a redis-server": each feature runs on a real
// redis-server, where it must work, and on miniredis (v2.40.0, with
// ClockTTL(true), as the README says to start it), where it must do what
// the table says: a feature that starts or stops working on miniredis
// fails here, so that the table and the README are updated with it.
func TestMiniredis(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"redis-server", "miniredis"} {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			for _, f := range miniredisFeatures {
				t.Run(f.name, func(t *testing.T) {
					env := newFeatureEnv(t, server)
					err := f.run(ctxTimeout(t, 20*time.Second), env)
					switch {
					case server == "redis-server" && err != nil:
						t.Errorf("on a redis-server: %v", err)
					case server == "miniredis" && f.fails == "" && err != nil:
						t.Errorf("on miniredis: %v (the README says it works)", err)
					case server == "miniredis" && f.fails != "" && err == nil:
						t.Errorf("works on miniredis now: update the table here and the README")
					case server == "miniredis" && f.fails != "" && !strings.Contains(err.Error(), f.fails):
						t.Errorf("on miniredis: %v, want an error with %q", err, f.fails)
					}
				})
			}
		})
	}
}

// featureEnv is one feature's server: a Locker on it, and a way to make a
// holder that dies without releasing.
type featureEnv struct {
	t      *testing.T
	addr   string
	client *redis.Client
	locker *dlock.Locker
	mini   *miniredis.Miniredis // nil on a redis-server
}

func newFeatureEnv(t *testing.T, server string) *featureEnv {
	e := &featureEnv{t: t}
	if server == "miniredis" {
		e.mini = miniredis.RunT(t)
		e.mini.ClockTTL(true) // keys expire as the clock runs, as in Redis
		e.addr = e.mini.Addr()
	} else {
		e.addr = dlocktest.Start(t).Addr()
	}
	e.client = e.newClient()
	e.locker = e.newLocker(e.client)
	return e
}

// kind is the env's kind of server, as newFeatureEnv takes it.
func (e *featureEnv) kind() string {
	if e.mini != nil {
		return "miniredis"
	}
	return "redis-server"
}

func (e *featureEnv) newClient() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *featureEnv) newLocker(c redis.UniversalClient, opts ...dlock.Option) *dlock.Locker {
	l := dlock.New(c, opts...)
	e.t.Cleanup(func() { l.Close() })
	return l
}

// crashedHolder runs take (an acquisition, with WithTTL and
// WithAutoRenew(false)) with a Locker on a client of its own, and then
// loses that client without releasing anything, as a process that died.
func (e *featureEnv) crashedHolder(take func(l *dlock.Locker) error) error {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	l := dlock.New(c)
	err := take(l)
	c.Close() // nothing more reaches Redis: no release, no clean-up
	l.Close()
	return err
}

// waiting waits until n processes wait for key (l's Status), so that what
// follows tests a wake-up, not a free lock.
func waiting(ctx context.Context, l *dlock.Locker, key string, n int64) error {
	return statusUntil(ctx, l, key, func(s dlock.Status) bool { return s.Waiters >= n })
}

// statusUntil waits until l's Status of key satisfies cond, for at most 5s.
func statusUntil(ctx context.Context, l *dlock.Locker, key string, cond func(dlock.Status) bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := l.Status(ctx, key)
		if err != nil {
			return err
		}
		if cond(s) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Status of %q after 5s: %+v", key, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// later runs f on a goroutine of its own, and returns where its error
// comes.
func later(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- f() }()
	return c
}

// acquireRelease returns an Acquire of key with l (which waits), then the
// Release of what it took.
func acquireRelease(ctx context.Context, l *dlock.Locker, key string, opts ...dlock.LockOption) func() error {
	return func() error {
		k, err := l.Acquire(ctx, key, opts...)
		if err != nil {
			return err
		}
		return k.Release(ctx)
	}
}

// woken returns what a waiter started with later ended with, or an error
// if that took more than 2s since what.
func woken(got <-chan error, what string) error {
	select {
	case err := <-got:
		return err
	case <-time.After(2 * time.Second):
		return fmt.Errorf("the waiter was not woken within 2s of %s", what)
	}
}

type miniredisFeature struct {
	name string
	// fails is "" for a feature that works on miniredis v2.40.0 with
	// ClockTTL(true); otherwise words of the error it fails with there.
	fails string
	run   func(ctx context.Context, e *featureEnv) error
}

var miniredisFeatures = []miniredisFeature{
	{"TryAcquire and Release", "", featureTryAcquire},
	{"busy answer", "", featureBusy},
	{"another type at the key", "", featureWrongType},
	{"Acquire woken by a release", "", featureWokenWaiter},
	{"Acquire until ctx ends", "", featureWaitDeadline},
	{"Do and LockFromContext", "", featureDo},
	{"Extend", "", featureExtend},
	{"renewal", "", featureRenewal},
	{"Lost after ForceRelease", "", featureLost},
	{"a crashed holder's TTL", "", featureCrashedHolder},
	{"a crashed holder's TTL, without ClockTTL(true)", "lock not acquired", featureCrashedHolderNoClock},
	{"fences increase", "", featureFences},
	{"semaphore", "", featureSemaphore},
	{"limit mismatch", "", featureLimitMismatch},
	{"shared holds and a writer", "", featureShared},
	{"AcquireAll", "", featureAcquireAll},
	{"Campaign, Leader, Observe", "", featureElection},
	{"a dead leader observed", "", featureDeadLeader},
	{"Status", "", featureStatus},
	{"hooks", "", featureHook},
	{"Close wakes waiters", "", featureClose},
	{"Redlock over 3 servers", "", featureRedlock},
	{"Redlock refuses one server twice", "still acquires", featureRedlockSameServer},
	{"a Cluster client", "", featureClusterClient},
	{"fenced", "", featureFenced},
}

func featureTryAcquire(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.TryAcquire(ctx, "try")
	if err != nil {
		return err
	}
	if err := k.Release(ctx); err != nil {
		return err
	}
	return k.Release(ctx) // idempotent
}

func featureBusy(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.TryAcquire(ctx, "busy")
	if err != nil {
		return err
	}
	defer k.Release(ctx)
	other := e.newLocker(e.newClient())
	if _, err := other.TryAcquire(ctx, "busy"); !errors.Is(err, dlock.ErrNotAcquired) {
		return fmt.Errorf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	return nil
}

func featureWrongType(ctx context.Context, e *featureEnv) error {
	if err := e.client.HSet(ctx, "dlock:{hash}", "f", "v").Err(); err != nil {
		return err
	}
	if _, err := e.locker.Acquire(ctx, "hash"); !errors.Is(err, dlock.ErrMisconfigured) {
		return fmt.Errorf("a hash at the lock's key: %v, want ErrMisconfigured", err)
	}
	return nil
}

// featureWokenWaiter: a waiter of another Locker is woken by the release
// (pub/sub), long before the holder's TTL or its fallback timer.
func featureWokenWaiter(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "wake")
	if err != nil {
		return err
	}
	got := later(acquireRelease(ctx, e.newLocker(e.newClient()), "wake"))
	if err := waiting(ctx, e.locker, "wake", 1); err != nil {
		return err
	}
	if err := k.Release(ctx); err != nil {
		return err
	}
	return woken(got, "the release")
}

func featureWaitDeadline(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "deadline")
	if err != nil {
		return err
	}
	defer k.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = e.newLocker(e.newClient()).Acquire(wctx, "deadline")
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Acquire of a held lock until ctx ends: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	return nil
}

func featureDo(ctx context.Context, e *featureEnv) error {
	ran := false
	err := e.locker.Do(ctx, "do", func(ctx context.Context) error {
		k, ok := dlock.LockFromContext(ctx)
		ran = ok && k.Key() == "do"
		return nil
	})
	if err == nil && !ran {
		err = errors.New("fn did not get its lock")
	}
	return err
}

func featureExtend(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "extend", dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		return err
	}
	defer k.Release(ctx)
	before := k.ValidUntil()
	if err := k.Extend(ctx, 10*time.Second); err != nil {
		return err
	}
	if pttl := e.client.PTTL(ctx, "dlock:{extend}").Val(); pttl < 5*time.Second {
		return fmt.Errorf("PTTL after Extend(10s): %v", pttl)
	}
	if !k.ValidUntil().After(before) {
		return errors.New("ValidUntil did not move")
	}
	return nil
}

// featureRenewal: a lock with a 600ms TTL held for 1.5s is renewed
// (every 200ms) and never lost.
func featureRenewal(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "renew", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		return err
	}
	defer k.Release(ctx)
	before := k.ValidUntil()
	select {
	case <-k.Lost():
		return errors.New("lost while renewed")
	case <-time.After(1500 * time.Millisecond):
	}
	if !k.ValidUntil().After(before.Add(700 * time.Millisecond)) {
		return fmt.Errorf("ValidUntil moved by %v in 1.5s", k.ValidUntil().Sub(before))
	}
	return nil
}

func featureLost(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "lost", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		return err
	}
	if n, err := e.locker.ForceRelease(ctx, "lost"); n != 1 || err != nil {
		return fmt.Errorf("ForceRelease: %d, %v", n, err)
	}
	select {
	case <-k.Lost():
	case <-time.After(2 * time.Second):
		return errors.New("Lost did not fire within 2s of ForceRelease")
	}
	if err := k.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		return fmt.Errorf("Release of a lost lock: %v, want ErrNotHeld", err)
	}
	return nil
}

// featureCrashedHolder: a holder that died without releasing keeps the
// lock for its TTL, and not longer (on miniredis only with ClockTTL(true):
// otherwise keys expire only on FastForward).
func featureCrashedHolder(ctx context.Context, e *featureEnv) error {
	err := e.crashedHolder(func(l *dlock.Locker) error {
		_, err := l.Acquire(ctx, "crash", dlock.WithTTL(500*time.Millisecond), dlock.WithAutoRenew(false))
		return err
	})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	k, err := e.locker.Acquire(wctx, "crash")
	if err != nil {
		return fmt.Errorf("2s after a holder with a TTL of 500ms died: %w", err)
	}
	return k.Release(ctx)
}

// featureCrashedHolderNoClock: miniredis without ClockTTL(true) expires
// keys only on FastForward: a crashed holder keeps the lock.
func featureCrashedHolderNoClock(ctx context.Context, e *featureEnv) error {
	if e.mini != nil {
		e.mini.ClockTTL(false)
	}
	return featureCrashedHolder(ctx, e)
}

func featureFences(ctx context.Context, e *featureEnv) error {
	var last uint64
	for i := 0; i < 3; i++ {
		k, err := e.locker.Acquire(ctx, "fence")
		if err != nil {
			return err
		}
		if k.Fence() <= last {
			return fmt.Errorf("fence %d after %d", k.Fence(), last)
		}
		last = k.Fence()
		if err := k.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

func featureSemaphore(ctx context.Context, e *featureEnv) error {
	a, err := e.locker.Acquire(ctx, "sem", dlock.WithLimit(2))
	if err != nil {
		return err
	}
	b, err := e.locker.Acquire(ctx, "sem", dlock.WithLimit(2))
	if err != nil {
		return err
	}
	defer b.Release(ctx)
	if _, err := e.locker.TryAcquire(ctx, "sem", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrNotAcquired) {
		return fmt.Errorf("a third permit of 2: %v, want ErrNotAcquired", err)
	}
	got := later(acquireRelease(ctx, e.newLocker(e.newClient()), "sem", dlock.WithLimit(2)))
	if err := waiting(ctx, e.locker, "sem", 1); err != nil {
		return err
	}
	if err := a.Release(ctx); err != nil {
		return err
	}
	return woken(got, "a release")
}

func featureLimitMismatch(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "limits", dlock.WithLimit(2))
	if err != nil {
		return err
	}
	defer k.Release(ctx)
	if _, err := e.locker.TryAcquire(ctx, "limits", dlock.WithLimit(3)); !errors.Is(err, dlock.ErrMisconfigured) {
		return fmt.Errorf("another limit: %v, want ErrMisconfigured", err)
	}
	return nil
}
