package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// TestRedlockFenceClaimsUnderContention: 16 workers take and give back
// permits of a semaphore of 20 (and then shared holds) over 3 masters, every
// node up and permits free, for a second each. Concurrent grants reach the
// nodes in another order on each, so most holders must claim their fence
// on nodes that issued less while the counters move on: no TryAcquire may
// fail for that (ErrUnavailable says that nodes did not answer; the claims
// once gave up after four rounds, 2–16 ms into a 5 s TTL), every fence is
// given once, a hold that began after another ended has a larger one, and
// a hold handed over at once is adopted with its fence.
func TestRedlockFenceClaimsUnderContention(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  dlock.LockOption
	}{
		{"semaphore", dlock.WithLimit(20)},
		{"shared", dlock.WithShared()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, clients := redlock(t, 3)
			lockers := make([]*dlock.Locker, 2) // two processes, as it were
			for i := range lockers {
				l, err := dlock.NewRedlock(clients)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				lockers[i] = l
			}
			holds, fails := contend(t, lockers, 16, time.Second, tc.opt, dlock.WithTTL(5*time.Second))
			if len(fails) > 0 {
				t.Errorf("%d of %d TryAcquire calls failed, the first with: %v", len(fails), len(fails)+len(holds), fails[0])
			}
			t.Logf("%d holds", len(holds))
			checkFences(t, holds)
		})
	}
}

// fenceHold is one hold of a contention test: its fence, when its
// TryAcquire began, and when its Release returned.
type fenceHold struct {
	fence      uint64
	start, end time.Time
}

// contend runs workers over lockers for d: each takes the key with
// TryAcquire and gives it back, again and again (every fourth hold after
// handing it over: Detach, then Adopt, which must find the fence the
// acquisition returned). It returns the holds and the failures (an
// ErrNotAcquired too: the permits are never all taken).
func contend(t *testing.T, lockers []*dlock.Locker, workers int, d time.Duration, opts ...dlock.LockOption) ([]fenceHold, []error) {
	t.Helper()
	var (
		mu    sync.Mutex
		holds []fenceHold
		fails []error
		wg    sync.WaitGroup
	)
	stop := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			for i := 0; time.Now().Before(stop); {
				start := time.Now()
				k, err := l.TryAcquire(context.Background(), "contended", opts...)
				if err != nil {
					mu.Lock()
					fails = append(fails, err)
					mu.Unlock()
					continue
				}
				fence := k.Fence()
				if i++; i%4 == 0 {
					// Handed over at once: a quorum of the nodes that hold
					// the token tells its fence.
					h := k.Detach()
					if k, err = l.Adopt(context.Background(), "contended", h.Token, opts...); err != nil {
						t.Errorf("Adopt right after the acquisition: %v", err)
						continue
					}
					if k.Fence() != fence {
						t.Errorf("Adopt: fence %d, acquired with %d", k.Fence(), fence)
					}
				}
				if err := k.Release(context.Background()); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("Release: %v", err)
				}
				mu.Lock()
				holds = append(holds, fenceHold{fence, start, time.Now()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return holds, fails
}

// checkFences checks that no two holds share a fence, and that a hold that
// began after another ended has a larger one.
func checkFences(t *testing.T, holds []fenceHold) {
	t.Helper()
	seen := make(map[uint64]bool, len(holds))
	for _, h := range holds {
		if seen[h.fence] {
			t.Errorf("fence %d given twice", h.fence)
		}
		seen[h.fence] = true
	}
	byStart := slices.Clone(holds)
	slices.SortFunc(byStart, func(a, b fenceHold) int { return a.start.Compare(b.start) })
	byEnd := slices.Clone(holds)
	slices.SortFunc(byEnd, func(a, b fenceHold) int { return a.end.Compare(b.end) })
	var ended uint64 // the largest fence of the holds that ended so far
	i := 0
	for _, h := range byStart {
		for ; i < len(byEnd) && byEnd[i].end.Before(h.start); i++ {
			ended = max(ended, byEnd[i].fence)
		}
		if h.fence <= ended {
			t.Errorf("a hold that began after one with fence %d ended has fence %d", ended, h.fence)
		}
	}
}
