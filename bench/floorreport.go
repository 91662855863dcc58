package bench

import (
	"fmt"
	"math"
)

// The floor's part of the report (issue 46): dlock against the floor of a
// fenced lock on the same client, by turns; the floor against the fastest
// go-redis peer (what the fence costs); and the hand-off over a network
// against the floor of a hand-off.

// floorLimit is what dlock's Acquire+Release and TryAcquire+Release must
// reach of the floor on the same client.
const floorLimit = 0.97

// handoffLimit is the most a hand-off to a waiter over the network may take
// in round trips: the floor of a hand-off's (one round trip after the
// release) times this.
const handoffLimit = 1.2

// floorTargets are issue 46's targets for d, one of dlock's configurations.
func (r *Report) floorTargets(d string) []Target {
	var ts []Target
	add := func(name, measured string, met bool) {
		ts = append(ts, Target{Name: name, Lib: d, Measured: measured, Met: met})
	}
	report := func(name, measured string) {
		ts = append(ts, Target{Name: name, Lib: d, Measured: measured, Met: true})
	}
	for _, g := range []int{1, 64} {
		for _, call := range []struct{ lib, what string }{{d, "Acquire+Release"}, {d + "-try", "TryAcquire+Release"}} {
			for _, f := range r.FloorPairs {
				if f.Lib != call.lib || f.Goroutines != g {
					continue
				}
				rs := f.Ratios()
				add(fmt.Sprintf("Uncontended, %s: %s ≥ %.2f× the floor of a fenced lock on the same client (by turns)", goroutines(g), call.what, floorLimit),
					fmt.Sprintf("%.2f× %s (%d pairs by turns: %s)", median(rs), f.Floor, len(rs), fmtRatios(rs)), median(rs) >= floorLimit)
			}
		}
	}
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }
	goRedis := func(l Library) bool { return l.GoRedis }
	if floor, ok := floorName(d); ok && floor != "floor-rueidis" {
		for _, u := range []struct {
			what string
			runs [][]UncontendedResult
		}{{"1 goroutine", r.Uncontended1}, {fmt.Sprintf("1 goroutine, %s added each way", r.NetLatency), r.NetUncontended1}} {
			if len(u.runs) == 0 || len(pick(u.runs, uname, floor, ops)) == 0 {
				continue
			}
			peer, theirs := bestPeer(u.runs, uname, r.Libraries, ops, goRedis)
			mine, fl := ratios(pick(u.runs, uname, d, ops), theirs), ratios(pick(u.runs, uname, floor, ops), theirs)
			report(fmt.Sprintf("Uncontended, %s: ops/s ÷ the fastest go-redis peer, and the floor's (the fence's price; reported)", u.what),
				fmt.Sprintf("%.2f× %s; %s %.2f× (per repetition: %s; %s)", median(mine), peer, floor, median(fl), fmtRatios(mine), fmtRatios(fl)))
		}
	}
	for _, c := range r.NetContended {
		if c.Workers != 8 {
			continue
		}
		other := func(x ContendedResult) float64 { return nz(float64(x.OtherP50)) }
		mine, theirs := pick(c.Runs, cname, d, other), pick(c.Runs, cname, "floor-handoff", other)
		if math.IsNaN(median(theirs)) {
			continue
		}
		rs := ratios(mine, theirs)
		add(fmt.Sprintf("Contended W=8, %s, %s added each way: hand-off p50 to a waiter ≤ %.1f round trips (× floor-handoff's: one round trip)", c.Hold, r.NetLatency, handoffLimit),
			fmt.Sprintf("%.2f (%s vs %s; %.2f× the PING round trip of %s)", median(rs), ms(median(mine)), ms(median(theirs)),
				median(mine)/float64(r.NetRTT.LatencyProxy), us(float64(r.NetRTT.LatencyProxy))), median(rs) <= handoffLimit)
	}
	return ts
}

// floorName is the floor on the client of d, one of dlock's configurations.
func floorName(d string) (string, bool) {
	f, ok := map[string]string{"dlock": "floor", "dlock-ctx": "floor-ctx", "dlock-rueidis": "floor-rueidis"}[d]
	return f, ok
}

func goroutines(g int) string {
	if g == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", g)
}

// writeFloor writes the section of the runs by turns against the floor.
func (r *Report) writeFloor(w func(string, ...any)) {
	if len(r.FloorPairs) == 0 {
		return
	}
	w("## Runs by turns: dlock and the floor of a fenced lock\n\n")
	w("Each of dlock's configurations, with Acquire and with TryAcquire, and the floor on the same client (floor.go: a script of `SET NX PX`, `INCR` and `PEXPIRE`, and a compare-and-delete script, sent as a user of the client sends scripts, with nothing around them), by turns (a b, b a, a b, …): %s. The floor has no wake-one queue, no tombstone and no server clock in its fence; what dlock's scripts do beyond it is what DESIGN's principles 3, 5 and 6 ask for, and what dlock's library does beyond its scripts is the lock's lifetime (renewal, Lost, the release's guarantees) and every call bounded by the node timeout.\n\n", r.FloorNote)
	t := table{head: []string{"goroutines", "configuration", "floor", "pairs", "ops/s (median)", "floor ops/s (median)", "ratio (median)", "per pair"}}
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }
	for _, f := range r.FloorPairs {
		rs := f.Ratios()
		t.add(fmt.Sprint(f.Goroutines), f.Lib, f.Floor, fmt.Sprint(len(f.Pairs)), num(median(pick(f.Pairs, uname, f.Lib, ops))),
			num(median(pick(f.Pairs, uname, f.Floor, ops))), fmt.Sprintf("%.2f×", median(rs)), fmtRatios(rs))
	}
	w("%s\n", t)
}

// floorsIn returns those of floors that have a result in runs.
func floorsIn[T any](runs [][]T, name func(T) string, floors []Library) []Library {
	var out []Library
	for _, f := range floors {
		if !math.IsNaN(median(pick(runs, name, f.Name, func(T) float64 { return 1 }))) {
			out = append(out, f)
		}
	}
	return out
}
