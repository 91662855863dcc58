package history

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestHistoryCheckerRefusedRenewal: worker A holds
// the lock; its key is taken from under it (standing in for any exclusion
// bug) and worker B acquires while A's guaranteed validity still runs. A's
// next renewal is refused, so A's ValidUntil becomes the zero time, and the
// worker's "end" record (computed exactly as Worker does) puts A's
// section end ~292 years in the past: the checker reports no overlap.
func TestHistoryCheckerRefusedRenewal(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	t.Cleanup(func() { c.Close() })
	la, lb := dlock.New(c), dlock.New(c)
	t.Cleanup(func() {
		la.Close()
		lb.Close()
	})
	ctx := context.Background()
	ttl := time.Second
	a, err := la.TryAcquire(ctx, historyKey, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	aBegin := time.Now()
	guaranteed := a.ValidUntil()
	// The bug being simulated: A's key disappears while A holds it.
	if err := c.Del(ctx, "dlock:{"+historyKey+"}").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := lb.TryAcquire(ctx, historyKey, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	bBegin := time.Now()
	if !bBegin.Before(guaranteed) {
		t.Fatalf("setup: B began after A's validity")
	}
	// A's renewal (TTL/3) is refused.
	select {
	case <-a.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("A not lost")
	}
	now := time.Now()
	valid := time.Unix(0, recordedValid(now, a.ValidUntil())) // as Worker records it
	t.Logf("A: validity was %v after begin; after the refused renewal ValidUntil=%v; recorded Valid=%d",
		guaranteed.Sub(aBegin), a.ValidUntil(), valid.UnixNano())
	_ = b.Release(context.Background())
	h := &historyRun{t: t, ttl: ttl, paused: map[int][]fault{}, killed: map[int][]time.Time{}}
	h.recs = []Record{
		{W: 0, Kind: "begin", Fence: a.Fence(), At: aBegin.UnixNano()},
		{W: 1, Kind: "begin", Fence: b.Fence(), At: bBegin.UnixNano()},
		{W: 1, Kind: "end", Fence: b.Fence(), At: bBegin.Add(10 * time.Millisecond).UnixNano(), Valid: bBegin.Add(900 * time.Millisecond).UnixNano()},
		{W: 0, Kind: "end", Fence: a.Fence(), At: now.UnixNano(), Lost: true, Valid: valid.UnixNano()},
	}
	var found []string
	sum := h.check(func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) })
	t.Log(sum)
	if len(found) == 0 {
		t.Errorf("the checker found no overlap, but B began %v before the end of A's guaranteed ownership",
			guaranteed.Sub(bBegin).Round(time.Millisecond))
	}
}

// TestHistoryCheckerPausesAndKills: two made-up histories with a real
// overlap that the checker accepts.
func TestHistoryCheckerPausesAndKills(t *testing.T) {
	base := time.Now()
	at := func(ms int) int64 { return base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	tm := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		recs   []Record
		paused map[int][]fault
		killed map[int][]time.Time
	}{
		{
			// Worker 0 holds, valid until 1000ms. Worker 1 begins at 400ms
			// (an overlap of 600ms of guaranteed ownership). Only later,
			// at 700ms, does the test pause worker 0 (for 1.5s). The pause
			// excuses the whole overlap, also the 300ms before it began.
			name: "pause that began after the overlap began",
			recs: []Record{
				{W: 0, Kind: "begin", Fence: 1, At: at(0)},
				{W: 1, Kind: "begin", Fence: 2, At: at(400)},
				{W: 1, Kind: "end", Fence: 2, At: at(410), Valid: at(1400)},
				{W: 0, Kind: "end", Fence: 1, At: at(2200), Lost: true, Valid: at(1000)},
			},
			paused: map[int][]fault{0: {{start: tm(700), end: tm(2200)}}},
		},
		{
			// Worker 0 begins (fence 1) and is killed at 300ms with no end
			// record; worker 1 had begun at 100ms, while worker 0 still
			// held the lock. Worker 0, restarted, begins again at 2000ms:
			// its new begin overwrites open[0], and the killed section is
			// never checked.
			name: "killed holder's section dropped when its worker begins again",
			recs: []Record{
				{W: 0, Kind: "begin", Fence: 1, At: at(0)},
				{W: 1, Kind: "begin", Fence: 2, At: at(100)},
				{W: 1, Kind: "end", Fence: 2, At: at(200), Valid: at(1100)},
				{W: 0, Kind: "begin", Fence: 3, At: at(2000)},
				{W: 0, Kind: "end", Fence: 3, At: at(2010), Valid: at(3000)},
			},
			killed: map[int][]time.Time{0: {tm(300)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &historyRun{t: t, ttl: time.Second, paused: tc.paused, killed: tc.killed}
			if h.paused == nil {
				h.paused = map[int][]fault{}
			}
			if h.killed == nil {
				h.killed = map[int][]time.Time{}
			}
			h.recs = tc.recs
			var found []string
			sum := h.check(func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) })
			t.Log(sum)
			if len(found) == 0 {
				t.Errorf("a real overlap of guaranteed ownership was not reported")
			}
		})
	}
}
