package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// The peers' Acquire+Release under `go test -bench . -benchmem`, to compare
// with the root module's BenchmarkAcquireRelease.
func BenchmarkAcquireRelease(b *testing.B) {
	if _, err := dlocktest.Binary(); err != nil {
		b.Skip(err)
	}
	s := dlocktest.Start(b)
	for _, lib := range Libraries() {
		b.Run(lib.Name, func(b *testing.B) { BenchAcquireRelease(b, lib, []string{s.Addr()}) })
	}
}

func TestParseStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_get:calls=3,usec=2\r\ncmdstat_info:calls=9,usec=1\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=1\r\ncmdstat_evalsha:calls=2,usec=5\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n"
	st := parseStats(info)
	if st.Commands != 5 {
		t.Errorf("Commands = %d, want 5", st.Commands)
	}
	if st.Scripts != 2 || st.Usec != 5 {
		t.Errorf("Scripts = %d, Usec = %d, want 2 and 5", st.Scripts, st.Usec)
	}
	if st.CPU.Seconds() != 1.75 {
		t.Errorf("CPU = %v, want 1.75s", st.CPU)
	}
}

// startServer starts a redis-server for the test (skipping it where there
// is no redis-server binary), with an admin client closed at its end.
func startServer(t testing.TB) Server {
	t.Helper()
	if _, err := dlocktest.Binary(); err != nil {
		t.Skip(err)
	}
	s := dlocktest.Start(t)
	admin := s.Client()
	t.Cleanup(func() { admin.Close() })
	return Server{Addr: s.Addr(), Admin: admin}
}

// The shared-hold and AcquireAll scenarios, briefly: they run, nobody holds
// a key alongside a writer or another exclusive holder, and the report shows
// them.
func TestSharedAndMultiScenarios(t *testing.T) {
	srv := startServer(t)
	r := &Report{Reps: 1}
	rw, err := ReadWrite(srv, 4, time.Millisecond, 50*time.Millisecond, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rw.Reads == 0 || rw.Writes == 0 || rw.Violations != 0 || rw.Errors != 0 || rw.RoundTrips == 0 || rw.Commands == 0 {
		t.Errorf("read-write: %+v", rw)
	}
	r.ReadWrite = append(r.ReadWrite, rw)
	var row []MultiResult
	for _, v := range []MultiVariant{MultiAcquireAll, MultiOrdered} {
		m, err := Multi(srv, v, 8, 2, 4, 2, time.Millisecond, 50*time.Millisecond, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if m.Acquisitions == 0 || m.Violations != 0 || m.Errors != 0 {
			t.Errorf("%s: %+v", v, m)
		}
		row = append(row, m)
	}
	r.Multi = append(r.Multi, row)
	md := r.Markdown(false)
	for _, want := range []string{"## Shared holds: 4 readers, 1 writer", "| dlock-ctx |", "## Two keys at once", "| AcquireAll |", "| sorted Acquire ×2 |", "| ratio AcquireAll / baseline |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The scale scenarios and a run through the proxy, at a tiny size: they
// run, their figures are sane, and the report shows them. (The full sizes
// run in dlockbench's full runs only.)
func TestScaleAndNetworkScenarios(t *testing.T) {
	srv := startServer(t)
	r := &Report{Reps: 1, Libraries: []Library{DlockLibrary(true), RedislockLibrary(false)}}

	ml, err := ManyLocks(srv, 50, 900*time.Millisecond, 500*time.Millisecond, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Renewed every 300ms over 500ms, in batches: a few script calls for
	// the 50 locks.
	if ml.Lost != 0 || ml.ReleaseErrors != 0 || ml.Scripts == 0 || ml.ScriptsPerLockInterval > 0.5 || ml.CommandsPerSec == 0 {
		t.Errorf("many locks: %+v", ml)
	}
	r.ManyLocks = append(r.ManyLocks, ml)

	mw, err := ManyWaiters([]Server{srv}, false, 20, 10*time.Second, 50*time.Millisecond, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if mw.Woken != 20 || mw.Late != 0 || mw.Errors != 0 || mw.Conns == 0 || mw.WakeP50 == 0 {
		t.Errorf("many waiters: %+v", mw)
	}
	r.ManyWaiters = append(r.ManyWaiters, mw)

	rtt, err := CalibrateProxy(srv.Addr, 100*time.Microsecond, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PING round trip: %+v, %v added each way", rtt, rtt.AddedEachWay())
	if rtt.LatencyProxy < rtt.Direct+100*time.Microsecond || rtt.DlocktestProxy < rtt.Direct+150*time.Microsecond {
		t.Errorf("PING through proxies adding 100µs each way: %+v", rtt)
	}
	r.NetLatency, r.NetRTT = 100*time.Microsecond, rtt
	px, err := NewLatencyProxy(srv.Addr, rtt.Delay)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	var row []UncontendedResult
	for _, lib := range r.Libraries {
		u, err := Uncontended(lib, []string{px.Addr()}, 1, 30*time.Millisecond, 150*time.Millisecond, &srv)
		if err != nil {
			t.Fatal(err)
		}
		if u.Ops == 0 || u.Errors != 0 || u.AcqP50 < rtt.Direct+100*time.Microsecond {
			t.Errorf("uncontended through the proxy: %+v", u)
		}
		row = append(row, u)
	}
	r.NetUncontended1 = append(r.NetUncontended1, row)
	c, err := Contended(r.Libraries[0], Server{Addr: px.Addr(), Admin: srv.Admin}, 4, 200*time.Microsecond, 30*time.Millisecond, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r.NetContended = append(r.NetContended, ContendedConfig{Workers: 4, Hold: 200 * time.Microsecond, Runs: [][]ContendedResult{{c}}})

	md := r.Markdown(false)
	for _, want := range []string{"## Many locks held: 50 locks", "## Many waiters in one Locker: 20 waiters", "| 1 redis-server | 20 |",
		"## Over a network: 100µs added each way", "### Uncontended over the network, 1 goroutine", "ops/s vs fastest peer (redislock)",
		"### Contended over the network: W=4 workers"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The ceiling's configurations run their scripts, every pair a success
// (dlock's scripts take and give back the lock: a key left held would fail
// the next Lock), and the report's section shows them next to the
// libraries.
func TestCeiling(t *testing.T) {
	srv := startServer(t)
	libs := []Library{DlockLibrary(false), DlockLibrary(true), RedislockLibrary(false)}
	r := &Report{Reps: 1, Libraries: libs, Ceilings: CeilingLibraries()}
	for _, g := range []int{1, 8} {
		var row []UncontendedResult
		for _, lib := range append(slices.Clip(libs), r.Ceilings...) {
			u, err := Uncontended(lib, []string{srv.Addr}, g, 20*time.Millisecond, 150*time.Millisecond, &srv)
			if err != nil {
				t.Fatal(err)
			}
			if u.Ops == 0 || u.Errors != 0 || u.ScriptUsec <= 0 {
				t.Errorf("%s, %d goroutines: %+v", lib.Name, g, u)
			}
			row = append(row, u)
		}
		if g == 1 {
			r.Uncontended1 = append(r.Uncontended1, row)
		} else {
			r.Uncontended64 = append(r.Uncontended64, row)
		}
	}
	md := r.Markdown(false)
	if i := strings.Index(md, "## The ceiling"); i >= 0 && testing.Verbose() {
		t.Log(md[i:min(len(md), i+3000)])
	}
	for _, want := range []string{"## The ceiling: the scripts alone", "| 1 | dlock-scripts |", "| 64 | setnx-scripts-ap |", "| 1 | dlock-ctx (the library) |", "of dlock-scripts |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// Not peers: the targets compare dlock with redislock only.
	for _, tg := range r.Targets() {
		if strings.Contains(tg.Measured, "scripts") {
			t.Errorf("target %q scored against a ceiling: %s", tg.Name, tg.Measured)
		}
	}
}

// TestFamilyTargets: dlock on another client family than go-redis is
// scored against rueidislock in its one-instance configuration (issue 35),
// not against the go-redis peers.
func TestFamilyTargets(t *testing.T) {
	libs := []Library{DlockLibrary(false), DlockRueidisLibrary(), RedislockLibrary(false), RueidislockOneKeyLibrary()}
	row := func(ops ...float64) []UncontendedResult {
		var out []UncontendedResult
		for i, l := range libs {
			out = append(out, UncontendedResult{Lib: l.Name, OpsPerSec: ops[i]})
		}
		return out
	}
	r := &Report{Reps: 1, Libraries: libs,
		Uncontended1:  [][]UncontendedResult{row(100, 120, 100, 100)},
		Uncontended64: [][]UncontendedResult{row(100, 90, 100, 100)}}
	got := map[string]Target{}
	for _, tg := range r.Targets() {
		if tg.Lib == "dlock-rueidis" {
			got[tg.Name] = tg
		}
	}
	one, many := got["Uncontended, 1 goroutine: ops/s ≥ 1.0× rueidislock-1key"], got["Uncontended, 64 goroutines: ops/s ≥ 1.0× rueidislock-1key"]
	if len(got) != 2 || !one.Met || many.Met {
		t.Errorf("dlock-rueidis's targets: %+v", got)
	}

	// With runs by turns, those decide: here the other way round.
	pair := func(mine, theirs float64) []UncontendedResult {
		return []UncontendedResult{{Lib: "dlock-rueidis", OpsPerSec: mine}, {Lib: PairedPeer, OpsPerSec: theirs}}
	}
	r.Paired1 = [][]UncontendedResult{pair(90, 100), pair(95, 100), pair(200, 100)}
	r.Paired64 = [][]UncontendedResult{pair(110, 100), pair(100, 100), pair(50, 100)}
	r.PairedNote = "3 pairs"
	got = map[string]Target{}
	for _, tg := range r.Targets() {
		if tg.Lib == "dlock-rueidis" {
			got[tg.Name] = tg
		}
	}
	one, many = got["Uncontended, 1 goroutine: ops/s ≥ 1.0× rueidislock-1key"], got["Uncontended, 64 goroutines: ops/s ≥ 1.0× rueidislock-1key"]
	if one.Met || !many.Met || !strings.Contains(one.Measured, "0.95× rueidislock-1key (3 runs by turns, per pair: 0.90 0.95 2.00)") {
		t.Errorf("dlock-rueidis's targets from runs by turns: %+v", got)
	}
	md := r.Markdown(false)
	for _, want := range []string{"## Runs by turns: dlock on rueidis and rueidislock-1key", "| 64 | 3 | dlock-rueidis | 100 | 1.00× | 1.10 1.00 0.50 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// Paired runs its two libraries by turns, the first library's result
// first in every pair, each run a success.
func TestPaired(t *testing.T) {
	srv := startServer(t)
	a, b := DlockLibrary(false), RedislockLibrary(false)
	pairs, err := Paired(a, b, []string{srv.Addr}, 2, 3, 10*time.Millisecond, 50*time.Millisecond, &srv)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 3 {
		t.Fatalf("%d pairs, want 3", len(pairs))
	}
	for i, p := range pairs {
		if len(p) != 2 || p[0].Lib != a.Name || p[1].Lib != b.Name || p[0].Ops == 0 || p[1].Ops == 0 || p[0].Errors+p[1].Errors != 0 {
			t.Errorf("pair %d: %+v", i, p)
		}
	}
}

// maxRueidisAllocs is the most allocations one uncontended Acquire+Release
// of dlock on a rueidis client may cost (go test without -race): 5 of the
// 12 are rueidis' reading of the replies and their conversion. (The two
// node calls' context.WithTimeout took 8 more, before calls that cannot be
// cancelled shared their deadline: see quorum.Node.bound.)
const maxRueidisAllocs = 14

// TestDlockRueidisAllocs keeps the rueidis path's allocations in check, as
// the root's TestAllocsPerAcquireRelease does go-redis'.
func TestDlockRueidisAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	srv := startServer(t)
	r := Allocs(DlockRueidisLibrary(), []string{srv.Addr})
	if r.N == 0 {
		t.Fatal("the benchmark failed")
	}
	limit := int64(maxRueidisAllocs)
	if raceEnabled {
		limit += 4 // the race detector's sync.Pool drops items at random
	}
	if r.AllocsPerOp > limit {
		t.Errorf("%d allocations per Acquire+Release, want at most %d", r.AllocsPerOp, limit)
	} else {
		t.Logf("%d allocations per Acquire+Release (%d B)", r.AllocsPerOp, r.BytesPerOp)
	}
}

// A ratio target whose peer has no sample in any repetition (redsync, which
// hands the lock to another worker too seldom for a median) is not judged:
// neither met nor missed, and the report says why.
func TestTargetWithoutPeerSample(t *testing.T) {
	libs := []Library{DlockLibrary(false), RedsyncLibrary(false)}
	run := func(other time.Duration) []ContendedResult {
		return []ContendedResult{
			{Lib: libs[0].Name, HandoffP50: 200 * time.Microsecond, OtherP50: 200 * time.Microsecond},
			{Lib: libs[1].Name, HandoffP50: 100 * time.Microsecond, OtherP50: other},
		}
	}
	r := &Report{Reps: 2, Libraries: libs, Contended: []ContendedConfig{{Workers: 8, Hold: 5 * time.Millisecond, Runs: [][]ContendedResult{run(0), run(0)}}}}
	const name = "Contended W=8, 5ms: handoff p50 to another worker (a waiter) ≤ 0.1× redsync (defaults)"
	judged := func() Target {
		for _, tg := range r.Targets() {
			if tg.Lib == libs[0].Name && tg.Name == name {
				return tg
			}
		}
		t.Fatalf("no target %q", name)
		return Target{}
	}
	if tg := judged(); !tg.Unjudged || tg.Met || !strings.Contains(tg.Measured, "redsync: no sample in any repetition") {
		t.Errorf("without redsync's samples: %+v", tg)
	}
	if md := r.Markdown(false); !strings.Contains(md, "not judged") {
		t.Errorf("the report does not say the target is not judged:\n%s", md)
	}
	// One repetition with a sample is enough to judge.
	r.Contended[0].Runs[1] = run(time.Millisecond)
	if tg := judged(); tg.Unjudged || tg.Met || !strings.Contains(tg.Measured, "0.20× redsync") {
		t.Errorf("with one of redsync's samples: %+v", tg)
	}
}
