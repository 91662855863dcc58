package dlock

import (
	"testing"
	"time"
)

// TestNextWait: the wait policy, rule by rule, with no jitter.
func TestNextWait(t *testing.T) {
	noJitter := func(time.Duration) time.Duration { return 0 }
	const nt = 200 * time.Millisecond
	fail := func(n int) []error { return make([]error, n) }
	for _, tc := range []struct {
		name     string
		res      attemptResult
		c        waitCounters
		min, max time.Duration
		after    waitCounters
	}{
		{"busy, nothing times it: the fallback", attemptResult{}, waitCounters{}, fallbackBase * 3 / 4, fallbackBase, waitCounters{}},
		{"busy, later fallbacks double", attemptResult{}, waitCounters{timerWakes: 1}, fallbackBase * 2 * 3 / 4, fallbackBase * 2, waitCounters{timerWakes: 1}},
		{"until the holder's TTL runs out", attemptResult{pttl: 300 * time.Millisecond}, waitCounters{}, 300 * time.Millisecond, 300 * time.Millisecond, waitCounters{}},
		{"a TTL longer than the fallback: the fallback", attemptResult{pttl: time.Hour}, waitCounters{}, fallbackBase * 3 / 4, fallbackBase, waitCounters{}},
		{"suspect nodes not waited for: a node timeout", attemptResult{notWaited: 1, outcome: outcome{errs: fail(1)}}, waitCounters{errWakes: 2}, nt, nt, waitCounters{}},
		{"failed nodes: the backoff", attemptResult{outcome: outcome{errs: fail(1)}}, waitCounters{}, nt * 3 / 4, nt, waitCounters{errWakes: 1}},
		{"failed nodes again: doubled", attemptResult{outcome: outcome{errs: fail(2)}}, waitCounters{errWakes: 1}, nt * 2 * 3 / 4, nt * 2, waitCounters{errWakes: 2}},
		{"failed nodes: capped", attemptResult{outcome: outcome{errs: fail(1)}}, waitCounters{errWakes: 10}, errorRetryCap * 3 / 4, errorRetryCap, waitCounters{errWakes: 11}},
		{"no validity left: at once", attemptResult{late: true, pttl: time.Second}, waitCounters{}, 0, 0, waitCounters{}},
		{"a split vote: shortly", attemptResult{outcome: outcome{ok: 1}, pttl: time.Second}, waitCounters{splits: 1}, time.Millisecond, time.Millisecond, waitCounters{splits: 2}},
		{"split votes, too many in a row: as any busy lock", attemptResult{outcome: outcome{ok: 1}, pttl: time.Second}, waitCounters{splits: maxSplitRetries}, time.Second, time.Second, waitCounters{splits: maxSplitRetries}},
		{"a late grant is no split", attemptResult{outcome: outcome{ok: 2}, late: true}, waitCounters{}, 0, 0, waitCounters{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			got := nextWait(&tc.res, &c, nt, noJitter)
			if got < tc.min || got > tc.max {
				t.Errorf("wait %s, want in [%s, %s]", got, tc.min, tc.max)
			}
			if c != tc.after {
				t.Errorf("counters %+v, want %+v", c, tc.after)
			}
		})
	}
	// The jitter is asked for a tenth of the TTL (and a millisecond).
	var asked time.Duration
	res := attemptResult{pttl: time.Second}
	nextWait(&res, &waitCounters{}, nt, func(n time.Duration) time.Duration { asked = n; return 0 })
	if asked != 101*time.Millisecond {
		t.Errorf("jitter asked for %s, want 101ms", asked)
	}
}
