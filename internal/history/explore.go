package history

// The explorer: every public call of the Locker, at random and at once, on
// Lockers shared by goroutines of one process, under command-level faults
// (faultconn.go: lost replies, commands run twice or late, resets, a
// Locker cut off from a master, a slow node) and server faults, on one
// Redis, Redlocks of 3 and 5 masters and a Cluster; then the checks of the
// recorded history (explore_check.go): exclusion, limits, fences, terms,
// the truth of errors, liveness. It runs in-process (the worker processes
// of Test keep the process-level faults: kills, pauses).

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// Topology is a deployment the explorer runs on: one Redis (Nodes 1), a
// Redlock of Nodes masters, or a Cluster of Nodes masters.
type Topology struct {
	Name    string
	Nodes   int
	Cluster bool
}

// Topologies are every deployment the explorer knows.
var Topologies = []Topology{
	{Name: "one Redis", Nodes: 1},
	{Name: "Redlock of 3", Nodes: 3},
	{Name: "Redlock of 5", Nodes: 5},
	{Name: "Cluster of 3", Nodes: 3, Cluster: true},
}

// A Family makes the explorer's Lockers on one client family.
type Family struct {
	Name string
	// New returns a Locker on addrs: one address is one Redis (New), more
	// a Redlock (NewRedlock); with cluster, addrs are a Cluster's masters
	// (New on a Cluster client). Before it makes the Locker it calls
	// register with each node's index and its key in WrapConn's registry
	// (the go-redis client; unless ByAddr). closeClients closes the
	// clients (after the Locker's Close); it is not nil, also with an
	// error.
	New func(addrs []string, cluster bool, register func(i int, key any)) (l *dlock.Locker, closeClients func(), err error)
	// ByAddr: the family's nodes are told apart by address (a node.Client's
	// Describe().Addr): each Locker slot reaches the servers through fault
	// proxies of its own, whose addresses are the registry's keys. No
	// Cluster then.
	ByAddr bool
	// ProxyFaults: the faults are the proxies' (resets, copies held back and
	// the client's connection reset: see dlocktest.Proxy.HoldNext), so that
	// the client's own retries run, and none of the wrapper's.
	ProxyFaults bool
}

// GoRedisFamily is dlock.New and dlock.NewRedlock on go-redis clients with
// their default options (MaxRetries 3).
var GoRedisFamily = Family{Name: "go-redis", New: goRedisLocker}

// GoRedisProxyFamily is GoRedisFamily behind fault proxies that reset
// connections and hold copies of commands back: go-redis' own retries.
var GoRedisProxyFamily = Family{Name: "go-redis behind resetting proxies", New: goRedisLocker, ByAddr: true, ProxyFaults: true}

// Explore runs the explorer.
type Explore struct {
	Family     Family
	Topologies []Topology
	// Duration is each topology's ($DLOCK_EXPLORE_DURATION overrides it).
	Duration time.Duration
	// Seed (0: $DLOCK_EXPLORE_SEED, else random, printed).
	Seed uint64
	// Sabotage, if not "", names a sabotage of sabotage.go applied to the
	// library's scripts (or the harness) for the whole run.
	Sabotage string
	// Parallel runs the topologies as parallel subtests.
	Parallel bool
	// Report, if not nil, gets each topology's result instead of the
	// violations failing the test (the sabotage self-test).
	Report func(Result)
}

// Result is one topology's run.
type Result struct {
	Family, Topology string
	Seed             uint64
	Duration         time.Duration
	Operations       int
	Faults           map[string]int
	Violations       []Violation
}

// Violation is one failed check, with when it was found (since the run
// began) and a minimal history around it.
type Violation struct {
	Check   string
	At      time.Duration
	Message string
	History []string
}

// Summary is the result's line: operations, faults by kind, violations.
func (r Result) Summary() string {
	var ks []string
	n := 0
	for k, c := range r.Faults {
		ks = append(ks, fmt.Sprintf("%s %d", k, c))
		n += c
	}
	sort.Strings(ks)
	by := map[string]int{}
	for _, v := range r.Violations {
		by[v.Check]++
	}
	var vs []string
	for k, c := range by {
		vs = append(vs, fmt.Sprintf("%s %d", k, c))
	}
	sort.Strings(vs)
	v := fmt.Sprint(len(r.Violations))
	if len(vs) > 0 {
		v += " (" + strings.Join(vs, ", ") + ")"
	}
	return fmt.Sprintf("explore %s, %s, seed %d, %s: operations %d, faults %d (%s), violations %s",
		r.Family, r.Topology, r.Seed, r.Duration, r.Operations, n, strings.Join(ks, ", "), v)
}

// Run runs the explorer on each topology, one subtest each, and prints its
// summary line; each violation fails the test (unless Report is set).
func (e Explore) Run(t *testing.T) {
	if d, err := time.ParseDuration(os.Getenv("DLOCK_EXPLORE_DURATION")); err == nil {
		e.Duration = d
	}
	seed := e.Seed
	if s, err := strconv.ParseUint(os.Getenv("DLOCK_EXPLORE_SEED"), 10, 64); err == nil && seed == 0 {
		seed = s
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	tops := e.Topologies
	if tops == nil {
		tops = Topologies
	}
	for _, top := range tops {
		if top.Cluster && e.Family.ByAddr {
			continue
		}
		t.Run(top.Name, func(t *testing.T) {
			if e.Parallel {
				t.Parallel()
			}
			e.runOne(t, top, seed)
		})
	}
}

func (e Explore) runOne(t *testing.T, top Topology, seed uint64) {
	t.Logf("seed %d (replay with DLOCK_EXPLORE_SEED=%d)", seed, seed)
	x := newRun(t, e, top, seed)
	x.explore(e.Duration)
	res := x.result(e.Duration)
	switch {
	case e.Report != nil:
		e.Report(res)
	case len(res.Violations) > 0 && !res.safety() && os.Getenv("DLOCK_EXPLORE_DURATION") == "":
		// make test's brief run met a violation of the errors' truth or
		// of liveness only (no safety check): it is named in full, and
		// the seed runs once more; the test fails if any violation is
		// seen again. A defect that a seed's schedule brings out fails
		// the test; one seen once in a brief run is named for make
		// verify to chase (reliability.md, "Where it runs"). Safety
		// violations fail at once.
		for _, v := range res.Violations {
			t.Logf("seen once: %s at %s: %s\n\t%s", v.Check, v.At.Round(time.Millisecond), v.Message, strings.Join(v.History, "\n\t"))
		}
		t.Log(res.Summary())
		fmt.Println(res.Summary(), "(the seed runs once more)")
		x = newRun(t, e, top, seed)
		x.explore(e.Duration)
		res = x.result(e.Duration)
		res.failAll(t)
	default:
		res.failAll(t)
	}
	if os.Getenv("DLOCK_EXPLORE_DEBUG") != "" {
		t.Log(x.faultsByScript())
		t.Logf("shortening Extends with a copy held back: %d", x.lateShort.Load())
		outcomes := map[string]int{}
		for _, c := range x.claims {
			k := c.kind + ": ok"
			if c.err != nil {
				k = c.kind + ": " + ErrClass(c.err)
			}
			outcomes[k]++
		}
		t.Logf("outcomes: %v", outcomes)
		for _, h := range x.holds {
			if h.lateShort != 0 {
				t.Logf("late short: %s at %s, ended %s at %s, lost at %s (quorum %v), valid %s", h, x.since(h.lateShort), h.how, x.since(h.end), x.since(h.lost), h.lostQ, x.since(h.valid))
			}
		}
	}
	t.Log(res.Summary())
	fmt.Println(res.Summary())
	if path := os.Getenv("DLOCK_EXPLORE_LOG"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, res.Summary())
			for _, v := range res.Violations {
				fmt.Fprintf(f, "%s at %s: %s\n\t%s\n", v.Check, v.At.Round(time.Millisecond), v.Message, strings.Join(v.History, "\n\t"))
			}
			f.Close()
		}
	}
	if path := os.Getenv("DLOCK_EXPLORE_SUMMARY"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, res.Summary())
			f.Close()
		}
	}
}

// safety reports whether a violation is of a safety check: anything but
// the truth of errors (ErrNotHeld, ErrUnavailable, ErrMisconfigured,
// ErrLockLost, an Adopt refused) and liveness.
func (r Result) safety() bool {
	for _, v := range r.Violations {
		switch v.Check {
		case "ErrNotHeld untrue", "ErrUnavailable untrue", "ErrMisconfigured untrue", "lost untrue", "Adopt untrue", "liveness":
		default:
			return true
		}
	}
	return false
}

// failAll fails t with each violation, the first eight with their history.
func (r Result) failAll(t *testing.T) {
	for i, v := range r.Violations {
		if i < 8 {
			t.Errorf("%s at %s: %s\n\t%s", v.Check, v.At.Round(time.Millisecond), v.Message, strings.Join(v.History, "\n\t"))
		} else {
			t.Errorf("%s at %s: %s", v.Check, v.At.Round(time.Millisecond), v.Message)
		}
	}
}

// The explorer's keys, each of one shape.
const (
	kLock   = "x"   // a lock: Acquire, TryAcquire, Do, AcquireAll (with kLock2), hand-offs
	kLock2  = "y"   // a lock, AcquireAll's other key
	kRW     = "rw"  // shared holds and exclusive ones
	kSem    = "sem" // a semaphore whose limit changes (SetLimit)
	kSemBig = "big" // a semaphore of semBigLimit, taken by bursts of TryAcquire
	kElect  = "el"  // an election
	kQuiet  = "q"   // a lock that one operation at a time uses (see opQuiet)
)

const (
	semBigLimit = 20
	semFirst    = 3 // kSem's limit at first
	slots       = 4 // Locker slots (the changer's Locker is one more)
	workers     = 24
	maxTTL      = 5 * time.Second
)

// exploreRun is one topology's run.
type exploreRun struct {
	t          *testing.T
	e          Explore
	top        Topology
	seed       uint64
	began      time.Time
	servers    []*dlocktest.Server
	cluster    *dlocktest.Cluster
	addrs      []string
	slots      []*slot
	faults     [][]*nodeFaults // [slot][node]
	stop       chan struct{}
	ops        atomic.Int64
	lateShort  atomic.Int64 // shortening Extends whose copy was held back (debug)
	storm      atomic.Bool  // the faults that a caller sees are drawn (see faultLoop)
	mon        monitors     // what the servers ran ($DLOCK_EXPLORE_MONITOR=1)
	ix         *index       // the records indexed for the checks (result)
	monitoring bool
	sab        *sabotage
	changer    *changer
	inflight   []inflight // by slot

	mu       sync.Mutex
	nextID   int
	holds    []*hold
	claims   []*claim // errors and results to judge once the run is over
	closes   []closeRec
	forces   []span
	limits   []limitChange
	global   []faultRec // faults of every Locker (servers')
	injected []faultRec // every fault, for the histories (the first 200,000)
	cmdBad   []cmdRec   // commands whose caller saw an error or no answer
	kinds    map[string]int
	quiet    sync.Mutex // see opQuiet
	// histories counts the violations given a history, by kind of message.
	histories map[string]int
	viol      []Violation
}

// span is an interval of a call, in Unix ns.
type span struct {
	key        string
	start, end int64
}

// closeRec is a Locker's Close.
type closeRec struct {
	slot, gen  int
	start, end int64
	ok         bool
}

// faultRec is a fault the run injected, for the violations' histories.
type faultRec struct {
	kind       string
	slot, node int
	key, what  string
	start, end int64
}

// cmdRec is a command whose caller saw an error or no answer.
type cmdRec struct {
	slot, node      int
	key, kind, what string
	start, end      int64
}

// inflight are the commands of one slot under way: id → start.
type inflight struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]int64
}

func newRun(t *testing.T, e Explore, top Topology, seed uint64) *exploreRun {
	x := &exploreRun{t: t, e: e, top: top, seed: seed, stop: make(chan struct{}), kinds: map[string]int{}, histories: map[string]int{}}
	x.sab = newSabotage(e.Sabotage)
	x.startServers()
	x.inflight = make([]inflight, slots+1)
	for i := range x.inflight {
		x.inflight[i].m = map[uint64]int64{}
	}
	rate := []float64{0.05, 0.1, 0.2}[seed%3]
	if e.Family.ProxyFaults {
		rate = 0
	}
	for s := range slots + 1 {
		x.slots = append(x.slots, x.newSlot(s))
		var fs []*nodeFaults
		for n := range x.nodes() {
			fs = append(fs, &nodeFaults{run: x, slot: s, node: n, rate: rate, rnd: rand.New(rand.NewPCG(seed, uint64(s*16+n)))})
		}
		x.faults = append(x.faults, fs)
	}
	for _, s := range x.slots {
		if e.Family.ByAddr {
			for n, p := range s.proxies {
				registry.Store(p.Addr(), x.faults[s.i][n])
			}
		}
		if err := x.open(s); err != nil {
			t.Fatalf("slot %d: %v", s.i, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range x.slots {
			for _, p := range s.proxies {
				registry.Delete(p.Addr())
				p.Close()
			}
		}
	})
	return x
}

// nodes is the number of nodes of a Locker: one on a Cluster.
func (x *exploreRun) nodes() int {
	if x.top.Cluster {
		return 1
	}
	return x.top.Nodes
}

func (x *exploreRun) startServers() {
	if x.top.Cluster {
		x.cluster = dlocktest.StartCluster(x.t, x.top.Nodes)
		x.addrs = x.cluster.Addrs()
		return
	}
	x.servers = dlocktest.StartN(x.t, x.top.Nodes)
	for _, s := range x.servers {
		x.addrs = append(x.addrs, s.Addr())
	}
}

// now is the time in Unix ns.
func now() int64 { return time.Now().UnixNano() }

// since is t's time since the run began.
func (x *exploreRun) since(t int64) time.Duration { return time.Duration(t - x.began.UnixNano()) }

// id returns a new record id.
func (x *exploreRun) id() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.nextID++
	return x.nextID
}

// fault counts an injected fault, and records it for the histories.
func (x *exploreRun) fault(r faultRec, count bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if count {
		x.kinds[r.kind]++
	}
	if len(x.injected) < 200000 {
		x.injected = append(x.injected, r)
	}
	if r.slot < 0 {
		x.global = append(x.global, r)
	}
}

// sent notes a command of slot s under way.
func (x *exploreRun) sent(s int) (uint64, int64) {
	f := &x.inflight[s]
	t := now()
	f.mu.Lock()
	f.next++
	id := f.next
	f.m[id] = t
	f.mu.Unlock()
	return id, t
}

// answered notes the end of a command: its fault, and, when its caller saw
// an error or no answer, the command.
func (x *exploreRun) answered(s, n int, id uint64, start int64, key, what, kind string, bad bool, until int64) {
	f := &x.inflight[s]
	f.mu.Lock()
	delete(f.m, id)
	f.mu.Unlock()
	end := max(now(), until)
	if kind != "" {
		// The loop counts the faults that last a while (see counted).
		perCommand := kind != fCutCall && kind != fCutWhile && kind != fSlow
		x.fault(faultRec{kind: kind, slot: s, node: n, key: key, what: what, start: start, end: end}, perCommand)
	}
	if bad {
		x.mu.Lock()
		x.cmdBad = append(x.cmdBad, cmdRec{slot: s, node: n, key: key, kind: kind, what: what, start: start, end: end})
		x.mu.Unlock()
	}
}

// troubled reports whether a call of slot s that began at start, ending
// now, met a node that did not answer it: a command of the slot sent since
// start still under way, or one whose caller saw an error or no answer; or
// a fault of every Locker meanwhile.
func (x *exploreRun) troubled(s int, start int64) bool {
	f := &x.inflight[s]
	f.mu.Lock()
	for _, t := range f.m {
		if t >= start-int64(time.Millisecond) {
			f.mu.Unlock()
			return true
		}
	}
	f.mu.Unlock()
	end := now()
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := len(x.cmdBad) - 1; i >= 0; i-- {
		c := x.cmdBad[i]
		if c.slot == s && c.end >= start && c.start <= end {
			return true
		}
		if c.end < start-int64(10*time.Second) {
			break
		}
	}
	return x.globalDuring(start, end)
}

// globalDuring reports whether a fault of every Locker (a server's) hit
// [start, end].
func (x *exploreRun) globalDuring(start, end int64) bool {
	for i := len(x.global) - 1; i >= 0; i-- {
		g := x.global[i]
		if g.start <= end && g.end >= start {
			return true
		}
	}
	return false
}

// violation records a violation found during the run.
func (x *exploreRun) violation(check, format string, args ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.viol = append(x.viol, Violation{Check: check, At: time.Since(x.began), Message: fmt.Sprintf(format, args...)})
}

// stopped reports whether the run is over.
func (x *exploreRun) stopped() bool {
	select {
	case <-x.stop:
		return true
	default:
		return false
	}
}

// explore runs the operations and the faults for d, then stops them,
// closes the Lockers and delivers the copies still held back.
func (x *exploreRun) explore(d time.Duration) {
	x.began = time.Now()
	if os.Getenv("DLOCK_EXPLORE_MONITOR") == "1" && !x.top.Cluster {
		x.monitoring = true
		x.startMonitors()
	}
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	x.changer = &changer{x: x, limit: semFirst}
	goRun(x.changer.run)
	for w := range workers {
		goRun(func() { x.worker(w) })
	}
	goRun(x.faultLoop)
	time.Sleep(d)
	close(x.stop)
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		x.violation("liveness", "the operations did not stop within 30s of the end")
		<-done
	}
	x.sweep(true)
	for _, s := range x.slots {
		x.closeSlot(s, false)
	}
}

// faultsByScript counts the command-level faults by kind and script.
func (x *exploreRun) faultsByScript() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := map[string]int{}
	for _, f := range x.injected {
		if f.what != "" {
			n[f.kind+" / "+f.what]++
		}
	}
	var ks []string
	for k, c := range n {
		ks = append(ks, fmt.Sprintf("%5d %s", c, k))
	}
	sort.Strings(ks)
	return strings.Join(ks, "\n")
}
