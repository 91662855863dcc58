package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ContendedConfig is one contended configuration and its runs.
type ContendedConfig struct {
	Workers int
	Hold    time.Duration
	Runs    [][]ContendedResult // [repetition][library]
}

// Report holds every run of one invocation.
type Report struct {
	Date         time.Time
	Machine      string
	GoVersion    string
	RedisVersion string
	Versions     []string // "module version"
	Quick        bool
	Reps         int
	Settings     string
	Libraries    []Library
	// Ceilings are the ceiling's configurations (ceiling.go), whose rows
	// are in Uncontended1 and Uncontended64 alongside the libraries'.
	Ceilings []Library

	Uncontended1  [][]UncontendedResult
	Uncontended64 [][]UncontendedResult
	// Paired1 and Paired64 are dlock on rueidis and rueidislock-1key run
	// by turns (see Paired), a pair per row: issue 35's uncontended
	// targets use them when present. PairedNote says how they ran.
	Paired1, Paired64 [][]UncontendedResult
	PairedNote        string
	// FloorPairs are dlock's configurations (Acquire and TryAcquire) and
	// the floor on the same client run by turns: issue 46's uncontended
	// targets. FloorNote says how they ran.
	FloorPairs []FloorPairs
	FloorNote  string

	Contended      []ContendedConfig
	Semaphore      []ContendedResult // dlock with WithLimit(4), W=32, one per repetition
	ReadWrite      []ReadWriteResult // shared readers + one writer, one per repetition
	Multi          [][]MultiResult   // [repetition][variant]: AcquireAll, then the baseline
	Idle           [][]IdleResult
	IdleLong       []IdleResult // dlock's configurations only, one run each
	RedlockHealthy [][]LatencyResult
	RedlockFaulty  []LatencyResult
	FaultNote      string
	NodeTimeout    time.Duration
	Allocs         []AllocResult

	// The scale scenarios (dlock only; full runs only).
	ManyLocks   []ManyLocksResult
	ManyWaiters []ManyWaitersResult
	// ClusterWakeups: waiters on a Cluster (dlock only).
	ClusterWakeups []ClusterWakeupsResult
	// The uncontended and contended scenarios again, every client through
	// a LatencyProxy that adds NetLatency each way; NetRTT is the PING
	// round trip measured directly and through each kind of proxy.
	NetLatency       time.Duration
	NetRTT           RTTResult
	NetUncontended1  [][]UncontendedResult
	NetUncontended64 [][]UncontendedResult
	NetContended     []ContendedConfig
}

// pick returns, per repetition, f of lib's result (NaN when absent).
func pick[T any](runs [][]T, name func(T) string, lib string, f func(T) float64) []float64 {
	var out []float64
	for _, rep := range runs {
		v := math.NaN()
		for _, r := range rep {
			if name(r) == lib {
				v = f(r)
			}
		}
		out = append(out, v)
	}
	return out
}

func median(v []float64) float64 {
	var w []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			w = append(w, x)
		}
	}
	if len(w) == 0 {
		return math.NaN()
	}
	slices.Sort(w)
	if len(w)%2 == 1 {
		return w[len(w)/2]
	}
	return (w[len(w)/2-1] + w[len(w)/2]) / 2
}

func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

func fmtRatios(r []float64) string {
	var s []string
	for _, x := range r {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			s = append(s, "–")
			continue
		}
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, " ")
}

// msList renders durations in ns with ms, space-separated.
func msList(ds []float64) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = ms(d)
	}
	return strings.Join(s, " ")
}

func ms(d float64) string { // d in ns
	if math.IsNaN(d) {
		return "–"
	}
	switch {
	case d >= 1e9:
		return fmt.Sprintf("%.2f s", d/1e9)
	case d >= 1e6:
		return fmt.Sprintf("%.1f ms", d/1e6)
	default:
		return fmt.Sprintf("%.3f ms", d/1e6)
	}
}

func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func us(d float64) string { // d in ns
	if math.IsNaN(d) {
		return "–"
	}
	return fmt.Sprintf("%.0f µs", d/1e3)
}

func uname(r UncontendedResult) string { return r.Lib }
func cname(r ContendedResult) string   { return r.Lib }
func iname(r IdleResult) string        { return r.Lib }
func lname(r LatencyResult) string     { return r.Label }

type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for range t.head {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Target is one performance target and its verdict for one of dlock's
// configurations.
type Target struct {
	Name     string
	Lib      string // dlock, dlock-ctx
	Measured string
	Met      bool
	// Unjudged: the run gave the target nothing to compare with (the peer
	// had no sample in any repetition); Met is false.
	Unjudged bool
}

// bestPeer returns the peer (not one of dlock's configurations) with the
// highest median f among those that pass ok, and its per-repetition values.
func bestPeer[T any](runs [][]T, name func(T) string, libs []Library, f func(T) float64, ok func(Library) bool) (string, []float64) {
	best, bestV := "", math.Inf(-1)
	var bestVals []float64
	for _, l := range libs {
		if l.Dlock || !ok(l) {
			continue
		}
		v := pick(runs, name, l.Name, f)
		if m := median(v); m > bestV {
			best, bestV, bestVals = l.Name, m, v
		}
	}
	return best, bestVals
}

// DlockLibs names dlock's configurations in the report.
func (r *Report) DlockLibs() []string {
	var out []string
	for _, l := range r.Libraries {
		if l.Dlock {
			out = append(out, l.Name)
		}
	}
	return out
}

// Targets evaluates the targets on the runs, for each of dlock's
// configurations.
func (r *Report) Targets() []Target {
	var ts []Target
	for _, d := range r.DlockLibs() {
		ts = append(ts, r.targets(d)...)
		ts = append(ts, r.floorTargets(d)...)
	}
	return ts
}

// violations counts d's mutual-exclusion violations in the contended runs.
func (r *Report) violations(d string) int64 {
	var viol int64
	for _, c := range r.Contended {
		for _, rep := range c.Runs {
			for _, x := range rep {
				if x.Lib == d {
					viol += x.Violations
				}
			}
		}
	}
	return viol
}

// PairedPeer is the peer of dlock on another client family than go-redis
// in the targets, and in Paired's pairs: rueidislock in its README's
// one-instance configuration.
const PairedPeer = "rueidislock-1key"

// familyTargets are issue 35's targets for d, dlock on another client
// family than go-redis (rueidis): uncontended, at least rueidislock in its
// README's one-instance configuration; contended, go-redis' fairness and
// round trips; no violation.
func (r *Report) familyTargets(d string) []Target {
	var ts []Target
	add := func(name, measured string, met bool) {
		ts = append(ts, Target{Name: name, Lib: d, Measured: measured, Met: met})
	}
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }
	for _, u := range []struct {
		what        string
		runs, pairs [][]UncontendedResult
	}{{"1 goroutine", r.Uncontended1, r.Paired1}, {"64 goroutines", r.Uncontended64, r.Paired64}} {
		runs, each := u.runs, "repetition"
		if len(u.pairs) > 0 {
			runs, each = u.pairs, fmt.Sprintf("%d runs by turns, per pair", len(u.pairs))
		}
		if theirs := pick(runs, uname, PairedPeer, ops); len(theirs) > 0 {
			rs := ratios(pick(runs, uname, d, ops), theirs)
			add("Uncontended, "+u.what+": ops/s ≥ 1.0× "+PairedPeer,
				fmt.Sprintf("%.2f× %s (%s: %s)", median(rs), PairedPeer, each, fmtRatios(rs)), median(rs) >= 1)
		}
	}
	for _, c := range r.Contended {
		if c.Workers == 32 && c.Hold == 200*time.Microsecond {
			f := pick(c.Runs, cname, d, func(x ContendedResult) float64 { return x.Fairness() })
			add("Contended W=32, 200µs: own fairness min/max ≥ 0.9",
				fmt.Sprintf("%.2f (per repetition: %s)", median(f), fmtRatios(f)), median(f) >= 0.9)
			rt := pick(c.Runs, cname, d, func(x ContendedResult) float64 { return x.RoundTrips })
			add("Contended W=32, 200µs: round trips per acquisition ≤ 3",
				fmt.Sprintf("%.2f (per repetition: %s)", median(rt), fmtRatios(rt)), median(rt) <= 3)
		}
	}
	if len(r.Contended) > 0 {
		viol := r.violations(d)
		add("Contended: mutual-exclusion violations = 0 (all runs)", fmt.Sprint(viol), viol == 0)
	}
	return ts
}

// onGoRedis reports whether the library named name is built on go-redis.
func (r *Report) onGoRedis(name string) bool {
	for _, l := range r.Libraries {
		if l.Name == name {
			return l.GoRedis
		}
	}
	return false
}

// targets evaluates the targets for the dlock configuration d.
func (r *Report) targets(d string) []Target {
	if !r.onGoRedis(d) {
		return r.familyTargets(d)
	}
	var ts []Target
	add := func(name, measured string, met bool) {
		ts = append(ts, Target{Name: name, Lib: d, Measured: measured, Met: met})
	}
	goRedis := func(l Library) bool { return l.GoRedis }
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }

	ratioTarget := func(name string, mine, theirs []float64, peer string, limit float64, atLeast bool) {
		if math.IsNaN(median(theirs)) { // no sample in any repetition
			ts = append(ts, Target{Name: name, Lib: d, Measured: "– (" + peer + ": no sample in any repetition)", Unjudged: true})
			return
		}
		rs := ratios(mine, theirs)
		m := median(rs)
		met := m >= limit
		if !atLeast {
			met = m <= limit
		}
		add(name, fmt.Sprintf("%.2f× %s (per repetition: %s)", m, peer, fmtRatios(rs)), met)
	}

	if len(r.Uncontended1) > 0 {
		// The lean everyday path (issue 31): within 5% of the fastest
		// peer on go-redis.
		limit := 0.95
		peer, theirs := bestPeer(r.Uncontended1, uname, r.Libraries, ops, goRedis)
		ratioTarget(fmt.Sprintf("Uncontended, 1 goroutine: ops/s ≥ %.2f× the fastest go-redis peer", limit),
			pick(r.Uncontended1, uname, d, ops), theirs, peer, limit, true)
		usec := func(x UncontendedResult) float64 { return x.ScriptUsec }
		ratioTarget("Uncontended: Redis time in scripts per Acquire+Release ≤ 2× redislock's (its SET NX scripts)",
			pick(r.Uncontended1, uname, d, usec), pick(r.Uncontended1, uname, "redislock", usec), "redislock", 2, false)
	}
	if len(r.Uncontended64) > 0 {
		peer, theirs := bestPeer(r.Uncontended64, uname, r.Libraries, ops, goRedis)
		ratioTarget("Uncontended, 64 goroutines: ops/s ≥ 1.15× the fastest go-redis peer",
			pick(r.Uncontended64, uname, d, ops), theirs, peer, 1.15, true)
		if rue := pick(r.Uncontended64, uname, "rueidislock", ops); len(rue) > 0 {
			rs := ratios(pick(r.Uncontended64, uname, d, ops), rue)
			add("Uncontended, 64 goroutines: ops/s vs rueidislock (reported: the target of dlock on rueidis)",
				fmt.Sprintf("%.2f× rueidislock (per repetition: %s)", median(rs), fmtRatios(rs)), true)
		}
	}
	for _, c := range r.Contended {
		if c.Workers == 32 && c.Hold == 200*time.Microsecond {
			acq := func(x ContendedResult) float64 { return x.AcqPerSec }
			fair := func(x ContendedResult) float64 { return x.Fairness() }
			fairEnough := func(l Library) bool { return median(pick(c.Runs, cname, l.Name, fair)) >= 0.3 }
			peer, theirs := bestPeer(c.Runs, cname, r.Libraries, acq, fairEnough)
			if peer == "" {
				add("Contended W=32, 200µs: acquisitions/s ≥ 1.3× the best peer with fairness ≥ 0.3", "no peer reached fairness 0.3", true)
			} else {
				ratioTarget("Contended W=32, 200µs: acquisitions/s ≥ 1.3× the best peer with fairness ≥ 0.3",
					pick(c.Runs, cname, d, acq), theirs, peer, 1.3, true)
			}
			f := pick(c.Runs, cname, d, fair)
			add("Contended W=32, 200µs: own fairness min/max ≥ 0.9",
				fmt.Sprintf("%.2f (per repetition: %s)", median(f), fmtRatios(f)), median(f) >= 0.9)
			rt := pick(c.Runs, cname, d, func(x ContendedResult) float64 { return x.RoundTrips })
			add("Contended W=32, 200µs: round trips per acquisition ≤ 3",
				fmt.Sprintf("%.2f (per repetition: %s)", median(rt), fmtRatios(rt)), median(rt) <= 3)
			cmds := pick(c.Runs, cname, d, func(x ContendedResult) float64 { return x.Commands })
			add("Contended W=32, 200µs: all Redis commands per acquisition ≤ 20",
				fmt.Sprintf("%.1f (per repetition: %s)", median(cmds), fmtRatios(cmds)), median(cmds) <= 20)
			cpu := func(x ContendedResult) float64 { return float64(x.ClientCPU) }
			ratioTarget("Contended W=32, 200µs: client CPU per acquisition ≤ 0.5× redislock-tuned",
				pick(c.Runs, cname, d, cpu), pick(c.Runs, cname, "redislock-tuned", cpu), "redislock-tuned", 0.5, false)
		}
		if c.Workers == 8 && c.Hold == 5*time.Millisecond {
			for _, m := range []struct {
				what string
				f    func(ContendedResult) float64
			}{
				{"handoff p50 (to whoever acquires next)", func(x ContendedResult) float64 { return float64(x.HandoffP50) }},
				{"handoff p50 to another worker (a waiter)", func(x ContendedResult) float64 { return nz(float64(x.OtherP50)) }},
			} {
				mine := pick(c.Runs, cname, d, m.f)
				add("Contended W=8, 5ms: "+m.what+" ≤ 0.3 ms",
					fmt.Sprintf("%s (per repetition: %s ms)", ms(median(mine)), fmtRatios(scale(mine, 1e-6))), median(mine) <= 0.3e6)
				ratioTarget("Contended W=8, 5ms: "+m.what+" ≤ 0.1× redsync (defaults)",
					mine, pick(c.Runs, cname, "redsync", m.f), "redsync", 0.1, false)
			}
		}
	}
	if len(r.Contended) > 0 {
		viol := r.violations(d)
		add("Contended: mutual-exclusion violations = 0 (all runs)", fmt.Sprint(viol), viol == 0)
	}
	if len(r.Semaphore) > 0 && d == "dlock-ctx" {
		var viol int64
		for _, x := range r.Semaphore {
			viol += x.Violations
		}
		add("Semaphore, limit 4, W=32, 200µs: more than 4 holders at once = 0 (all runs)", fmt.Sprint(viol), viol == 0)
	}
	if len(r.Idle) > 0 {
		pw := pick(r.Idle, iname, d, func(x IdleResult) float64 { return x.PerWaiter() })
		add(fmt.Sprintf("Idle waiting (%s window): ≤ 0.2 Redis commands per second per waiter", r.Idle[0][0].Window),
			fmt.Sprintf("%.3f (per repetition: %s)", median(pw), fmtRatios(pw)), median(pw) <= 0.2)
	}
	for _, x := range r.IdleLong {
		if x.Lib == d {
			add(fmt.Sprintf("Idle waiting (%s window, past the waiters' fallback wake-ups): ≤ 0.2 Redis commands per second per waiter", x.Window),
				fmt.Sprintf("%.3f", x.PerWaiter()), x.PerWaiter() <= 0.2)
		}
	}
	if len(r.RedlockHealthy) > 0 {
		p50 := func(x LatencyResult) float64 { return float64(x.AcqP50) }
		d5 := pick(r.RedlockHealthy, lname, d+", 5 nodes", p50)
		ratioTarget("Redlock 5 nodes: acquire p50 ≤ 1.0× redsync WithFailFast",
			d5, pick(r.RedlockHealthy, lname, "redsync-failfast, 5 nodes", p50), "redsync-failfast", 1.0, false)
		rel50 := func(x LatencyResult) float64 { return float64(x.RelP50) }
		ratioTarget("Redlock 5 nodes: release p50 ≤ 1.2× redsync WithFailFast",
			pick(r.RedlockHealthy, lname, d+", 5 nodes", rel50), pick(r.RedlockHealthy, lname, "redsync-failfast, 5 nodes", rel50), "redsync-failfast", 0.8, false)
		d1 := pick(r.RedlockHealthy, lname, d+", 1 node", p50)
		rs := ratios(d5, d1)
		add("Redlock 5 nodes vs the same on 1 node (reported, no target)",
			fmt.Sprintf("%.2f× (per repetition: %s)", median(rs), fmtRatios(rs)), true)
		for _, f := range r.RedlockFaulty {
			if f.Lib != d {
				continue
			}
			ratio := float64(f.AcqP50) / median(d5)
			add("Redlock, one node frozen + one killed: acquire p50 ≤ 2× healthy",
				fmt.Sprintf("%.2f× (%s vs %s)", ratio, ms(float64(f.AcqP50)), ms(median(d5))), ratio <= 2)
			limit := r.NodeTimeout + r.NodeTimeout/5
			add(fmt.Sprintf("Redlock, one node frozen + one killed: no call stalls past the node timeout (%s)", r.NodeTimeout),
				fmt.Sprintf("acquire max %s, release max %s, %d errors in %d calls", ms(float64(f.AcqMax)), ms(float64(f.RelMax)), f.Errors, f.Calls),
				f.AcqMax <= limit && f.RelMax <= limit && f.Errors == 0)
		}
	}
	for _, x := range r.ManyLocks {
		if x.Lib != d {
			continue
		}
		what := fmt.Sprintf("%d held locks, TTL %s", x.Locks, x.TTL)
		add(what+": script calls per lock per renewal interval ≤ 0.1",
			fmt.Sprintf("%.3f", x.ScriptsPerLockInterval), x.ScriptsPerLockInterval <= 0.1)
		add(what+": client CPU ≤ 6% of a core", fmt.Sprintf("%.1f%%", x.ClientCPU), x.ClientCPU <= 6)
		add(what+": heap ≤ 1.5 KB per lock", fmt.Sprintf("%.0f B", x.HeapPerLock), x.HeapPerLock <= 1536)
		add(what+": no goroutine per lock", fmt.Sprintf("%.2f per lock", x.GoroutinesPerLock), x.GoroutinesPerLock < 0.01)
	}
	if len(r.ClusterWakeups) > 0 && d == r.ClusterWakeups[0].Lib {
		x := r.ClusterWakeups[0]
		var pub, errs int64
		var p50s []float64
		var all []time.Duration
		for _, y := range r.ClusterWakeups {
			pub += y.BusPublishes
			errs += y.Errors
			p50s = append(p50s, float64(y.WakeP50))
			all = append(all, y.Wakes...)
		}
		p50 := percentile(all, 50)
		what := fmt.Sprintf("Cluster, %d waiters on %d keys (%d runs)", x.Waiters, x.Keys, len(r.ClusterWakeups))
		add(what+": 0 classic publishes over the cluster bus", fmt.Sprintf("%d, %d errors", pub, errs), pub == 0 && errs == 0)
		add(what+": release → next holder p50 ≤ 0.6 ms", fmt.Sprintf("%s (the %d handoffs of the runs together, p99 %s; p50 per run: %s)", ms(float64(p50)), len(all), ms(float64(percentile(all, 99))), msList(p50s)), len(all) > 0 && p50 <= 600*time.Microsecond)
	}
	var dl, rl *AllocResult
	for i, a := range r.Allocs {
		if a.Nodes == 1 && a.Lib == d {
			dl = &r.Allocs[i]
		}
		if a.Nodes == 1 && a.Lib == "redislock" {
			rl = &r.Allocs[i]
		}
	}
	if dl != nil && rl != nil {
		add("Allocations per Acquire+Release on one Redis ≤ 40",
			fmt.Sprintf("%d allocs/op, %d B/op (redislock: %d allocs/op, %d B/op)", dl.AllocsPerOp, dl.BytesPerOp, rl.AllocsPerOp, rl.BytesPerOp),
			dl.AllocsPerOp <= 40)
	}
	return ts
}

// nz maps 0 (no sample) to NaN, so that it is left out of medians.
func nz(x float64) float64 {
	if x == 0 {
		return math.NaN()
	}
	return x
}

func scale(v []float64, k float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * k
	}
	return out
}

// repetitions is "1 repetition" or "n repetitions".
func repetitions(n int) string {
	if n == 1 {
		return "1 repetition"
	}
	return fmt.Sprintf("%d repetitions", n)
}

// Markdown renders the report.
func (r *Report) Markdown(charts bool) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# dlock benchmarks\n\n")
	w("Generated by `make bench` (bench/cmd/dlockbench) on %s.", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	if r.Quick {
		w(" **Quick run (QUICK=1): too short to judge speed.**")
	}
	w("\n\n")
	w("- Machine: %s\n- Go: %s; redis-server %s, started by the benchmark on 127.0.0.1 (no persistence)\n", r.Machine, r.GoVersion, r.RedisVersion)
	w("- Libraries: %s\n", strings.Join(r.Versions, ", "))
	w("- %s\n", r.Settings)
	w("- Scenarios run interleaved (A B C … A B C …) over %d repetitions; tables show the median of the repetitions, targets show the median ratio and the ratio in each repetition (both measured in the same repetition). The machine is shared and noisy: read ratios, not absolute numbers.\n\n", r.Reps)
	w("How each library is used:\n\n")
	for _, l := range r.Libraries {
		w("- **%s**: %s\n", l.Name, l.Note)
	}
	w("- **redsync-failfast** (Redlock only): WithFailFast(true), default go-redis clients\n")
	w("\n## Targets\n\n")
	w("Each target for each of dlock's configurations, against the peers measured in the same repetitions.\n\n")
	dl := r.DlockLibs()
	head := []string{"target"}
	for _, d := range dl {
		head = append(head, d, "verdict")
	}
	t := table{head: head}
	var order []string
	cells := map[string][]string{}
	for _, x := range r.Targets() {
		row, ok := cells[x.Name]
		if !ok {
			order = append(order, x.Name)
			row = make([]string, 2*len(dl))
			for i := range row {
				row[i] = "–"
			}
		}
		v := "met"
		switch {
		case x.Unjudged:
			v = "not judged"
		case !x.Met:
			v = "**missed**"
		}
		i := slices.Index(dl, x.Lib)
		row[2*i], row[2*i+1] = x.Measured, v
		cells[x.Name] = row
	}
	for _, name := range order {
		t.add(append([]string{name}, cells[name]...)...)
	}
	w("%s\n", t)

	if charts {
		w("![Handoff latency](bench-handoff.svg)\n\n![Commands per acquisition](bench-commands.svg)\n\n![Redlock latency](bench-redlock.svg)\n\n")
	}

	for _, u := range []struct {
		title string
		runs  [][]UncontendedResult
	}{{"Uncontended, 1 goroutine", r.Uncontended1}, {"Uncontended, 64 goroutines (one process, distinct keys)", r.Uncontended64}} {
		if len(u.runs) == 0 {
			continue
		}
		w("## %s\n\nAcquire+release pairs per second, and the latency of each call.\n\n", u.title)
		w("%s\n", r.uncontendedTable(u.runs, false, nil))
	}
	r.writeCeiling(w)
	r.writeFloor(w)
	r.writePaired(w)

	for _, c := range r.Contended {
		w("## Contended: W=%d workers, hold %s\n\n", c.Workers, c.Hold)
		w("One key; every worker is its own process (own client, own locker), acquires, holds the lock for %s (a sleep), releases, and at once asks again. %s\n\n", c.Hold, contendedLegend)
		w("%s\n", r.contendedTable(c, false, nil))
	}

	if len(r.Semaphore) > 0 {
		w("## Semaphore: limit 4, W=32 workers, hold 200µs\n\nOne key, `WithLimit(4)` (dlock-ctx; no peer has a semaphore): every worker is its own process, acquires a permit, holds it for 200µs, releases, and asks again. Medians of the repetitions.\n\n")
		med := func(f func(ContendedResult) float64) float64 {
			var v []float64
			for _, x := range r.Semaphore {
				v = append(v, f(x))
			}
			return median(v)
		}
		t := table{head: []string{"library", "acq/s", "Acquire wait p50", "Acquire wait p99", "fairness", "round trips/acq", "commands/acq", "client CPU/acq", "Redis CPU/acq", "violations (> 4 holders)", "errors"}}
		t.add(r.Semaphore[0].Lib, num(med(func(x ContendedResult) float64 { return x.AcqPerSec })),
			ms(med(func(x ContendedResult) float64 { return float64(x.WaitP50) })),
			ms(med(func(x ContendedResult) float64 { return float64(x.WaitP99) })),
			fmt.Sprintf("%.2f", med(func(x ContendedResult) float64 { return x.Fairness() })),
			num(med(func(x ContendedResult) float64 { return x.RoundTrips })),
			num(med(func(x ContendedResult) float64 { return x.Commands })),
			us(med(func(x ContendedResult) float64 { return float64(x.ClientCPU) })),
			us(med(func(x ContendedResult) float64 { return float64(x.RedisCPU) })),
			num(med(func(x ContendedResult) float64 { return float64(x.Violations) })),
			num(med(func(x ContendedResult) float64 { return float64(x.Errors) })))
		w("%s\n", t)
	}

	if len(r.ReadWrite) > 0 {
		x := r.ReadWrite[0]
		w("## Shared holds: %d readers, 1 writer, hold %s\n\n", x.Readers, x.Hold)
		w("One key (%s; no peer has shared holds): %d reader processes each loop `Acquire(WithShared())`, hold %s (a sleep), `Release`; one writer process loops a plain (exclusive) `Acquire`, hold %s, `Release`; measured over %s after a warm-up, %s, medians. Reported, no target. Reads/s and writes/s: holds completed (Release returned) in the window. Writer wait: the writer's Acquire, call → return (a waiting writer stops new shared holds, so it waits for the shared holds in progress to end). Round trips: commands all clients sent per hold (reads + writes); commands: all commands Redis ran per hold, those inside scripts included (INFO commandstats).\n\n",
			x.Lib, x.Readers, x.Hold, x.Hold, x.Window, repetitions(len(r.ReadWrite)))
		med := func(f func(ReadWriteResult) float64) float64 {
			var v []float64
			for _, x := range r.ReadWrite {
				v = append(v, f(x))
			}
			return median(v)
		}
		t := table{head: []string{"library", "reads/s", "writes/s", "writer wait p50", "writer wait p99", "reader wait p50", "reader wait p99", "round trips/hold", "commands/hold", "violations", "errors"}}
		t.add(x.Lib, num(med(func(x ReadWriteResult) float64 { return x.ReadsPerSec })),
			num(med(func(x ReadWriteResult) float64 { return x.WritesPerSec })),
			ms(med(func(x ReadWriteResult) float64 { return float64(x.WriterWaitP50) })),
			ms(med(func(x ReadWriteResult) float64 { return float64(x.WriterWaitP99) })),
			ms(med(func(x ReadWriteResult) float64 { return float64(x.ReaderWaitP50) })),
			ms(med(func(x ReadWriteResult) float64 { return float64(x.ReaderWaitP99) })),
			num(med(func(x ReadWriteResult) float64 { return x.RoundTrips })),
			num(med(func(x ReadWriteResult) float64 { return x.Commands })),
			num(med(func(x ReadWriteResult) float64 { return float64(x.Violations) })),
			num(med(func(x ReadWriteResult) float64 { return float64(x.Errors) })))
		w("%s\n", t)
	}

	if len(r.Multi) > 0 && len(r.Multi[0]) > 0 {
		x := r.Multi[0][0]
		w("## Two keys at once: AcquireAll vs sorted Acquires, %d workers, %d of %d keys, hold %s\n\n", x.Workers, x.PerOp, x.Keys, x.Hold)
		w("dlock-ctx; %d worker goroutines spread over %d processes each loop: pick %d distinct keys of %d at random (in random order), lock them all, hold %s (a sleep), release them one after the other. *%s*: one `AcquireAll` call; *%s*: the baseline written by hand, the keys sorted by name and taken with one `Acquire` each, in that order. The variants run interleaved, %s, medians; the ratio is AcquireAll / baseline in the same repetition. Reported, no target. Wait: from the call to holding every key. Round trips and commands per acquisition (of all the keys), releases included.\n\n",
			x.Workers, x.Processes, x.PerOp, x.Keys, x.Hold, MultiAcquireAll, MultiOrdered, repetitions(len(r.Multi)))
		vname := func(x MultiResult) string { return string(x.Variant) }
		t := table{head: []string{"variant", "acq/s", "wait p50", "wait p99", "round trips/acq", "commands/acq", "violations", "errors"}}
		for _, v := range []MultiVariant{MultiAcquireAll, MultiOrdered} {
			g := func(f func(MultiResult) float64) float64 { return median(pick(r.Multi, vname, string(v), f)) }
			t.add(string(v), num(g(func(x MultiResult) float64 { return x.AcqPerSec })),
				ms(g(func(x MultiResult) float64 { return float64(x.WaitP50) })),
				ms(g(func(x MultiResult) float64 { return float64(x.WaitP99) })),
				num(g(func(x MultiResult) float64 { return x.RoundTrips })),
				num(g(func(x MultiResult) float64 { return x.Commands })),
				num(g(func(x MultiResult) float64 { return float64(x.Violations) })),
				num(g(func(x MultiResult) float64 { return float64(x.Errors) })))
		}
		ratio := func(f func(MultiResult) float64) []float64 {
			return ratios(pick(r.Multi, vname, string(MultiAcquireAll), f), pick(r.Multi, vname, string(MultiOrdered), f))
		}
		acqR := ratio(func(x MultiResult) float64 { return x.AcqPerSec })
		p99R := ratio(func(x MultiResult) float64 { return float64(x.WaitP99) })
		rx := func(v []float64) string { return fmt.Sprintf("%.2f×", median(v)) }
		t.add("ratio AcquireAll / baseline", rx(acqR),
			rx(ratio(func(x MultiResult) float64 { return float64(x.WaitP50) })), rx(p99R),
			rx(ratio(func(x MultiResult) float64 { return x.RoundTrips })),
			rx(ratio(func(x MultiResult) float64 { return x.Commands })), "–", "–")
		w("%s\nAcquireAll / baseline per repetition: acq/s %s; wait p99 %s.\n\n", t, fmtRatios(acqR), fmtRatios(p99R))
	}

	if len(r.Idle) > 0 {
		n, win := r.Idle[0][0].Waiters, r.Idle[0][0].Window
		w("## Idle waiting: %d waiters, %s\n\nOne process holds the lock; %d other processes wait for it. Measured over %s after the waiters settled: every command Redis ran (the holder's included), the commands the clients sent, and CPU.\n\n", n, win, n, win)
		t := table{head: []string{"library", "Redis commands/s", "per waiter", "round trips/s", "client CPU", "Redis CPU"}}
		for _, l := range r.Libraries {
			g := func(f func(IdleResult) float64) float64 { return median(pick(r.Idle, iname, l.Name, f)) }
			t.add(l.Name, num(g(func(x IdleResult) float64 { return x.CommandsPerSec })),
				fmt.Sprintf("%.3f", g(func(x IdleResult) float64 { return x.PerWaiter() })),
				num(g(func(x IdleResult) float64 { return x.RoundTripsPerSec })),
				ms(g(func(x IdleResult) float64 { return float64(x.ClientCPU) })),
				ms(g(func(x IdleResult) float64 { return float64(x.RedisCPU) })))
		}
		w("%s\n", t)
	}
	if len(r.IdleLong) > 0 {
		x := r.IdleLong[0]
		w("### Idle waiting over %s (dlock)\n\nThe same, measured over %s after the waiters settled, for dlock's configurations only: a dlock waiter is woken by the release, and otherwise only by a fallback timer (first after 11–15 s, doubling to 45–60 s), so a 5 s window would not show that work.", x.Window, x.Window)
		if x.Window >= time.Minute {
			w(" This window covers each waiter's first two fallback wake-ups and the holder's renewals (every 10 s), more than a waiter costs later on (one wake-up per 45–60 s).")
		}
		w("\n\n")
		t := table{head: []string{"library", "Redis commands/s", "per waiter", "round trips/s", "client CPU", "Redis CPU"}}
		for _, x := range r.IdleLong {
			t.add(x.Lib, num(x.CommandsPerSec), fmt.Sprintf("%.3f", x.PerWaiter()), num(x.RoundTripsPerSec), ms(float64(x.ClientCPU)), ms(float64(x.RedisCPU)))
		}
		w("%s\n", t)
	}

	r.scaleMarkdown(w)
	r.clusterWakeupsMarkdown(w)
	r.networkMarkdown(w)

	if len(r.RedlockHealthy) > 0 {
		w("## Redlock\n\nUncontended acquire+release from one process, one call at a time. The five servers share the machine's cores with the clients.\n\n")
		t := table{head: []string{"configuration", "acquire p50", "acquire p99", "acquire max", "release p50", "errors"}}
		for _, x := range r.RedlockHealthy[0] {
			g := func(f func(LatencyResult) float64) float64 { return median(pick(r.RedlockHealthy, lname, x.Label, f)) }
			t.add(x.Label, ms(g(func(x LatencyResult) float64 { return float64(x.AcqP50) })),
				ms(g(func(x LatencyResult) float64 { return float64(x.AcqP99) })),
				ms(g(func(x LatencyResult) float64 { return float64(x.AcqMax) })),
				ms(g(func(x LatencyResult) float64 { return float64(x.RelP50) })),
				num(g(func(x LatencyResult) float64 { return float64(x.Errors) })))
		}
		w("%s\n", t)
		if len(r.RedlockFaulty) > 0 {
			w("### One node frozen (SIGSTOP), one killed\n\n%s\n\n", r.FaultNote)
			t := table{head: []string{"configuration", "calls", "acquire p50", "acquire max", "release max", "errors"}}
			for _, x := range r.RedlockFaulty {
				t.add(x.Label, fmt.Sprint(x.Calls), ms(float64(x.AcqP50)), ms(float64(x.AcqMax)), ms(float64(x.RelMax)), fmt.Sprint(x.Errors))
			}
			w("%s\n", t)
		}
	}

	if len(r.Allocs) > 0 {
		w("## Allocations\n\nOne Acquire+Release (uncontended), measured with testing.Benchmark in the same process. `go test -bench AcquireRelease -benchmem` in the root module and in bench/ measures the same operations (its counts differ by a few allocations: a separate process, other warm-up).\n\n")
		t := table{head: []string{"library", "nodes", "allocs/op", "B/op", "time/op"}}
		for _, a := range r.Allocs {
			t.add(a.Lib, fmt.Sprint(a.Nodes), fmt.Sprint(a.AllocsPerOp), fmt.Sprint(a.BytesPerOp), us(float64(a.NsPerOp)))
		}
		w("%s\n", t)
	}
	return b.String()
}

// scaleMarkdown renders the many-locks and many-waiters sections.
func (r *Report) scaleMarkdown(w func(string, ...any)) {
	if len(r.ManyLocks) > 0 {
		x := r.ManyLocks[0]
		w("## Many locks held: %d locks, one Locker, TTL %s\n\n", x.Locks, x.TTL)
		w("%s, one redis-server; no peer (dlock only). One Locker acquires %d locks (%d Acquire calls at a time, distinct keys) with `WithTTL(%s)`, auto-renewed (every TTL/3 = %s), and holds them for a measured window of %s once they all are. Redis commands/s: every command Redis ran in the window, those inside scripts included (INFO commandstats); sent: the commands the Locker's client sent (round trips). Script calls: EVAL + EVALSHA, per lock per renewal interval (1.00 = one script call per lock per interval). Client CPU: this process's user + system time (getrusage) over the window's wall time, in %% of one core (the process runs nothing else meanwhile); Redis CPU likewise (used_cpu_user + used_cpu_sys). Heap per lock: HeapInuse after a GC with the locks held less the same before acquiring them (after a warm-up that opened the connections), per lock; goroutines per lock likewise (runtime.NumGoroutine). Lost: locks whose Lost channel closed during the window. Reported, no target.\n\n",
			x.Lib, x.Locks, x.Par, x.TTL, x.TTL/3, x.Window.Round(time.Millisecond))
		t := table{head: []string{"library", "locks", "acquire all", "Redis commands/s", "sent/s", "script calls/s", "script calls per lock per TTL/3", "client CPU", "Redis CPU", "heap per lock", "goroutines per lock", "pool conns (before → after)", "lost", "release errors"}}
		for _, x := range r.ManyLocks {
			t.add(x.Lib, fmt.Sprint(x.Locks), ms(float64(x.AcquireTime)), num(x.CommandsPerSec), num(x.SentPerSec),
				num(float64(x.Scripts)/x.Window.Seconds()), fmt.Sprintf("%.2f", x.ScriptsPerLockInterval),
				fmt.Sprintf("%.1f%%", x.ClientCPU), fmt.Sprintf("%.1f%%", x.RedisCPU),
				fmt.Sprintf("%.0f B", x.HeapPerLock), fmt.Sprintf("%.2f", x.GoroutinesPerLock),
				fmt.Sprintf("%d → %d", x.PoolConns0, x.PoolConns1), fmt.Sprint(x.Lost), fmt.Sprint(x.ReleaseErrors))
		}
		w("%s\n", t)
	}
	if len(r.ManyWaiters) > 0 {
		x := r.ManyWaiters[0]
		w("## Many waiters in one Locker: %d waiters on %d keys\n\n", x.Waiters, x.Waiters)
		w("%s; no peer (dlock only). A holder Locker holds %d keys (TTL 30s, auto-renewed); one waiter Locker runs %d goroutines, each `Acquire`-ing its own key. Once every key's waiting set (`dlock:{KEY}:waiters`) holds the waiter, and after a settle, an idle window of %s: sent/s is the commands the waiter Locker's client sent (Counter hook: round trips, not pub/sub messages); Redis commands/s every command the nodes ran, the holder's renewals and those inside scripts included; client CPU this process's (holder and waiters), in %% of one core; connections: the waiter client's connections on the nodes at the window's end (CLIENT LIST by client name, pub/sub included; go-redis' own count, pool TotalConns + active pub/sub, in brackets). Then the %d held keys are released one at a time, each after the previous waiter got its key (or %s passed): wake-up is the holder's Release returning → that key's waiter's Acquire returning. Registration: from the first Acquire call to every waiter registered. Reported, no target.\n\n",
			x.Lib, x.Waiters, x.Waiters, x.Window.Round(time.Millisecond), x.Waiters, WakeTimeout)
		t := table{head: []string{"deployment", "waiters", "registration", "sent/s (waiter Locker)", "sent/s per waiter", "Redis commands/s (all)", "client CPU", "connections (waiter Locker)", "wake-up p50", "wake-up p99", "wake-up max", "woken", "late", "errors"}}
		for _, x := range r.ManyWaiters {
			t.add(x.Deployment, fmt.Sprint(x.Waiters), ms(float64(x.RegisterTime)), num(x.SentPerSec),
				fmt.Sprintf("%.3f", x.SentPerSec/float64(x.Waiters)), num(x.CommandsPerSec),
				fmt.Sprintf("%.1f%%", x.ClientCPU), fmt.Sprintf("%d (%d)", x.Conns, x.PoolConns),
				ms(float64(x.WakeP50)), ms(float64(x.WakeP99)), ms(float64(x.WakeMax)),
				fmt.Sprint(x.Woken), fmt.Sprint(x.Late), fmt.Sprint(x.Errors))
		}
		w("%s\n", t)
		for _, x := range r.ManyWaiters {
			if x.FirstError != "" {
				w("First error (%s): %s\n\n", x.Deployment, x.FirstError)
			}
		}
	}
}

// clusterWakeupsMarkdown renders the Cluster wake-ups section.
func (r *Report) clusterWakeupsMarkdown(w func(string, ...any)) {
	if len(r.ClusterWakeups) == 0 {
		return
	}
	x := r.ClusterWakeups[0]
	w("## Wake-ups on a Cluster: %d waiters on %d keys, %d masters\n\n", x.Waiters, x.Keys, x.Masters)
	w("Each row is one run, with fresh clients and Lockers, on one Cluster.\n\n")
	w("%s; no peer (the peers do not wake waiters: they poll). A Cluster of %d masters on this machine; %d keys, spread evenly over the masters (distinct slots); %d waiters, %d per key, each its own client and Locker (as separate processes would be), each acquiring its key %d times, holding it 2 ms, releasing it. Bus publishes: the classic publishes the masters sent over the cluster bus meanwhile (`cluster_stats_messages_publish_sent`, summed over the masters): a PUBLISH on a Cluster is sent to every node, a sharded SPUBLISH stays on the key's shard. Wake-up: the releasing waiter's Release returning → the next holder's Acquire returning (0 when the next holder was told before the releaser read its reply), over the handoffs from one waiter to another.\n\n",
		x.Lib, x.Masters, x.Keys, x.Waiters, x.Waiters/max(x.Keys, 1), x.Rounds)
	t := table{head: []string{"run", "library", "acquisitions", "handoffs", "bus publishes", "wake-up p50", "wake-up p99", "wake-up max", "errors"}}
	for i, x := range r.ClusterWakeups {
		t.add(fmt.Sprint(i+1), x.Lib, fmt.Sprint(x.Acquisitions), fmt.Sprint(x.Handoffs), fmt.Sprint(x.BusPublishes),
			ms(float64(x.WakeP50)), ms(float64(x.WakeP99)), ms(float64(x.WakeMax)), fmt.Sprint(x.Errors))
	}
	w("%s\n", t)
	for _, x := range r.ClusterWakeups {
		if x.FirstError != "" {
			w("First error: %s\n\n", x.FirstError)
		}
	}
}

// networkMarkdown renders the sections of the runs through the proxy.
func (r *Report) networkMarkdown(w func(string, ...any)) {
	if len(r.NetUncontended1)+len(r.NetUncontended64)+len(r.NetContended) == 0 {
		return
	}
	reps := max(len(r.NetUncontended1), len(r.NetUncontended64))
	for _, c := range r.NetContended {
		reps = max(reps, len(c.Runs))
	}
	w("## Over a network: %s added each way\n\n", r.NetLatency)
	rt := r.NetRTT
	w("The uncontended and contended scenarios again, with every library's clients connected through a TCP proxy on loopback (bench.LatencyProxy, a fresh one for each library's run), a delay line in each direction: it forwards what it read a fixed delay later, and what is sent meanwhile keeps flowing. The delay, %s, is %s less half of what the proxy's own hop adds to a PING round trip (%s through a proxy without delay, %s direct): through the proxy a PING round trip measured %s, i.e. %s added each way (medians of 500). INFO goes to the server directly. dlocktest.Proxy with `SetLatency(%s)` (also per direction) measured %s: it waits with time.Sleep, and a sleep under a millisecond lasts about a millisecond in an otherwise idle Go process (the runtime's netpoller waits in whole milliseconds), so it is not used here. The proxy runs in the benchmark's process: its CPU is in the client CPU columns. %s, medians; ratios are taken in the same repetition (the median of the per-repetition ratios); *vs loopback* is the library's median here over its median in the loopback tables above.\n\n",
		us(float64(rt.Delay)), r.NetLatency, us(float64(rt.Hop)), us(float64(rt.Direct)), us(float64(rt.LatencyProxy)), us(float64(rt.AddedEachWay())),
		r.NetLatency, ms(float64(rt.DlocktestProxy)), repetitions(reps))
	for _, u := range []struct {
		title      string
		runs, base [][]UncontendedResult
	}{{"1 goroutine", r.NetUncontended1, r.Uncontended1}, {"64 goroutines (one process, distinct keys)", r.NetUncontended64, r.Uncontended64}} {
		if len(u.runs) == 0 {
			continue
		}
		w("### Uncontended over the network, %s\n\nAcquire+release pairs per second, and the latency of each call.\n\n", u.title)
		w("%s\n", r.uncontendedTable(u.runs, true, u.base, floorsIn(u.runs, uname, FloorLibraries())...))
	}
	for i, c := range r.NetContended {
		var base *ContendedConfig
		for i, b := range r.Contended {
			if b.Workers == c.Workers && b.Hold == c.Hold {
				base = &r.Contended[i]
			}
		}
		w("### Contended over the network: W=%d workers, hold %s\n\n", c.Workers, c.Hold)
		if i == 0 {
			w("The contended scenario through the proxy: one key; every worker is its own process (own client, own locker), acquires, holds the lock for the hold time (a sleep), releases, and at once asks again. %s\n\n", contendedLegend)
		} else {
			w("As the first contended table over the network, with W=%d and hold %s.\n\n", c.Workers, c.Hold)
		}
		floors := floorsIn(c.Runs, cname, []Library{FloorHandoffLibrary()})
		if i == 0 && len(floors) > 0 {
			w("**%s**: %s.\n\n", floors[0].Name, floors[0].Note)
		}
		w("%s\n", r.contendedTable(c, true, base, floors...))
	}
}

// contendedLegend explains the contended tables' columns.
const contendedLegend = "Handoff: one holder's Release returning → the next Acquire returning, whoever the next holder is; *to a waiter*: counting only handoffs to another worker (a library that lets the releaser take the lock straight back shows a short handoff that no waiter saw; *self* is the share of such acquisitions). Acquire wait: from the call to its return, what a waiting worker experiences. Fairness: min/max acquisitions per worker. Round trips: commands the clients sent; commands: all commands Redis ran, those inside scripts included (INFO commandstats). CPU per acquisition."

// medianRatio is the median, over the repetitions, of lib's f over peer's f
// in the same repetition, as "0.95×" ("–" when either is missing).
func medianRatio[T any](runs [][]T, name func(T) string, lib, peer string, f func(T) float64) (string, []float64) {
	if peer == "" {
		return "–", nil
	}
	rs := ratios(pick(runs, name, lib, f), pick(runs, name, peer, f))
	m := median(rs)
	if math.IsNaN(m) || math.IsInf(m, 0) {
		return "–", rs
	}
	return fmt.Sprintf("%.2f×", m), rs
}

// uncontendedTable is the table of an uncontended configuration. With
// ratios, it adds each library's ops/s over the fastest peer's (and, when
// that peer is not on go-redis, over the fastest go-redis peer's) in the
// same repetition, and over its own median on loopback (base, if any).
func (r *Report) uncontendedTable(runs [][]UncontendedResult, withRatios bool, base [][]UncontendedResult, extra ...Library) table {
	head := []string{"library", "ops/s", "acquire p50", "acquire p99", "release p50", "release p99", "Redis µs in scripts per pair", "errors"}
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }
	var fastest, fastestGoRedis string
	if withRatios {
		fastest, _ = bestPeer(runs, uname, r.Libraries, ops, func(Library) bool { return true })
		fastestGoRedis, _ = bestPeer(runs, uname, r.Libraries, ops, func(l Library) bool { return l.GoRedis })
		head = append(head, "ops/s vs fastest peer ("+fastest+")")
		if fastestGoRedis != fastest {
			head = append(head, "vs fastest go-redis peer ("+fastestGoRedis+")")
		}
		if len(base) > 0 {
			head = append(head, "ops/s vs loopback")
		}
	}
	t := table{head: head}
	for _, l := range append(slices.Clip(r.Libraries), extra...) {
		g := func(f func(UncontendedResult) float64) float64 { return median(pick(runs, uname, l.Name, f)) }
		row := []string{l.Name, num(g(ops)),
			ms(g(func(x UncontendedResult) float64 { return float64(x.AcqP50) })),
			ms(g(func(x UncontendedResult) float64 { return float64(x.AcqP99) })),
			ms(g(func(x UncontendedResult) float64 { return float64(x.RelP50) })),
			ms(g(func(x UncontendedResult) float64 { return float64(x.RelP99) })),
			fmt.Sprintf("%.2f", g(func(x UncontendedResult) float64 { return x.ScriptUsec })),
			num(g(func(x UncontendedResult) float64 { return float64(x.Errors) }))}
		if withRatios {
			v, _ := medianRatio(runs, uname, l.Name, fastest, ops)
			row = append(row, v)
			if fastestGoRedis != fastest {
				v, _ := medianRatio(runs, uname, l.Name, fastestGoRedis, ops)
				row = append(row, v)
			}
			if len(base) > 0 {
				row = append(row, ratioCell(g(ops)/median(pick(base, uname, l.Name, ops))))
			}
		}
		t.add(row...)
	}
	return t
}

// ratioCell is x as "0.95×", or "–".
func ratioCell(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

// fairPeer is the fairness a peer needs to be the contended tables' yardstick.
const fairPeer = 0.3

// contendedTable is the table of a contended configuration. With ratios,
// it adds each library's acq/s over the fastest peer's with fairness ≥ 0.3
// and over the fastest peer's of any fairness, in the same repetition, and
// over its own median on loopback (base, if any).
func (r *Report) contendedTable(c ContendedConfig, withRatios bool, base *ContendedConfig, extra ...Library) table {
	head := []string{"library", "acq/s", "handoff p50", "handoff p99", "to a waiter p50", "to a waiter p99", "self", "Acquire wait p50", "Acquire wait p99", "fairness", "round trips/acq", "commands/acq", "client CPU/acq", "Redis CPU/acq", "violations", "errors"}
	acq := func(x ContendedResult) float64 { return x.AcqPerSec }
	var fastestFair, fastest string
	if withRatios {
		fair := func(l Library) bool { return median(pick(c.Runs, cname, l.Name, ContendedResult.Fairness)) >= fairPeer }
		fastestFair, _ = bestPeer(c.Runs, cname, r.Libraries, acq, fair)
		fastest, _ = bestPeer(c.Runs, cname, r.Libraries, acq, func(Library) bool { return true })
		ff := fastestFair
		if ff == "" {
			ff = "none"
		}
		head = append(head, fmt.Sprintf("acq/s vs fastest peer with fairness ≥ %.1f (%s)", fairPeer, ff), "vs fastest peer ("+fastest+")")
		if base != nil {
			head = append(head, "acq/s vs loopback")
		}
	}
	t := table{head: head}
	for _, l := range append(slices.Clip(r.Libraries), extra...) {
		g := func(f func(ContendedResult) float64) float64 { return median(pick(c.Runs, cname, l.Name, f)) }
		row := []string{l.Name, num(g(acq)),
			ms(g(func(x ContendedResult) float64 { return float64(x.HandoffP50) })),
			ms(g(func(x ContendedResult) float64 { return float64(x.HandoffP99) })),
			ms(g(func(x ContendedResult) float64 { return nz(float64(x.OtherP50)) })),
			ms(g(func(x ContendedResult) float64 { return nz(float64(x.OtherP99)) })),
			fmt.Sprintf("%.0f%%", 100*g(func(x ContendedResult) float64 { return x.SelfShare })),
			ms(g(func(x ContendedResult) float64 { return float64(x.WaitP50) })),
			ms(g(func(x ContendedResult) float64 { return float64(x.WaitP99) })),
			fmt.Sprintf("%.2f", g(func(x ContendedResult) float64 { return x.Fairness() })),
			num(g(func(x ContendedResult) float64 { return x.RoundTrips })),
			num(g(func(x ContendedResult) float64 { return x.Commands })),
			us(g(func(x ContendedResult) float64 { return float64(x.ClientCPU) })),
			us(g(func(x ContendedResult) float64 { return float64(x.RedisCPU) })),
			num(g(func(x ContendedResult) float64 { return float64(x.Violations) })),
			num(g(func(x ContendedResult) float64 { return float64(x.Errors) }))}
		if withRatios {
			v1, _ := medianRatio(c.Runs, cname, l.Name, fastestFair, acq)
			v2, _ := medianRatio(c.Runs, cname, l.Name, fastest, acq)
			row = append(row, v1, v2)
			if base != nil {
				row = append(row, ratioCell(g(acq)/median(pick(base.Runs, cname, l.Name, acq))))
			}
		}
		t.add(row...)
	}
	return t
}

// Charts writes the SVG charts into dir.
func (r *Report) Charts(dir string) error {
	var names []string
	for _, l := range r.Libraries {
		names = append(names, l.Name)
	}
	var hs, cs []Series
	for _, c := range r.Contended {
		if c.Workers == 8 && c.Hold == 5*time.Millisecond {
			for _, m := range []struct {
				name string
				f    func(ContendedResult) float64
			}{
				{"to a waiter (another worker)", func(x ContendedResult) float64 { return nz(float64(x.OtherP50)) / 1e6 }},
				{"to whoever acquires next", func(x ContendedResult) float64 { return float64(x.HandoffP50) / 1e6 }},
			} {
				s := Series{Name: m.name}
				for _, n := range names {
					s.Values = append(s.Values, median(pick(c.Runs, cname, n, m.f)))
				}
				hs = append(hs, s)
			}
		}
		if c.Workers == 32 && c.Hold == 200*time.Microsecond {
			for _, m := range []struct {
				name string
				f    func(ContendedResult) float64
			}{
				{"round trips (commands sent)", func(x ContendedResult) float64 { return x.RoundTrips }},
				{"all commands (scripts' included)", func(x ContendedResult) float64 { return x.Commands }},
			} {
				s := Series{Name: m.name}
				for _, n := range names {
					s.Values = append(s.Values, median(pick(c.Runs, cname, n, m.f)))
				}
				cs = append(cs, s)
			}
		}
	}
	msf := func(v float64) string {
		if v >= 1 {
			return fmt.Sprintf("%.1f ms", v)
		}
		return fmt.Sprintf("%.3f ms", v)
	}
	if len(hs) > 0 {
		if err := LogBars(filepath.Join(dir, "bench-handoff.svg"), "Handoff latency p50, one key, 8 workers, hold 5ms, lower is better",
			"milliseconds (log scale)", names, hs, msf); err != nil {
			return err
		}
	}
	if len(cs) > 0 {
		if err := LogBars(filepath.Join(dir, "bench-commands.svg"), "Redis commands per acquisition, one key, 32 workers, hold 200µs",
			"commands (log scale)", names, cs, func(v float64) string { return num(v) }); err != nil {
			return err
		}
	}
	if len(r.RedlockHealthy) > 0 {
		var cats []string
		s := Series{Name: "acquire p50"}
		for _, x := range r.RedlockHealthy[0] {
			cats = append(cats, x.Label)
			s.Values = append(s.Values, median(pick(r.RedlockHealthy, lname, x.Label, func(x LatencyResult) float64 { return float64(x.AcqP50) / 1e6 })))
		}
		for _, x := range r.RedlockFaulty {
			cats = append(cats, x.Label)
			s.Values = append(s.Values, float64(x.AcqP50)/1e6)
		}
		if err := LogBars(filepath.Join(dir, "bench-redlock.svg"), "Redlock: uncontended acquire p50 by node count, lower is better",
			"milliseconds (log scale)", cats, []Series{s}, msf); err != nil {
			return err
		}
	}
	return nil
}

// writeCeiling writes the ceiling's section: the scripts alone, in the
// uncontended scenarios' repetitions (see ceiling.go).
func (r *Report) writeCeiling(w func(string, ...any)) {
	if len(r.Ceilings) == 0 || len(r.Uncontended1)+len(r.Uncontended64) == 0 {
		return
	}
	w("## The ceiling: the scripts alone\n\n")
	w("Not libraries: each library's scripts sent alone on free keys, in the uncontended scenarios' repetitions, with nothing around them (no lock object, no timer, no deadline). No library that sends dlock's scripts can go faster than the *dlock-scripts* rows; *setnx-scripts* are a lock's with no fence and no queue (redislock's, and as cheap in Redis as rueidislock's). The *-rueidis* rows send them as rueidislock sends its own, so that dlock-rueidis is measured against dlock's scripts and rueidislock-1key against a lock with no fence and no queue, on the same client. Ratios are medians of the ratios in each repetition.\n\n")
	for _, l := range r.Ceilings {
		w("- **%s**: %s\n", l.Name, l.Note)
	}
	w("\n")
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }
	t := table{head: []string{"goroutines", "configuration", "pairs/s", "Redis µs in scripts per pair", "vs setnx-scripts", "library ÷ its scripts"}}
	for _, u := range []struct {
		g    string
		runs [][]UncontendedResult
	}{{"1", r.Uncontended1}, {"64", r.Uncontended64}} {
		if len(u.runs) == 0 {
			continue
		}
		for _, l := range r.Ceilings {
			vs, _ := medianRatio(u.runs, uname, l.Name, "setnx-scripts", ops)
			t.add(u.g, l.Name, num(median(pick(u.runs, uname, l.Name, ops))),
				fmt.Sprintf("%.2f", median(pick(u.runs, uname, l.Name, func(x UncontendedResult) float64 { return x.ScriptUsec }))), vs, "")
		}
		for _, lib := range []struct{ name, scripts string }{
			{"dlock", "dlock-scripts"}, {"dlock-ctx", "dlock-scripts"}, {"redislock", "setnx-scripts"},
			{"dlock-rueidis", "dlock-scripts-rueidis"}, {"rueidislock-1key", "setnx-scripts-rueidis"},
		} {
			if len(pick(u.runs, uname, lib.scripts, ops)) == 0 {
				continue
			}
			of, _ := medianRatio(u.runs, uname, lib.name, lib.scripts, ops)
			vs, _ := medianRatio(u.runs, uname, lib.name, "setnx-scripts", ops)
			t.add(u.g, lib.name+" (the library)", num(median(pick(u.runs, uname, lib.name, ops))),
				fmt.Sprintf("%.2f", median(pick(u.runs, uname, lib.name, func(x UncontendedResult) float64 { return x.ScriptUsec }))), vs, of+" of "+lib.scripts)
		}
	}
	w("%s\n", t)
}

// writePaired writes the section of the runs by turns (Paired).
func (r *Report) writePaired(w func(string, ...any)) {
	if len(r.Paired1)+len(r.Paired64) == 0 {
		return
	}
	w("## Runs by turns: dlock on rueidis and %s\n\n", PairedPeer)
	w("The uncontended scenario again, for the two alone, by turns (a b, b a, a b, …): %s. The two runs of a pair lie within a second of each other, so the machine's drift cancels in each pair's ratio; the targets of dlock on rueidis use these pairs.\n\n", r.PairedNote)
	ops := func(x UncontendedResult) float64 { return x.OpsPerSec }
	t := table{head: []string{"goroutines", "pairs", "library", "ops/s (median)", "ratio to " + PairedPeer + " (median)", "per pair"}}
	for _, p := range []struct {
		g    int
		runs [][]UncontendedResult
	}{{1, r.Paired1}, {64, r.Paired64}} {
		if len(p.runs) == 0 {
			continue
		}
		theirs := pick(p.runs, uname, PairedPeer, ops)
		for _, row := range p.runs[0] {
			mine := pick(p.runs, uname, row.Lib, ops)
			ratio, each := "–", "–"
			if row.Lib != PairedPeer {
				rs := ratios(mine, theirs)
				ratio, each = fmt.Sprintf("%.2f×", median(rs)), fmtRatios(rs)
			}
			t.add(fmt.Sprint(p.g), fmt.Sprint(len(p.runs)), row.Lib, fmt.Sprintf("%.0f", median(mine)), ratio, each)
		}
	}
	w("%s\n", t)
}
