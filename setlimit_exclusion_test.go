package dlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// limitPhases counts a semaphore's holders, as its workers see them,
// against the limit of each phase: a section whose Acquire began after the
// phase's SetLimit returned counts against that phase's limit (a holder
// from before keeps its permit, and an acquisition under way may be counted
// against the former limit).
type limitPhases struct {
	mu     sync.Mutex
	starts map[int]time.Time // live sections: worker -> when its Acquire began
	since  time.Time         // when the current phase's SetLimit returned
	limit  int
	most   int // the most holders counted against a phase's limit at once
	errs   []string
}

func (p *limitPhases) begin(w int, start time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts[w] = start
	n := 0
	for _, s := range p.starts {
		if s.After(p.since) {
			n++
		}
	}
	p.most = max(p.most, n)
	if n > p.limit && len(p.errs) < 5 {
		p.errs = append(p.errs, time.Now().Format("15:04:05.000")+": holders over the limit")
	}
}

func (p *limitPhases) end(w int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.starts, w)
}

// peak is the most holders counted against the current phase's limit.
func (p *limitPhases) peak() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most
}

func (p *limitPhases) next(limit int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.since, p.limit, p.most = time.Now(), limit, 0
}

// TestSetLimitExclusion, on each topology: workers on three Lockers take
// permits with limit 2, then, once it was raised, with the old limit or
// the new one while the limit goes 2 → 4 → 2; no acquisition is refused as
// misconfigured (but on a Redlock, where the nodes disagree while a change
// is under way: see SetLimit), and the holders counted against a phase's
// limit never exceed it.
func TestSetLimitExclusion(t *testing.T) {
	t.Parallel() // mostly waits: beside TestHistory and the others that do
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			mk := topo.Start(t)
			lockers := []*dlock.Locker{mk(), mk(), mk()}
			p := &limitPhases{starts: map[int]time.Time{}, limit: 2}
			stop := make(chan struct{})
			var mixed atomic.Bool // once the limit was changed: either limit
			var refused atomic.Int64
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := lockers[w%len(lockers)]
					rnd := rand.New(rand.NewPCG(uint64(w), 1))
					for {
						select {
						case <-stop:
							return
						default:
						}
						limit := 2
						if mixed.Load() {
							limit = 2 + 2*rnd.IntN(2) // the old limit or the new one
						}
						start := time.Now()
						actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						k, err := l.Acquire(actx, "ex", dlock.WithLimit(limit), dlock.WithTTL(5*time.Second))
						cancel()
						if errors.Is(err, dlock.ErrMisconfigured) {
							if topo.Name == "redlock5" {
								// The nodes disagree while a change is under
								// way (see SetLimit): refused, not admitted.
								refused.Add(1)
								continue
							}
							t.Errorf("worker %d, limit %d: %v", w, limit, err)
							return
						}
						if err != nil {
							continue
						}
						p.begin(w, start)
						time.Sleep(time.Duration(rnd.IntN(15)) * time.Millisecond)
						p.end(w)
						if err := k.Release(context.Background()); err != nil {
							t.Errorf("worker %d: %v", w, err)
						}
					}
				}()
			}
			set := func(n int) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					err := lockers[0].SetLimit(ctx(t), "ex", n)
					if err == nil {
						break
					}
					if !errors.Is(err, dlock.ErrNotHeld) || time.Now().After(deadline) { // free for a moment: again
						close(stop)
						wg.Wait()
						t.Fatal(err)
					}
				}
				p.next(n)
			}
			// Start with limit 2 held by the workers asking for it.
			waitFor(t, func() bool { st, _ := lockers[0].Status(ctx(t), "ex"); return st.Limit != 0 }, "a first holder")
			set(2)
			time.Sleep(700 * time.Millisecond) // the workload runs: time is the scenario
			most2 := p.peak()
			set(4)
			mixed.Store(true)
			time.Sleep(700 * time.Millisecond)
			most4 := p.peak()
			set(2)
			time.Sleep(700 * time.Millisecond)
			close(stop)
			wg.Wait()
			t.Logf("most holders at once: %d at limit 2, %d at limit 4, %d at limit 2 again; %d acquisitions refused as misconfigured",
				most2, most4, p.peak(), refused.Load())
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, e := range p.errs {
				t.Error(e)
			}
		})
	}
}
