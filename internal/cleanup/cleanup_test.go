package cleanup

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestCleaner: jobs with the same Expected merge (the most passes, the
// earlier time, wake or bury if either asks); a job runs until it had its
// passes of answered releases, tried again while unanswered; Settle
// returns once nothing is due; beyond MaxJobs the oldest is dropped.
func TestCleaner(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var mu sync.Mutex
	calls := map[string]int{}
	var sawBury, sawWake bool
	c := New(Config{
		Release: func(j *Job, wake, bury bool) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			calls[j.Expected]++
			if j.Expected == "a" {
				sawBury, sawWake = sawBury || bury, sawWake || wake
			}
			// "flaky" is unanswered once, then answered.
			return j.Expected != "flaky" || calls["flaky"] > 1, false
		},
		Spawn:   func(fn func()) { wg.Add(1); go func() { defer wg.Done(); fn() }() },
		Closing: func() bool { return false },
		Done:    ctx,
		MaxJobs: 3,
	})
	later := time.Now().Add(time.Hour)
	c.Add(&Job{Expected: "a", Passes: 1, At: later})
	c.Add(&Job{Expected: "a", Passes: 2, At: time.Now(), Bury: true, Wake: true}) // merged: due now, 2 passes
	c.Add(&Job{Expected: "flaky", Passes: 1, At: time.Now()})
	c.Settle()
	mu.Lock()
	if calls["a"] != 2 || calls["flaky"] != 2 || !sawBury || !sawWake {
		t.Errorf("releases %v (bury %v, wake %v); want a twice, with bury and wake, and flaky twice", calls, sawBury, sawWake)
	}
	mu.Unlock()
	if !c.Idle() {
		// Settle returns with the last job done; the loop may still be
		// on its way out.
		deadline := time.Now().Add(5 * time.Second)
		for !c.Idle() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	for _, e := range []string{"x1", "x2", "x3", "x4"} {
		c.Add(&Job{Expected: e, Passes: 1, At: later})
	}
	c.mu.Lock()
	_, first := c.jobs["x1"]
	n := len(c.jobs)
	c.mu.Unlock()
	if first || n != 3 {
		t.Errorf("%d jobs, x1 kept %v; want 3, the oldest dropped", n, first)
	}
}
