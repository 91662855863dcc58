// Command dlockbench compares dlock with the Go Redis lock libraries on
// redis-server processes it starts on loopback, prints the tables, and writes
// benchmarks.md and SVG charts into -out.
//
//	go run ./cmd/dlockbench -out ../docs     # the full run (about 20 minutes)
//	go run ./cmd/dlockbench -quick           # a short check that everything works
//	go run ./cmd/dlockbench -only manylocks  # one group (manylocks and network run in full runs only, never with -quick)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/bench"
	"github.com/dlock-dev/dlock/dlocktest"
)

func main() {
	testing.Init()
	// go-redis logs every failed dial; the Redlock fault scenario makes many.
	redis.SetLogger(quiet{})
	quick := flag.Bool("quick", false, "a short run, to check that everything works (not to judge speed)")
	reps := flag.Int("reps", 0, "repetitions of each scenario (default 5, 1 with -quick)")
	out := flag.String("out", "", "directory to write benchmarks.md and the SVG charts into (default: none)")
	only := flag.String("only", "", "run only these scenario groups, comma-separated: uncontended, contended, rw, multi, idle, manylocks, clusterwake, network, allocs, redlock (manylocks and network: not with -quick; for a look while working; the report then has gaps, and nothing is written)")
	flag.Parse()
	if *only != "" {
		for _, g := range strings.Split(*only, ",") {
			onlyGroups[g] = true
		}
		*out = ""
	}
	if err := run(*quick, *reps, *out); err != nil {
		fmt.Fprintln(os.Stderr, "dlockbench:", err)
		os.Exit(1)
	}
}

// onlyGroups is the -only flag's groups; empty: all.
var onlyGroups = map[string]bool{}

func want(group string) bool { return len(onlyGroups) == 0 || onlyGroups[group] }

// fullOnly are the groups that run in full runs only: never with -quick
// (CI runs -quick), even when -only names them.
var fullOnly = map[string]bool{"manylocks": true, "network": true}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}

type settings struct {
	warm, dur         time.Duration // uncontended and contended runs
	idleSettle, idle  time.Duration
	idleLong          time.Duration // dlock only: past its fallback wake-ups
	latWarm, latDur   time.Duration
	faultMin          int
	benchtime         string
	reps, idleReps    int
	holds             []time.Duration
	workers           []int
	idleWaiters       int
	uncontendedGorout []int
	// dlock on rueidis and its peer by turns (bench.Paired): pairs per
	// goroutine count, each run pairWarm then pairDur.
	pairs             int
	pairWarm, pairDur time.Duration
	// dlock against the floor by turns (floorPaired): pairs per
	// configuration and goroutine count, each run as the pairs above.
	floorPairs int
	// The shared-hold (rw) and AcquireAll (multi) scenarios: dlock only.
	rwWarm, rwDur       time.Duration
	rwReps              int
	multiWarm, multiDur time.Duration
	multiReps           int
	// The scale scenarios (manylocks, dlock only) and the runs through a
	// proxy (network): full runs only.
	manyLocks, manyWaiters      int
	manyTTL, manyDur            time.Duration
	waitSettle, waitDur         time.Duration
	netLatency, netWarm, netDur time.Duration
	netReps                     int
}

func run(quick bool, reps int, out string) error {
	s := settings{
		warm: 300 * time.Millisecond, dur: 2 * time.Second,
		pairs: 20, pairWarm: 100 * time.Millisecond, pairDur: 300 * time.Millisecond, floorPairs: 16,
		idleSettle: time.Second, idle: 5 * time.Second, idleLong: 60 * time.Second,
		latWarm: 200 * time.Millisecond, latDur: 2 * time.Second,
		faultMin: 5, benchtime: "1s", reps: 5, idleReps: 2,
		rwWarm: 300 * time.Millisecond, rwDur: 5 * time.Second, rwReps: 1,
		multiWarm: 300 * time.Millisecond, multiDur: 2 * time.Second, multiReps: 3,
		manyLocks: 10_000, manyTTL: 3 * time.Second, manyDur: 12 * time.Second,
		manyWaiters: 1000, waitSettle: time.Second, waitDur: 20 * time.Second,
		netLatency: 100 * time.Microsecond, netWarm: 300 * time.Millisecond, netDur: 2 * time.Second, netReps: 1,
	}
	if quick {
		s = settings{
			warm: 100 * time.Millisecond, dur: 250 * time.Millisecond,
			pairs: 2, pairWarm: 50 * time.Millisecond, pairDur: 100 * time.Millisecond, floorPairs: 1,
			idleSettle: 300 * time.Millisecond, idle: 700 * time.Millisecond, idleLong: time.Second,
			latWarm: 50 * time.Millisecond, latDur: 200 * time.Millisecond,
			faultMin: 1, benchtime: "300x", reps: 1, idleReps: 1,
			rwWarm: 100 * time.Millisecond, rwDur: 2 * time.Second, rwReps: 1,
			multiWarm: 100 * time.Millisecond, multiDur: time.Second, multiReps: 1,
		}
	}
	if reps > 0 {
		s.reps = reps
		s.pairs = 4 * reps
		s.floorPairs = 3 * reps
		s.idleReps = min(reps, s.idleReps)
		s.rwReps = min(reps, s.rwReps)
		s.multiReps = min(reps, s.multiReps)
		s.netReps = min(reps, 2)
	}
	if quick {
		for g := range fullOnly {
			if onlyGroups[g] {
				fmt.Fprintf(os.Stderr, "dlockbench: %s runs in full runs only, not with -quick: skipped\n", g)
			}
		}
	}
	wantFull := func(group string) bool { return !quick && want(group) }
	if err := flag.Set("test.benchtime", s.benchtime); err != nil {
		return err
	}

	single, err := dlocktest.NewServer()
	if err != nil {
		return err
	}
	defer single.Close()
	var nodes []*dlocktest.Server
	defer func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}()
	for i := 0; i < 5; i++ {
		n, err := dlocktest.NewServer()
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	admin := single.Client()
	defer admin.Close()
	srv := bench.Server{Addr: single.Addr(), Admin: admin}
	addr := []string{single.Addr()}
	var nodeAddrs []string
	for _, n := range nodes {
		nodeAddrs = append(nodeAddrs, n.Addr())
	}

	libs := bench.Libraries()
	r := &bench.Report{
		Date:         time.Now(),
		Machine:      machine(),
		GoVersion:    runtime.Version(),
		RedisVersion: redisVersion(admin),
		Versions:     versions(),
		Quick:        quick,
		Reps:         s.reps,
		Libraries:    libs,
		Ceilings:     append(bench.CeilingLibraries(), bench.FloorLibraries()...),
		NodeTimeout:  time.Second, // dlock's default: TTL/5, at most 1s
		Settings: fmt.Sprintf("Each uncontended and contended run: %s warm-up, then %s measured; idle: %s settle, %s measured (%d repetitions), and %s measured once for dlock's configurations; Redlock: %s measured per configuration; allocations: testing.Benchmark, benchtime %s; shared holds: %s warm-up, %s measured (%s); AcquireAll: %s warm-up, %s measured per variant (%s)",
			s.warm, s.dur, s.idleSettle, s.idle, s.idleReps, s.idleLong, s.latDur, s.benchtime,
			s.rwWarm, s.rwDur, repetitions(s.rwReps), s.multiWarm, s.multiDur, repetitions(s.multiReps)),
	}
	if !quick {
		r.Settings += fmt.Sprintf("; many locks: %d locks, TTL %s, %s measured; many waiters: %d, %s settle, %s measured; over a network (%s added each way): %s warm-up, %s measured (%s)",
			s.manyLocks, s.manyTTL, s.manyDur, s.manyWaiters, s.waitSettle, s.waitDur, s.netLatency, s.netWarm, s.netDur, repetitions(s.netReps))
	}
	log := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = admin.FlushAll(ctx).Err()
	}

	// 1. Uncontended.
	for _, g := range []int{1, 64} {
		if !want("uncontended") {
			break
		}
		dst := &r.Uncontended64
		if g == 1 {
			dst = &r.Uncontended1
		}
		// The ceiling's configurations run in the same repetitions, after
		// the libraries.
		ulibs := append(slices.Clip(libs), r.Ceilings...)
		err := uncontendedReps(dst, ulibs, s.reps, "uncontended", g, log, flush, func(lib bench.Library) (bench.UncontendedResult, error) {
			return bench.Uncontended(lib, addr, g, s.warm, s.dur, &srv)
		})
		if err != nil {
			return err
		}
	}

	// dlock on rueidis and its peer again, by turns: issue 35's targets.
	if err := paired(r, libs, addr, &srv, s, log, flush); err != nil {
		return err
	}
	// dlock against the floor of a fenced lock on the same client, by
	// turns: issue 46's targets.
	if err := floorPaired(r, libs, addr, &srv, s, log, flush); err != nil {
		return err
	}

	// 2. Contended.
	for _, cfg := range contendedConfigs {
		if !want("contended") {
			break
		}
		cc, err := contendedReps(cfg, libs, s.reps, "contended", log, flush, func(lib bench.Library) (bench.ContendedResult, error) {
			return bench.Contended(lib, srv, cfg.w, cfg.hold, s.warm, s.dur)
		})
		if err != nil {
			return err
		}
		r.Contended = append(r.Contended, cc)
	}

	// 2b. A semaphore (dlock only: no peer has one): limit 4, 32 workers.
	if want("contended") {
		sem := bench.DlockSemaphoreLibrary(4)
		for rep := 0; rep < s.reps; rep++ {
			res, err := bench.Contended(sem, srv, 32, 200*time.Microsecond, s.warm, s.dur)
			if err != nil {
				return err
			}
			log("semaphore limit 4 W=32 rep %d %7.0f acq/s fair %.2f cmds %.1f viol %d err %d",
				rep+1, res.AcqPerSec, res.Fairness(), res.Commands, res.Violations, res.Errors)
			r.Semaphore = append(r.Semaphore, res)
			flush()
		}
	}

	// 2c. Shared holds (dlock only): 8 readers with WithShared, 1 writer,
	// one key, hold 1ms.
	for rep := 0; rep < s.rwReps && want("rw"); rep++ {
		res, err := bench.ReadWrite(srv, 8, time.Millisecond, s.rwWarm, s.rwDur)
		if err != nil {
			return err
		}
		log("rw 8 readers + 1 writer rep %d %7.0f reads/s %5.0f writes/s writer wait p50 %v p99 %v rt/hold %.2f cmds/hold %.2f viol %d err %d",
			rep+1, res.ReadsPerSec, res.WritesPerSec, res.WriterWaitP50, res.WriterWaitP99, res.RoundTrips, res.Commands, res.Violations, res.Errors)
		if res.FirstError != "" {
			log("rw first error: %s", res.FirstError)
		}
		r.ReadWrite = append(r.ReadWrite, res)
		flush()
	}

	// 2d. Two keys of 8 at once (dlock only): AcquireAll against sorted
	// Acquires, 16 workers over 4 processes, hold 1ms, interleaved.
	for rep := 0; rep < s.multiReps && want("multi"); rep++ {
		var row []bench.MultiResult
		for _, v := range []bench.MultiVariant{bench.MultiAcquireAll, bench.MultiOrdered} {
			res, err := bench.Multi(srv, v, 16, 4, 8, 2, time.Millisecond, s.multiWarm, s.multiDur)
			if err != nil {
				return err
			}
			log("multi 16 workers 2 of 8 keys rep %d %-18s %7.0f acq/s wait p50 %v p99 %v rt %.2f cmds %.2f viol %d err %d",
				rep+1, v, res.AcqPerSec, res.WaitP50, res.WaitP99, res.RoundTrips, res.Commands, res.Violations, res.Errors)
			if res.FirstError != "" {
				log("multi %s first error: %s", v, res.FirstError)
			}
			row = append(row, res)
			flush()
		}
		r.Multi = append(r.Multi, row)
	}

	// 3. Idle waiting.
	if !want("idle") {
		s.idleReps = 0
	}
	for rep := 0; rep < s.idleReps; rep++ {
		var row []bench.IdleResult
		for _, lib := range libs {
			res, err := bench.Idle(lib, srv, 100, s.idleSettle, s.idle)
			if err != nil {
				return err
			}
			log("idle rep %d %-16s %8.1f cmds/s (%.3f per waiter) client CPU %v", rep+1, lib.Name, res.CommandsPerSec, res.PerWaiter(), res.ClientCPU)
			row = append(row, res)
			flush()
		}
		r.Idle = append(r.Idle, row)
	}
	for _, lib := range libs {
		if !lib.Dlock || !want("idle") {
			continue
		}
		res, err := bench.Idle(lib, srv, 100, s.idleSettle, s.idleLong)
		if err != nil {
			return err
		}
		log("idle %v %-16s %8.1f cmds/s (%.3f per waiter) client CPU %v", s.idleLong, lib.Name, res.CommandsPerSec, res.PerWaiter(), res.ClientCPU)
		r.IdleLong = append(r.IdleLong, res)
		flush()
	}

	// 3b. Many locks held by one Locker, and many waiters in one Locker
	// (dlock only; full runs only).
	if wantFull("manylocks") {
		res, err := bench.ManyLocks(srv, s.manyLocks, s.manyTTL, s.manyDur, 32)
		if err != nil {
			return err
		}
		log("manylocks %d locks TTL %v: acquired in %v; %.0f Redis cmds/s, %.2f script calls per lock per TTL/3, client CPU %.1f%%, heap %.0f B/lock, %.2f goroutines/lock, lost %d",
			res.Locks, res.TTL, res.AcquireTime, res.CommandsPerSec, res.ScriptsPerLockInterval, res.ClientCPU, res.HeapPerLock, res.GoroutinesPerLock, res.Lost)
		r.ManyLocks = append(r.ManyLocks, res)
		flush()
		logWaiters := func(res bench.ManyWaitersResult) {
			log("manywaiters %s %d waiters: registered in %v; sent %.1f cmds/s, Redis %.0f cmds/s, %d conns (%d); wake p50 %v p99 %v max %v, woken %d late %d err %d",
				res.Deployment, res.Waiters, res.RegisterTime, res.SentPerSec, res.CommandsPerSec, res.Conns, res.PoolConns, res.WakeP50, res.WakeP99, res.WakeMax, res.Woken, res.Late, res.Errors)
			if res.FirstError != "" {
				log("manywaiters %s first error: %s", res.Deployment, res.FirstError)
			}
		}
		mw, err := bench.ManyWaiters([]bench.Server{srv}, false, s.manyWaiters, 30*time.Second, s.waitSettle, s.waitDur)
		if err != nil {
			return err
		}
		logWaiters(mw)
		r.ManyWaiters = append(r.ManyWaiters, mw)
		flush()
		if err := manyWaitersCluster(r, s, logWaiters); err != nil {
			return err
		}
	}

	// 3b'. Wake-ups on a Cluster (dlock only).
	if want("clusterwake") {
		if err := clusterWakeups(r, s.reps, log); err != nil {
			return err
		}
		flush()
	}

	// 3c. The uncontended and contended scenarios over a network: every
	// client through a proxy adding s.netLatency each way (full runs only).
	if wantFull("network") {
		if err := network(r, s, single, srv, libs, log, flush); err != nil {
			return err
		}
	}

	// 4. Allocations (before the Redlock faults; all nodes healthy).
	allocLibs := []bench.Library{bench.DlockLibrary(false), bench.DlockLibrary(true), bench.RedsyncFailFastLibrary()}
	if !want("allocs") {
		libs, allocLibs = nil, nil
	}
	for _, lib := range libs {
		a := bench.Allocs(lib, addr)
		log("allocs %-16s %d allocs/op %d B/op", lib.Name, a.AllocsPerOp, a.BytesPerOp)
		r.Allocs = append(r.Allocs, a)
	}
	for _, lib := range allocLibs {
		a := bench.Allocs(lib, nodeAddrs)
		log("allocs %-16s 5 nodes %d allocs/op %d B/op", lib.Name, a.AllocsPerOp, a.BytesPerOp)
		r.Allocs = append(r.Allocs, a)
	}

	// 5. Redlock, healthy.
	type rl struct {
		lib   bench.Library
		addrs []string
		label string
	}
	healthy := []rl{
		{bench.DlockLibrary(false), nodeAddrs[:1], "dlock, 1 node"},
		{bench.DlockLibrary(true), nodeAddrs[:1], "dlock-ctx, 1 node"},
		{bench.DlockLibrary(false), nodeAddrs, "dlock, 5 nodes"},
		{bench.DlockLibrary(true), nodeAddrs, "dlock-ctx, 5 nodes"},
		{bench.RedsyncFailFastLibrary(), nodeAddrs, "redsync-failfast, 5 nodes"},
		{bench.RedsyncLibrary(false), nodeAddrs, "redsync, 5 nodes"},
	}
	if !want("redlock") {
		return report(r, out)
	}
	for rep := 0; rep < s.reps; rep++ {
		var row []bench.LatencyResult
		for _, c := range healthy {
			res, err := bench.Latency(c.lib, c.addrs, c.label, s.latWarm, s.latDur, 1, 1_000_000, 10*time.Second)
			if err != nil {
				return err
			}
			log("redlock rep %d %-26s p50 %v p99 %v", rep+1, c.label, res.AcqP50, res.AcqP99)
			row = append(row, res)
		}
		r.RedlockHealthy = append(r.RedlockHealthy, row)
	}

	// 6. Redlock with one node frozen and one killed.
	if err := nodes[3].Freeze(); err != nil {
		return err
	}
	if err := nodes[4].Kill(); err != nil {
		return err
	}
	r.FaultNote = fmt.Sprintf("Node 4 of 5 stopped with SIGSTOP (it accepts connections and answers nothing), node 5 killed; every configuration runs at least %d calls and at most %s past the warm-up, each call bounded by a 10s context. A fresh process (new clients) per configuration.", s.faultMin, s.latDur)
	for _, c := range healthy {
		if len(c.addrs) == 1 {
			continue
		}
		label := strings.Replace(c.label, "5 nodes", "5 nodes, 1 frozen + 1 killed", 1)
		res, err := bench.Latency(c.lib, c.addrs, label, 0, s.latDur, s.faultMin, 1_000_000, 10*time.Second)
		if err != nil {
			return err
		}
		log("redlock faulty %-40s calls %d p50 %v max %v release max %v errors %d", label, res.Calls, res.AcqP50, res.AcqMax, res.RelMax, res.Errors)
		r.RedlockFaulty = append(r.RedlockFaulty, res)
	}

	return report(r, out)
}

// contendedConfig is one configuration of the contended scenario.
type contendedConfig struct {
	w    int
	hold time.Duration
}

// contendedConfigs are the contended scenario's configurations.
var contendedConfigs = []contendedConfig{{8, 200 * time.Microsecond}, {8, 5 * time.Millisecond}, {32, 200 * time.Microsecond}, {32, 5 * time.Millisecond}}

// startCluster starts a Cluster of 3 masters, and returns them with an
// admin client each, and the function that stops it all.
func startCluster() ([]bench.Server, func(), error) {
	cl, err := dlocktest.NewCluster(3)
	if err != nil {
		return nil, nil, err
	}
	var masters []bench.Server
	for _, m := range cl.Servers {
		masters = append(masters, bench.Server{Addr: m.Addr(), Admin: m.Client()})
	}
	return masters, func() {
		for _, m := range masters {
			_ = m.Admin.Close()
		}
		_ = cl.Close()
	}, nil
}

// manyWaitersCluster runs the many-waiters scenario on a Cluster of 3
// masters that it starts and stops.
func manyWaitersCluster(r *bench.Report, s settings, logWaiters func(bench.ManyWaitersResult)) error {
	masters, stop, err := startCluster()
	if err != nil {
		return err
	}
	defer stop()
	res, err := bench.ManyWaiters(masters, true, s.manyWaiters, 30*time.Second, s.waitSettle, s.waitDur)
	if err != nil {
		return err
	}
	logWaiters(res)
	r.ManyWaiters = append(r.ManyWaiters, res)
	return nil
}

// clusterWakeups runs bench.ClusterWakeups on a Cluster of 3 masters that
// it starts and stops: 12 waiters on 6 keys, 3 rounds each, reps times
// (fresh clients and Lockers each time).
func clusterWakeups(r *bench.Report, reps int, log func(string, ...any)) error {
	masters, stop, err := startCluster()
	if err != nil {
		return err
	}
	defer stop()
	for rep := range reps {
		res, err := bench.ClusterWakeups(masters, 6, 2, 3, 2*time.Millisecond)
		if err != nil {
			return err
		}
		log("clusterwake rep %d: %d waiters on %d keys, %d masters: %d acquisitions, %d handoffs; %d bus publishes; wake p50 %v p99 %v max %v; errors %d",
			rep+1, res.Waiters, res.Keys, res.Masters, res.Acquisitions, res.Handoffs, res.BusPublishes, res.WakeP50, res.WakeP99, res.WakeMax, res.Errors)
		if res.FirstError != "" {
			log("clusterwake first error: %s", res.FirstError)
		}
		r.ClusterWakeups = append(r.ClusterWakeups, res)
	}
	return nil
}

// network runs the uncontended and contended scenarios with every
// library's clients connected through a fresh bench.LatencyProxy (one per
// library's run) to single, adding s.netLatency in each direction, the
// proxy's own hop included (see bench.CalibrateProxy). (Not
// dlocktest.Proxy: its SetLatency sleeps with time.Sleep, which adds about
// a millisecond for anything under one; see LatencyProxy.) INFO still goes
// to the server directly.
func network(r *bench.Report, s settings, single *dlocktest.Server, srv bench.Server, libs []bench.Library, log func(string, ...any), flush func()) error {
	var err error
	r.NetLatency = s.netLatency
	if r.NetRTT, err = bench.CalibrateProxy(single.Addr(), s.netLatency, 500); err != nil {
		return err
	}
	rt := r.NetRTT
	log("network: PING round trip %v direct, %v through a LatencyProxy without delay, %v with delay %v (%v added each way); %v through a dlocktest.Proxy",
		rt.Direct, rt.Hop, rt.LatencyProxy, rt.Delay, rt.AddedEachWay(), rt.DlocktestProxy)
	proxied := func(f func(addr string) error) error {
		px, err := bench.NewLatencyProxy(single.Addr(), rt.Delay)
		if err != nil {
			return err
		}
		defer px.Close()
		return f(px.Addr())
	}
	for _, g := range []int{1, 64} {
		dst := &r.NetUncontended64
		if g == 1 {
			dst = &r.NetUncontended1
		}
		// The floors too: the fence's price over a network (issue 46).
		ulibs := append(slices.Clip(libs), bench.FloorLibraries()...)
		err := uncontendedReps(dst, ulibs, s.netReps, "network uncontended", g, log, flush, func(lib bench.Library) (res bench.UncontendedResult, err error) {
			err = proxied(func(addr string) error {
				res, err = bench.Uncontended(lib, []string{addr}, g, s.netWarm, s.netDur, &srv)
				return err
			})
			return res, err
		})
		if err != nil {
			return err
		}
	}
	// The floor of a hand-off too: dlock's hand-off in round trips (issue 46).
	clibs := append(slices.Clip(libs), bench.FloorHandoffLibrary())
	for _, cfg := range contendedConfigs {
		cc, err := contendedReps(cfg, clibs, s.netReps, "network contended", log, flush, func(lib bench.Library) (res bench.ContendedResult, err error) {
			err = proxied(func(addr string) error {
				res, err = bench.Contended(lib, bench.Server{Addr: addr, Admin: srv.Admin}, cfg.w, cfg.hold, s.netWarm, s.netDur)
				return err
			})
			return res, err
		})
		if err != nil {
			return err
		}
		r.NetContended = append(r.NetContended, cc)
	}
	return nil
}

// paired runs dlock on rueidis and bench.PairedPeer by turns (bench.Paired)
// with 1 and 64 goroutines into r, when the uncontended group runs and
// both libraries are among libs.
func paired(r *bench.Report, libs []bench.Library, addr []string, srv *bench.Server, s settings, log func(string, ...any), flush func()) error {
	a := slices.IndexFunc(libs, func(l bench.Library) bool { return l.Name == "dlock-rueidis" })
	b := slices.IndexFunc(libs, func(l bench.Library) bool { return l.Name == bench.PairedPeer })
	if !want("uncontended") || a < 0 || b < 0 {
		return nil
	}
	for _, g := range []int{1, 64} {
		pairs, err := bench.Paired(libs[a], libs[b], addr, g, s.pairs, s.pairWarm, s.pairDur, srv)
		if err != nil {
			return err
		}
		for i, p := range pairs {
			log("by turns g=%d pair %d %s %.0f ops/s, %s %.0f ops/s: %.2f×", g, i+1, p[0].Lib, p[0].OpsPerSec, p[1].Lib, p[1].OpsPerSec, p[0].OpsPerSec/p[1].OpsPerSec)
		}
		if g == 1 {
			r.Paired1 = pairs
		} else {
			r.Paired64 = pairs
		}
		flush()
	}
	r.PairedNote = fmt.Sprintf("%d pairs for each number of goroutines, each run %s warm-up, then %s measured", s.pairs, s.pairWarm, s.pairDur)
	return nil
}

// floorPaired runs each of dlock's configurations, with Acquire and with
// TryAcquire, and the floor on the same client by turns (bench.Paired),
// with 1 and 64 goroutines.
func floorPaired(r *bench.Report, libs []bench.Library, addr []string, srv *bench.Server, s settings, log func(string, ...any), flush func()) error {
	if !want("uncontended") {
		return nil
	}
	floors := bench.FloorLibraries()
	for _, g := range []int{1, 64} {
		for _, lib := range libs {
			floor, ok := bench.FloorOf(lib, floors)
			if !ok {
				continue
			}
			for _, l := range []bench.Library{lib, bench.DlockTryLibrary(lib)} {
				pairs, err := bench.Paired(l, floor, addr, g, s.floorPairs, s.pairWarm, s.pairDur, srv)
				if err != nil {
					return err
				}
				var rs []float64
				for _, p := range pairs {
					rs = append(rs, p[0].OpsPerSec/p[1].OpsPerSec)
				}
				log("floor by turns g=%d %s ÷ %s: %s", g, l.Name, floor.Name, bench.FormatRatios(rs))
				r.FloorPairs = append(r.FloorPairs, bench.FloorPairs{Lib: l.Name, Floor: floor.Name, Goroutines: g, Pairs: pairs})
				flush()
			}
		}
	}
	r.FloorNote = fmt.Sprintf("%d pairs for each configuration and number of goroutines, each run %s warm-up, then %s measured", s.floorPairs, s.pairWarm, s.pairDur)
	return nil
}

// uncontendedReps runs the uncontended scenario with g goroutines reps
// times, each library in turn (run runs one), and appends each
// repetition's row to dst, flushing after each.
func uncontendedReps(dst *[][]bench.UncontendedResult, libs []bench.Library, reps int, what string, g int, log func(string, ...any), flush func(), run func(bench.Library) (bench.UncontendedResult, error)) error {
	for rep := 0; rep < reps; rep++ {
		var row []bench.UncontendedResult
		for _, lib := range libs {
			res, err := run(lib)
			if err != nil {
				return err
			}
			log("%s g=%d rep %d %-16s %8.0f ops/s  acq p50 %v", what, g, rep+1, lib.Name, res.OpsPerSec, res.AcqP50)
			row = append(row, res)
		}
		*dst = append(*dst, row)
		flush()
	}
	return nil
}

// contendedReps runs the contended configuration cfg reps times, each
// library in turn (run runs one), flushing after each run.
func contendedReps(cfg contendedConfig, libs []bench.Library, reps int, what string, log func(string, ...any), flush func(), run func(bench.Library) (bench.ContendedResult, error)) (bench.ContendedConfig, error) {
	cc := bench.ContendedConfig{Workers: cfg.w, Hold: cfg.hold}
	for rep := 0; rep < reps; rep++ {
		var row []bench.ContendedResult
		for _, lib := range libs {
			res, err := run(lib)
			if err != nil {
				return cc, err
			}
			log("%s W=%d hold=%v rep %d %-16s %7.0f acq/s handoff p50 %v fair %.2f rt %.1f cmds %.1f viol %d err %d",
				what, cfg.w, cfg.hold, rep+1, lib.Name, res.AcqPerSec, res.HandoffP50, res.Fairness(), res.RoundTrips, res.Commands, res.Violations, res.Errors)
			row = append(row, res)
			flush()
		}
		cc.Runs = append(cc.Runs, row)
	}
	return cc, nil
}

// report prints the report, and writes it and its charts to out if set.
func report(r *bench.Report, out string) error {
	md := r.Markdown(out != "")
	fmt.Println(md)
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "benchmarks.md"), []byte(md), 0o644); err != nil {
			return err
		}
		if err := r.Charts(out); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", filepath.Join(out, "benchmarks.md"))
	} else {
		if len(onlyGroups) > 0 {
			return nil
		}
		// Render the charts anyway, so a quick run checks that code too.
		dir, err := os.MkdirTemp("", "dlockbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := r.Charts(dir); err != nil {
			return err
		}
	}
	return nil
}

// repetitions is "1 repetition" or "n repetitions".
func repetitions(n int) string {
	if n == 1 {
		return "1 repetition"
	}
	return fmt.Sprintf("%d repetitions", n)
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d)%s, %s/%s; shared with other work", model, runtime.NumCPU(), runtime.GOMAXPROCS(0), kernel, runtime.GOOS, runtime.GOARCH)
}

func redisVersion(c *redis.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

func versions() []string {
	rev := "this tree"
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		rev = "commit " + strings.TrimSpace(string(b))
	}
	out := []string{"dlock (" + rev + ")"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/redis/go-redis/v9", "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/rueidis":
			out = append(out, d.Path+" "+d.Version)
		}
	}
	return out
}
