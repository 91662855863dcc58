package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// Server pauses and restarts under load: 4 Lockers hold 50 locks each
// (TTL 1s, renewed in batches) while 4 other Lockers contend for the same
// keys, and the redis-server is frozen past the TTL, or killed and
// restarted without its data, at once or after a TTL (the delayed restart
// the docs require). The test counts the acquisitions a contender got while
// the key's former holder's Lost was still open (two holders), checks the
// fences, and measures how long the contenders waited.

const (
	loadHolders = 4
	loadPer     = 50
	loadTTL     = time.Second
)

// loadRun is the state of one run.
type loadRun struct {
	mu       sync.Mutex
	holder   map[string]*dlock.Lock // the key's current holder, as the test knows it
	orig     []*dlock.Lock          // the locks held before the fault
	twice    int                    // acquisitions within the former holder's validity, its Lost open
	late     int                    // after its validity, its Lost still open: the holder notices late (CPU)
	lower    int                    // fences not above the former holder's
	acquired int                    // contenders' acquisitions after the fault
	first    time.Time              // the first of them
	longest  time.Duration          // the longest contender call
}

// holdAll has each of the holders take its 50 keys.
func (r *loadRun) holdAll(t *testing.T, holders []*dlock.Locker) {
	for i, l := range holders {
		for j := range loadPer {
			key := fmt.Sprintf("load%d-%d", i, j)
			k, err := l.TryAcquire(ctx(t), key, dlock.WithTTL(loadTTL))
			if err != nil {
				t.Fatal(err)
			}
			r.holder[key] = k
			r.orig = append(r.orig, k)
		}
	}
}

// origLost counts the locks held before the fault whose Lost closed.
func (r *loadRun) origLost() int {
	n := 0
	for _, k := range r.orig {
		select {
		case <-k.Lost():
			n++
		default:
		}
	}
	return n
}

// contend has l try random keys until ctx ends, each with a short context;
// after is when the fault ended (zero: not yet).
func (r *loadRun) contend(ctx context.Context, l *dlock.Locker, after func() time.Time) {
	for ctx.Err() == nil {
		key := fmt.Sprintf("load%d-%d", rand.IntN(loadHolders), rand.IntN(loadPer))
		callCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		start := time.Now()
		k, err := l.TryAcquire(callCtx, key, dlock.WithTTL(loadTTL))
		took := time.Since(start)
		cancel()
		r.mu.Lock()
		r.longest = max(r.longest, took)
		if err == nil {
			old := r.holder[key]
			select {
			case <-old.Lost():
			default:
				if time.Now().Before(old.ValidUntil()) {
					r.twice++
				} else {
					r.late++
				}
			}
			if k.Fence() <= old.Fence() {
				r.lower++
			}
			r.holder[key] = k
			if at := after(); !at.IsZero() {
				if r.acquired == 0 {
					r.first = time.Now()
				}
				r.acquired++
			}
		}
		r.mu.Unlock()
		if err != nil && !errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, dlock.ErrUnavailable) {
			panic(err) // nothing else is expected
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// underLoad runs fault (which returns when the fault ends) on s while the
// holders hold and the contenders contend, then lets them contend for 2s
// more; it returns the run and when the fault ended.
func underLoad(t *testing.T, s *dlocktest.Server, fault func()) (*loadRun, time.Time) {
	r := &loadRun{holder: map[string]*dlock.Lock{}}
	var holders, contenders []*dlock.Locker
	for range loadHolders {
		c := s.Client()
		t.Cleanup(func() { c.Close() })
		holders = append(holders, newLocker(t, c))
		c2 := s.Client()
		t.Cleanup(func() { c2.Close() })
		contenders = append(contenders, newLocker(t, c2))
	}
	r.holdAll(t, holders)
	var endedMu sync.Mutex
	var ended time.Time
	after := func() time.Time { endedMu.Lock(); defer endedMu.Unlock(); return ended }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range contenders {
		wg.Add(1)
		go func() { defer wg.Done(); r.contend(ctx, l, after) }()
	}
	fault()
	endedMu.Lock()
	ended = time.Now()
	endedMu.Unlock()
	time.Sleep(2 * loadTTL)
	cancel()
	wg.Wait()
	return r, ended
}

// TestServerFrozenUnderLoad: the server frozen (SIGSTOP) for two TTLs while
// 200 locks are held and renewed and contenders try them: every held lock's
// Lost closes, no contender gets a key whose former holder was not told,
// fences increase, and every call is bounded.
func TestServerFrozenUnderLoad(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	r, ended := underLoad(t, s, func() {
		thaw := freeze(t, s)
		time.Sleep(2 * loadTTL)
		thaw()
	})
	lost := r.origLost()
	t.Logf("frozen 2s: %d of the %d locks held before lost; %d acquisitions after the thaw, the first %s after it; %d within the former holder's validity, its Lost open (%d after it, Lost late); %d fences not above; longest call %s",
		lost, len(r.orig), r.acquired, r.first.Sub(ended).Round(time.Millisecond), r.twice, r.late, r.lower, r.longest.Round(time.Millisecond))
	if lost != len(r.orig) {
		t.Errorf("%d of the %d locks held through a freeze of two TTLs lost, want all", lost, len(r.orig))
	}
	if r.twice != 0 || r.lower != 0 {
		t.Errorf("%d acquisitions within the former holder's validity, %d fences not above the former's", r.twice, r.lower)
	}
	if r.acquired == 0 {
		t.Error("no contender acquired a key after the thaw")
	}
	// Bounded by the node timeout (200ms) measured ~205ms; the slack is
	// for a loaded 2-core machine, where one run saw 1.3s.
	if r.longest > 2*time.Second {
		t.Errorf("a call took %s, with a 500ms context", r.longest)
	}
}

// TestServerRestartedUnderLoad: the server killed while 200 locks are held
// and restarted without its data, at once (not the documented procedure:
// the test counts the second holders) or after a TTL (the delayed restart:
// none); fences increase either way (the clock floor).
func TestServerRestartedUnderLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		down time.Duration
	}{{"at once", 0}, {"after a TTL", loadTTL + 100*time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := dlocktest.Start(t)
			r, ended := underLoad(t, s, func() {
				s.Kill()
				time.Sleep(tc.down)
				if err := s.Restart(); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("restarted empty %s: %d of the %d locks held before lost; %d acquisitions after the restart, the first %s after it; %d within the former holder's validity, its Lost open (%d after it, Lost late); %d fences not above; longest call %s",
				tc.name, r.origLost(), len(r.orig), r.acquired, r.first.Sub(ended).Round(time.Millisecond), r.twice, r.late, r.lower, r.longest.Round(time.Millisecond))
			if r.lower != 0 {
				t.Errorf("%d fences not above the former holder's", r.lower)
			}
			if tc.down > 0 && r.twice != 0 {
				t.Errorf("%d acquisitions within the former holder's validity, after a delayed restart", r.twice)
			}
			if r.acquired == 0 {
				t.Error("no contender acquired a key after the restart")
			}
		})
	}
}
