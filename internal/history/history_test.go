package history

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

func TestMain(m *testing.M) {
	os.Exit(dlocktest.Main(m, 0, nil)) // goleak after the tests
}

// TestHistoryChecker: the checker finds what it is for, in made-up
// histories: an overlap, a fence that goes backwards or repeats, a gap with
// no fault to explain it; and accepts a paused holder's overlap.
func TestHistoryChecker(t *testing.T) {
	base := time.Now()
	at := func(ms int) int64 { return base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	sec := func(w int, fence uint64, from, to int) []Record {
		return []Record{{W: w, Kind: "begin", Fence: fence, At: at(from)}, {W: w, Kind: "end", Fence: fence, At: at(to), Valid: at(to + 1000)}}
	}
	shared := func(w int, fence uint64, from, to int) []Record {
		rs := sec(w, fence, from, to)
		rs[0].Shared = true
		return rs
	}
	// late: a section whose begin was recorded after its validity ended
	// (its worker was paused or slow between its grant and the record).
	late := func(w int, fence uint64, from, to, valid int) []Record {
		rs := sec(w, fence, from, to)
		rs[1].Lost, rs[1].Valid = true, at(valid)
		return rs
	}
	for _, tc := range []struct {
		name   string
		recs   [][]Record
		paused map[int][]fault
		want   int // violations
	}{
		{"clean", [][]Record{sec(0, 1, 0, 10), sec(1, 2, 20, 30), sec(0, 3, 40, 50)}, nil, 0},
		{"overlap", [][]Record{sec(0, 1, 0, 30), sec(1, 2, 20, 40)}, nil, 1},
		{"fence backwards", [][]Record{sec(0, 5, 0, 10), sec(1, 4, 20, 30)}, nil, 1},
		{"fence twice", [][]Record{sec(0, 5, 0, 10), sec(1, 5, 20, 30)}, nil, 2}, // twice, and not increasing
		{"gap", [][]Record{sec(0, 1, 0, 10), sec(1, 2, 5000, 5010)}, nil, 1},
		{"shared overlap", [][]Record{shared(0, 2, 0, 30), shared(1, 1, 20, 40), sec(2, 3, 50, 60)}, nil, 0},
		{"exclusive inside shared", [][]Record{shared(0, 1, 0, 30), sec(1, 2, 20, 40)}, nil, 1},
		{"shared inside exclusive", [][]Record{sec(0, 1, 0, 30), shared(1, 2, 20, 40)}, nil, 1},
		{"shared fence twice on one node", [][]Record{shared(0, 1, 0, 30), shared(1, 1, 20, 40)}, nil, 1},
		{"begun after its validity", [][]Record{sec(0, 5, 0, 10), late(1, 4, 20, 30, 15), sec(2, 6, 40, 50)}, nil, 0},
		{"late begin inside another's section", [][]Record{sec(1, 6, 0, 100), late(0, 5, 50, 60, 40)}, nil, 0},
		{"fence backwards after a late begin", [][]Record{sec(0, 5, 0, 10), late(1, 4, 20, 30, 15), sec(2, 5, 40, 50)}, nil, 2},
		{"paused holder", [][]Record{sec(0, 1, 0, 3000), sec(1, 2, 2000, 2010)},
			map[int][]fault{0: {{start: base.Add(100 * time.Millisecond), end: base.Add(2500 * time.Millisecond)}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &historyRun{t: t, ttl: time.Second, paused: tc.paused, killed: map[int][]time.Time{}}
			if h.paused == nil {
				h.paused = map[int][]fault{}
			}
			for _, rs := range tc.recs {
				h.recs = append(h.recs, rs...)
			}
			var found []string
			sum := h.check(func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) })
			t.Log(found)
			if want := fmt.Sprintf("violations %d", tc.want); !strings.HasSuffix(sum, want) {
				t.Errorf("%s: want %s", sum, want)
			}
		})
	}
}
