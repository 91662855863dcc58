package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestHistoryCheckerLimits: the semaphore's check finds three holders of
// a limit of 2 and accepts four once the limit was raised to 4, also for
// acquisitions that began before the raise; the election's check finds
// two leaders at once and counts the asking candidate that led next.
func TestHistoryCheckerLimits(t *testing.T) {
	base := time.Now()
	at := func(ms int) int64 { return base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	permitRecs := func(w, g, asked, from, to int) []Record {
		return []Record{
			{W: w, G: g, Key: historySemaphore, Kind: "begin", Since: at(asked), At: at(from)},
			{W: w, G: g, Key: historySemaphore, Kind: "end", At: at(to), Valid: at(to + 1000)},
		}
	}
	change := func(n, from, to int) []Record {
		return []Record{
			{Key: historySemaphore, Kind: "limit-call", Limit: n, At: at(from)},
			{Key: historySemaphore, Kind: "limit", Limit: n, Since: at(from), At: at(to)},
		}
	}
	term := func(w int, fence uint64, from, to int) []Record {
		return []Record{{W: w, Key: historyElection, Kind: "begin", Fence: fence, At: at(from)}, {W: w, Key: historyElection, Kind: "end", Fence: fence, At: at(to), Valid: at(to + 1000)}}
	}
	for _, tc := range []struct {
		name string
		recs [][]Record
		want int
	}{
		{"two of 2", [][]Record{change(2, 0, 1), permitRecs(0, 0, 5, 10, 100), permitRecs(1, 0, 5, 20, 100), permitRecs(2, 0, 5, 200, 300)}, 0},
		{"three of 2", [][]Record{change(2, 0, 1), permitRecs(0, 0, 5, 10, 100), permitRecs(1, 0, 5, 20, 100), permitRecs(2, 0, 5, 30, 300)}, 1},
		{"four of 4", [][]Record{change(4, 0, 1), permitRecs(0, 0, 5, 10, 100), permitRecs(1, 0, 5, 20, 100), permitRecs(2, 0, 5, 30, 300), permitRecs(3, 0, 5, 40, 300)}, 0},
		{"five of 4", [][]Record{change(4, 0, 1), permitRecs(0, 0, 5, 10, 100), permitRecs(1, 0, 5, 20, 100), permitRecs(2, 0, 5, 30, 300), permitRecs(3, 0, 5, 40, 300), permitRecs(3, 1, 5, 50, 300)}, 1},
		{"asked before the raise", [][]Record{change(2, 0, 1), permitRecs(0, 0, 5, 10, 100), permitRecs(1, 0, 5, 20, 100), change(4, 30, 31), permitRecs(2, 0, 25, 40, 300)}, 0},
		{"new ones over the lowered limit", [][]Record{change(4, 0, 1), permitRecs(0, 0, 5, 10, 500), change(2, 30, 31), permitRecs(1, 0, 40, 50, 500), permitRecs(2, 0, 40, 60, 500)}, 1},
		{"leaders overlap", [][]Record{term(0, 1, 0, 100), term(1, 2, 50, 150)}, 1},
		{"asking candidate next", [][]Record{term(0, 1, 0, 100), {{W: 1, Key: historyElection, Kind: "request", At: at(50)}}, term(1, 2, 110, 150)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &historyRun{t: t, ttl: time.Second, paused: map[int][]fault{}, killed: map[int][]time.Time{}}
			for _, rs := range tc.recs {
				h.recs = append(h.recs, rs...)
			}
			var found []string
			sum := h.check(func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) })
			t.Log(sum, found)
			if want := fmt.Sprintf("violations %d", tc.want); !strings.HasSuffix(sum, want) {
				t.Errorf("%s: want %s", sum, want)
			}
			if tc.name == "asking candidate next" && !strings.Contains(sum, "led next 1 times") {
				t.Errorf("%s: the asking candidate led next", sum)
			}
		})
	}
}
