package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestHistoryCheckerClockJump: an overlap whose earlier holder held while a
// server's clock jumped forward is counted as the clock limit, not as a
// violation; without the jump it is one; and a fence that does not
// increase is a violation either way.
func TestHistoryCheckerClockJump(t *testing.T) {
	base := time.Now()
	at := func(ms int) int64 { return base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	jump := fault{kind: "redis-server clock jumped forward over the TTL", start: base.Add(100 * time.Millisecond), end: base.Add(110 * time.Millisecond)}
	for _, tc := range []struct {
		name         string
		fenceB       uint64
		faults       []fault
		wantFound    bool
		wantClockLim string
	}{
		{"overlap after a jump", 2, []fault{jump}, false, "(the clock limit) 1,"},
		{"overlap without a jump", 2, nil, true, "(the clock limit) 0,"},
		{"a jump, and a fence that does not increase", 1, []fault{jump}, true, "(the clock limit) 1,"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &historyRun{t: t, ttl: time.Second, paused: map[int][]fault{}, killed: map[int][]time.Time{}, faults: tc.faults}
			h.recs = []Record{
				{W: 0, Kind: "begin", Fence: 1, At: at(0)},
				{W: 1, Kind: "begin", Fence: tc.fenceB, At: at(200)},
				{W: 1, Kind: "end", Fence: tc.fenceB, At: at(210), Valid: at(1200)},
				{W: 0, Kind: "end", Fence: 1, At: at(900), Lost: true, Valid: at(950)},
			}
			var found []string
			sum := h.check(func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) })
			t.Log(sum, found)
			if (len(found) > 0) != tc.wantFound {
				t.Errorf("violations %v, want some: %v", found, tc.wantFound)
			}
			if !strings.Contains(sum, tc.wantClockLim) {
				t.Errorf("the summary does not say %q: %s", tc.wantClockLim, sum)
			}
		})
	}
}
