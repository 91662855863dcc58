package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestSemaphoreLimit: 20 workers over 4 Lockers with WithLimit(3) never hold
// more than 3 permits at once, every worker finishes, and the fences of all
// permits are distinct and increase for each worker.
func TestSemaphoreLimit(t *testing.T) {
	s := dlocktest.Start(t)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, s.Client())
	}
	var (
		inside, most atomic.Int32
		mu           sync.Mutex
		fences       = map[uint64]bool{}
		wg           sync.WaitGroup
	)
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			var last uint64
			for range 5 {
				k, err := l.Acquire(ctx(t), "sem", dlock.WithLimit(3))
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if fences[k.Fence()] {
					t.Errorf("fence %d given twice", k.Fence())
				}
				fences[k.Fence()] = true
				mu.Unlock()
				if k.Fence() <= last {
					t.Errorf("worker %d: fence %d after %d", w, k.Fence(), last)
				}
				last = k.Fence()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := k.Release(ctx(t)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Errorf("%d holders at once, limit 3", m)
	} else {
		t.Logf("at most %d holders at once", m)
	}
	if len(fences) != 100 {
		t.Errorf("%d acquisitions, want 100", len(fences))
	}
}

// TestSemaphoreDeadHolder: a permit whose holder died (its process gone: no
// renewal, no release) comes back once its TTL has run out, and a waiter
// takes it then.
func TestSemaphoreDeadHolder(t *testing.T) {
	s := dlocktest.Start(t)
	dying := redis.NewClient(&redis.Options{Addr: s.Addr()})
	dead := dlock.New(dying)
	t.Cleanup(func() { _ = dead.Close() })
	alive := newLocker(t, s.Client())
	opts := []dlock.LockOption{dlock.WithLimit(2), dlock.WithTTL(300 * time.Millisecond)}
	if _, err := dead.Acquire(ctx(t), "sem-dead", opts...); err != nil {
		t.Fatal(err)
	}
	held, err := alive.Acquire(ctx(t), "sem-dead", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx(t))
	_ = dying.Close() // the process dies: it renews and releases nothing
	if _, err := alive.TryAcquire(ctx(t), "sem-dead", opts...); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a third permit of two: %v", err)
	}
	start := time.Now()
	k, err := alive.Acquire(ctxTimeout(t, 10*time.Second), "sem-dead", opts...)
	if err != nil {
		t.Fatalf("the dead holder's permit did not come back: %v", err)
	}
	t.Logf("the dead holder's permit came back after %v", time.Since(start))
	if st, err := alive.Status(ctx(t), "sem-dead"); err != nil || st.Limit != 2 || len(st.Permits) != 2 {
		t.Errorf("Status: limit %d, %d permits, %v; want 2 of 2", st.Limit, len(st.Permits), err)
	}
	k.Release(ctx(t))
}

// TestSemaphoreLimitMismatch: holders of one key must agree on the limit;
// asking with another is refused at once with ErrMisconfigured (the fleet's
// copies disagree; it also wraps ErrInvalid) naming both, and changes
// nothing. The hook's events say "misconfigured", the attempt's and the
// acquisition's alike.
func TestSemaphoreLimitMismatch(t *testing.T) {
	t.Run("errors", testSemaphoreLimitMismatch)
	t.Run("events", func(t *testing.T) {
		s := dlocktest.Start(t)
		holder := newLocker(t, s.Client())
		k, err := holder.TryAcquire(ctx(t), "pool", dlock.WithLimit(2))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx(t))
		var mu sync.Mutex
		results := map[dlock.EventKind]string{}
		l := newLocker(t, s.Client(), dlock.WithHook(startHook{rec: newRecorder(), event: func(_ context.Context, e dlock.Event) {
			if r := e.Result(); r != "" {
				mu.Lock()
				results[e.Kind] = r
				mu.Unlock()
			}
		}}))
		if _, err := l.Acquire(ctx(t), "pool", dlock.WithLimit(3)); !errors.Is(err, dlock.ErrMisconfigured) {
			t.Fatalf("Acquire with another limit: %v, want ErrMisconfigured", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if results[dlock.EventAttempt] != dlock.ResultMisconfigured || results[dlock.EventRefused] != dlock.ResultMisconfigured {
			t.Errorf("results %v, want %q for the attempt and the acquisition", results, dlock.ResultMisconfigured)
		}
	})
}

func testSemaphoreLimitMismatch(t *testing.T) {
	s := dlocktest.Start(t)
	l := newLocker(t, s.Client())
	c := s.Client()
	defer c.Close()

	mutex, err := l.Acquire(ctx(t), "mix")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []func() error{
		func() error { _, err := l.TryAcquire(ctx(t), "mix", dlock.WithLimit(3)); return err },
		func() error { _, err := l.Acquire(ctx(t), "mix", dlock.WithLimit(3)); return err },
	} {
		err := f()
		if !errors.Is(err, dlock.ErrMisconfigured) || !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "limit 1") || !strings.Contains(err.Error(), "limit 3") {
			t.Errorf("limit 3 on a held lock: %v, want ErrMisconfigured naming 1 and 3", err)
		}
	}
	if v, _ := c.Get(ctx(t), "dlock:{mix}").Result(); v != mutex.Token() {
		t.Errorf("the lock holds %q after refused permits", v)
	}
	mutex.Release(ctx(t))

	p, err := l.Acquire(ctx(t), "mix", dlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []dlock.LockOption
		want string
	}{{nil, "limit 1"}, {[]dlock.LockOption{dlock.WithLimit(5)}, "limit 5"}} {
		_, err := l.TryAcquire(ctx(t), "mix", tc.opts...)
		if !errors.Is(err, dlock.ErrMisconfigured) || !strings.Contains(err.Error(), "limit 3") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on a semaphore of 3: %v, want ErrMisconfigured naming both", tc.want, err)
		}
	}
	if n, _ := c.ZCard(ctx(t), "dlock:{mix}").Result(); n != 1 {
		t.Errorf("%d permits after refused acquisitions, want 1", n)
	}
	p.Release(ctx(t))
	if _, err := l.TryAcquire(ctx(t), "mix", dlock.WithLimit(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WithLimit(0): %v", err)
	}
	// Free again: any limit may take it.
	k, err := l.TryAcquire(ctx(t), "mix", dlock.WithLimit(5))
	if err != nil {
		t.Fatal(err)
	}
	k.Release(ctx(t))
}

// TestSemaphoreRedlockCounterexample: 3 masters, limit 2. Holders A on
// masters {1,2} and B on {2,3} each hold a majority; a third holder C could
// get {1,3}, also a majority: three holders of two permits. C must be
// refused (a permit needs more than N·n/(n+1) = 2 grants), and leave nothing.
func TestSemaphoreRedlockCounterexample(t *testing.T) {
	l, servers, _ := redlock(t, 3)
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	for i, holders := range [][]string{{"A"}, {"A", "B"}, {"B"}} {
		c := servers[i].Client()
		for _, h := range holders {
			c.ZAdd(ctx(t), "dlock:{cx}", redis.Z{Score: mustFloat(exp), Member: h})
		}
		c.Set(ctx(t), "dlock:{cx}:limit", "2", time.Minute)
		c.PExpire(ctx(t), "dlock:{cx}", time.Minute)
		_ = c.Close()
	}
	_, err := l.TryAcquire(ctx(t), "cx", dlock.WithLimit(2))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("C on {1,3}: %v, want ErrNotAcquired (three holders of two permits otherwise)", err)
	}
	// C's grants on masters 1 and 3 are released (in the background).
	waitFor(t, func() bool {
		for i, s := range servers {
			c := s.Client()
			n, _ := c.ZCard(ctx(t), "dlock:{cx}").Result()
			_ = c.Close()
			if want := []int64{1, 2, 1}[i]; n != want {
				return false
			}
		}
		return true
	}, "C's partial grants to be released")
}

func mustFloat(s string) float64 {
	var f float64
	_, _ = fmt.Sscan(s, &f)
	return f
}

// TestSemaphoreQuorum: the quorum for n permits over N masters.
func TestSemaphoreQuorum(t *testing.T) {
	// 5 masters, limit 2: a permit needs 4 grants, so it survives one
	// master down but not two.
	l, servers, _ := redlock(t, 5)
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	k, err := l.TryAcquire(ctx(t), "q", dlock.WithLimit(2))
	if err != nil {
		t.Fatalf("limit 2 with 4 of 5 masters: %v", err)
	}
	k.Release(ctx(t))
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx(t), "q", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("limit 2 with 3 of 5 masters: %v, want ErrUnavailable", err)
	}
	// A lock still needs only a majority.
	k, err = l.TryAcquire(context.Background(), "q2")
	if err != nil {
		t.Fatalf("a lock with 3 of 5 masters: %v", err)
	}
	k.Release(ctx(t))
}

// TestSemaphoreRedlockFencesUnique: over a Redlock, permits granted at
// nearly the same moment get fences of their own: two permits whose
// grants interleave in another order on each node once both got the
// largest of their nodes' fences, the same number. Then the same with one
// node at a time frozen for 300ms (answers that come late, rounds decided
// without a node).
func TestSemaphoreRedlockFencesUnique(t *testing.T) {
	t.Run("all up", func(t *testing.T) { permitFences(t, false) })
	t.Run("frozen in turn", func(t *testing.T) { permitFences(t, true) })
}

func permitFences(t *testing.T, freezing bool) {
	_, servers, clients := redlock(t, 3)
	var lockers []*dlock.Locker
	for range 3 {
		l, err := dlock.NewRedlock(clients)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		lockers = append(lockers, l)
	}
	stop := make(chan struct{})
	frozen := make(chan struct{})
	go func() {
		defer close(frozen)
		for i := 0; freezing; i++ {
			s := servers[i%len(servers)]
			if err := s.Freeze(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-stop:
			case <-time.After(300 * time.Millisecond):
			}
			if err := s.Thaw(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var (
		mu     sync.Mutex
		fences = map[uint64]int{}
		wg     sync.WaitGroup
	)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			for i := range 60 {
				k, err := l.Acquire(ctxTimeout(t, 60*time.Second), "sem-fences", dlock.WithLimit(2), dlock.WithTTL(2*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if j, dup := fences[k.Fence()]; dup {
					t.Errorf("fence %d given twice (acquisitions %d and %d)", k.Fence(), j, w*1000+i)
				}
				fences[k.Fence()] = w*1000 + i
				mu.Unlock()
				_ = k.Release(ctx(t)) // may find it expired, with a node frozen
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-frozen
}
