package dlock_test

// A history checker: worker processes take a lock under a seeded random
// schedule of faults on real servers and record every critical section;
// the checker verifies mutual exclusion, fence order, progress and that
// nothing is left behind. `make test` runs a short version; `make soak
// DURATION=10m` a long one (see TestHistory).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// A worker's record, one JSON line: a section begins (after Acquire
// returned) or ends (before Release, or when Lost closed), or an attempt
// ended (Acquire returned).
type record struct {
	W      int    `json:"w"`
	Kind   string `json:"kind"` // "begin", "end", "attempt"
	Fence  uint64 `json:"fence,omitempty"`
	At     int64  `json:"at"`              // Unix ns, the machine's clock
	Since  int64  `json:"since,omitempty"` // attempt: when Acquire was called
	Lost   bool   `json:"lost,omitempty"`
	Shared bool   `json:"shared,omitempty"` // begin: a shared hold (WithShared)
	Valid  int64  `json:"valid,omitempty"`  // end: the lock's ValidUntil, Unix ns
	Err    string `json:"err,omitempty"`
	Closed bool   `json:"closed,omitempty"`
	// end: the section went on under a lock that another Locker adopted
	// (Detach, Adopt: see handOver).
	Adopted bool `json:"adopted,omitempty"`
	// The other scenarios' records (history_extra_test.go): the key
	// ("": the lock's), the goroutine of a semaphore worker, the limit of a
	// SetLimit, and that a leader resigned because it was asked.
	Key   string `json:"key,omitempty"`
	G     int    `json:"g,omitempty"`
	Limit int    `json:"limit,omitempty"`
	Asked bool   `json:"asked,omitempty"`
}

const (
	historyKey     = "h"
	historyAcquire = 3 * time.Second // each Acquire's context
)

// historyWorker is a worker process: it locks and unlocks until its stdin
// closes, writing records to stdout.
func historyWorker() int {
	w, _ := strconv.Atoi(os.Getenv("DLOCK_HISTORY_W"))
	ttl, _ := time.ParseDuration(os.Getenv("DLOCK_HISTORY_TTL"))
	rw := os.Getenv("DLOCK_HISTORY_RW") == "1" // two acquisitions in three shared
	l, adopter, clients, err := historyLockers()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	emit := func(r record) {
		mu.Lock()
		defer mu.Unlock()
		r.W = w
		_ = out.Encode(r)
	}
	rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	extraDone := func() {}
	if os.Getenv("DLOCK_HISTORY_EXTRA") == "1" {
		extraDone = historyExtra(w, adopter, ttl, stop, emit)
	}
	for {
		select {
		case <-stop:
			extraDone()
			l.Close()
			adopter.Close()
			for _, c := range clients {
				c.Close()
			}
			return 0
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), historyAcquire)
		since := time.Now()
		shared := rw && rnd.IntN(3) != 0
		opts := []dlock.LockOption{dlock.WithTTL(ttl)}
		if shared {
			opts = append(opts, dlock.WithShared())
		}
		k, err := l.Acquire(ctx, historyKey, opts...)
		cancel()
		r := record{Kind: "attempt", Since: since.UnixNano(), At: time.Now().UnixNano()}
		if err != nil {
			r.Err = errClass(err)
			emit(r)
			continue
		}
		emit(r)
		emit(record{Kind: "begin", Fence: k.Fence(), At: time.Now().UnixNano(), Shared: shared})
		handed := rnd.IntN(4) == 0
		if handed {
			// One section in four goes on under another Locker (see handOver).
			if k = handOver(k, adopter, opts, emit); k == nil {
				continue
			}
		}
		// The work: mostly short; one section in ten holds the lock for
		// 0.5 to 2.5 TTLs, renewed, so that faults hit holders too.
		work := time.Duration(rnd.IntN(20)) * time.Millisecond
		if rnd.IntN(10) == 0 {
			work = ttl/2 + time.Duration(rnd.Int64N(int64(2*ttl)))
		}
		end := holdFor(k, work, false)
		end.Adopted = handed
		emit(end)
		_ = k.Release(context.Background())
	}
}

// holdFor holds k for work, or until Lost closes (or, with asked, until
// Asked does: the holder lets go when asked), reads Lost once more, and
// returns the section's "end" record: its fence, when it ended, whether
// Lost or Asked closed, and its validity as the checker reads it.
func holdFor(k *dlock.Lock, work time.Duration, asked bool) record {
	var askedCh <-chan struct{} // nil: never ready
	if asked {
		askedCh = k.Asked()
	}
	lost, wasAsked := false, false
	select {
	case <-time.After(work):
	case <-askedCh:
		wasAsked = true
	case <-k.Lost():
		lost = true
	}
	select {
	case <-k.Lost():
		lost = true
	default:
	}
	now := time.Now()
	return record{Kind: "end", Fence: k.Fence(), At: now.UnixNano(), Lost: lost, Asked: wasAsked, Valid: recordedValid(now, k.ValidUntil())}
}

// historyLockers are a worker's Locker and the adopter, which takes on the
// holds that it detaches (another process's Locker, on clients of its
// own), on the nodes of $DLOCK_HISTORY_ADDRS; clients are both's.
func historyLockers() (l, adopter *dlock.Locker, clients []redis.UniversalClient, err error) {
	var mine, adopters []redis.UniversalClient
	for _, a := range strings.Split(os.Getenv("DLOCK_HISTORY_ADDRS"), ",") {
		mine = append(mine, redis.NewClient(&redis.Options{Addr: a}))
		adopters = append(adopters, redis.NewClient(&redis.Options{Addr: a}))
	}
	clients = append(mine, adopters...)
	if l, err = dlock.NewRedlock(mine); err == nil {
		adopter, err = dlock.NewRedlock(adopters)
	}
	return l, adopter, clients, err
}

// handOver detaches k and adopts its hold with adopter: the adopted lock,
// or nil once it has recorded the end of the section (emit) when the
// Adopt failed: ownership was guaranteed until the detached lock's
// validity at most, and not past the Adopt's return.
func handOver(k *dlock.Lock, adopter *dlock.Locker, opts []dlock.LockOption, emit func(record)) *dlock.Lock {
	h := k.Detach()
	ctx, cancel := context.WithTimeout(context.Background(), historyAcquire)
	defer cancel()
	k2, err := adopter.Adopt(ctx, h.Key, h.Token, opts...)
	if err != nil {
		now := time.Now()
		emit(record{Kind: "end", Fence: h.Fence, At: now.UnixNano(), Lost: true, Valid: recordedValid(now, k.ValidUntil()), Err: "adopt: " + errClass(err)})
		return nil
	}
	return k2
}

// recordedValid is a lock's ValidUntil on the wall clock, as a worker records
// it at now. A lock that a quorum said is no longer ours has no validity
// left (the zero time): its section ends when its worker saw that.
func recordedValid(now, validUntil time.Time) int64 {
	if validUntil.IsZero() {
		return now.UnixNano()
	}
	return now.Add(time.Until(validUntil)).UnixNano()
}

func errClass(err error) string {
	for _, c := range []error{dlock.ErrNotAcquired, dlock.ErrUnavailable, dlock.ErrMisconfigured, dlock.ErrClosed} {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return err.Error()
}

// fault is one fault the schedule injected.
type fault struct {
	kind       string
	w, node    int // the worker or node it hit, or -1
	start, end time.Time
}

// historyRun is one run of the checker.
type historyRun struct {
	t       *testing.T
	seed    uint64
	rnd     *rand.Rand
	ttl     time.Duration
	rw      bool // workers take shared holds too (see historyWorker)
	servers []*dlocktest.Server
	dirs    []string
	proxies [][]*dlocktest.Proxy // [worker][node]
	workers []*historyProc
	clocks  *historyClocks // the servers' clocks under libfaketime (make reliability), or nil

	mu     sync.Mutex
	faults []fault
	recs   []record
	paused map[int][]fault // by worker: SIGSTOPs
	killed map[int][]time.Time
}

type historyProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// startWorker starts worker w (again, after a kill).
func (h *historyRun) startWorker(w int) {
	var addrs []string
	for _, p := range h.proxies[w] {
		addrs = append(addrs, p.Addr())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_HISTORY_WORKER=1", "DLOCK_HISTORY_W="+strconv.Itoa(w),
		"DLOCK_HISTORY_TTL="+h.ttl.String(), "DLOCK_HISTORY_ADDRS="+strings.Join(addrs, ","))
	if h.rw {
		cmd.Env = append(cmd.Env, "DLOCK_HISTORY_RW=1")
	} else {
		cmd.Env = append(cmd.Env, "DLOCK_HISTORY_EXTRA=1") // history_extra_test.go
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	p := &historyProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				h.mu.Lock()
				h.recs = append(h.recs, r)
				h.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	h.workers[w] = p
}

func (h *historyRun) logFault(f fault) {
	h.mu.Lock()
	h.faults = append(h.faults, f)
	h.mu.Unlock()
}

// inject runs one fault, chosen and timed by the seeded generator, and
// returns when it is over.
func (h *historyRun) inject() {
	n, nw := len(h.servers), len(h.workers)
	w, node := h.rnd.IntN(nw), h.rnd.IntN(n)
	d := time.Duration(200+h.rnd.IntN(2300)) * time.Millisecond
	start := time.Now()
	var kind string
	kinds := 10
	if h.clocks != nil {
		kinds = 12 // and the clock faults (history_clock_test.go)
	}
	switch k := h.rnd.IntN(kinds); k {
	case 10, 11:
		kind = h.clocks.fault(node, k == 10)
	case 0:
		kind = "latency"
		h.proxies[w][node].SetLatency(time.Duration(20+h.rnd.IntN(130)) * time.Millisecond)
		time.Sleep(d)
		h.proxies[w][node].SetLatency(0)
	case 1:
		kind = "latency spike over the TTL"
		h.proxies[w][node].SetLatency(h.ttl * 3 / 2)
		time.Sleep(h.ttl)
		h.proxies[w][node].SetLatency(0)
	case 2:
		kind = "black hole"
		h.proxies[w][node].BlackHole(true)
		time.Sleep(d)
		h.proxies[w][node].BlackHole(false)
	case 3:
		kind = "connections reset"
		h.proxies[w][node].Reset()
	case 4:
		if n == 1 {
			kind = "worker partitioned"
		} else if h.rnd.IntN(2) == 0 {
			kind = "worker partitioned from a minority"
		} else {
			kind = "worker partitioned from a majority"
		}
		size := n/2 + 1 // a majority; one node of one
		if kind == "worker partitioned from a minority" {
			size = n / 2
		}
		cut := h.rnd.Perm(n)[:size]
		for _, i := range cut {
			h.proxies[w][i].BlackHole(true)
		}
		time.Sleep(d)
		for _, i := range cut {
			h.proxies[w][i].BlackHole(false)
		}
	case 5:
		kind = "redis-server frozen"
		if d > h.ttl && h.rnd.IntN(2) == 0 {
			kind = "redis-server frozen over the TTL"
		}
		_ = h.servers[node].Freeze()
		time.Sleep(d)
		_ = h.servers[node].Thaw()
	case 6:
		kind = "redis-server killed, restarted with its data"
		_ = h.servers[node].Kill()
		time.Sleep(d / 4)
		h.restart(node, false)
	case 7:
		kind = "redis-server restarted empty after a TTL"
		_ = h.servers[node].Kill()
		time.Sleep(h.ttl + h.ttl/10)
		h.restart(node, true)
	case 8:
		kind = "holder killed (SIGKILL)"
		p := h.workers[w]
		_ = p.cmd.Process.Kill()
		<-p.done
		h.mu.Lock()
		h.killed[w] = append(h.killed[w], time.Now())
		h.mu.Unlock()
		h.startWorker(w)
	case 9:
		kind = "holder paused (SIGSTOP) over its validity"
		p := h.workers[w]
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(h.ttl * 3 / 2)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		h.mu.Lock()
		h.paused[w] = append(h.paused[w], fault{start: start, end: time.Now()})
		h.mu.Unlock()
	}
	h.logFault(fault{kind: kind, w: w, node: node, start: start, end: time.Now()})
}

// restart starts node i again on its port, with its data, or without.
func (h *historyRun) restart(i int, empty bool) {
	if empty {
		entries, _ := os.ReadDir(h.dirs[i])
		for _, e := range entries {
			_ = os.RemoveAll(h.dirs[i] + "/" + e.Name())
		}
	}
	for range 50 {
		if err := h.servers[i].Restart(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Errorf("node %d could not be restarted", i)
}

// TestHistory runs the history checker on one Redis and on a 5-node
// Redlock, each for $DLOCK_HISTORY_DURATION (default 30s), with seed
// $DLOCK_HISTORY_SEED (default random, printed); then the read-write
// scenario (two acquisitions in three shared) on each, for a third as long.
func TestHistory(t *testing.T) {
	// Beside the other parallel tests, which mostly wait: the history's
	// checks are of safety and of what is left once its workers stopped,
	// which load does not change.
	t.Parallel()
	duration := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DLOCK_HISTORY_DURATION")); err == nil {
		duration = d
	}
	seed := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv("DLOCK_HISTORY_SEED"), 10, 64); err == nil {
		seed = s
	}
	for _, rw := range []bool{false, true} {
		for _, nodes := range []int{1, 5} {
			name, d := fmt.Sprintf("%d node(s)", nodes), duration
			if rw {
				name, d = name+", read-write", duration/3
			}
			t.Run(name, func(t *testing.T) {
				runHistory(t, nodes, 4, d, seed+uint64(nodes), rw)
			})
		}
	}
}

func runHistory(t *testing.T, nodes, workers int, duration time.Duration, seed uint64, rw bool) {
	t.Logf("seed %d (replay with DLOCK_HISTORY_SEED=%d, for %d node(s))", seed, seed-uint64(nodes), nodes)
	h := &historyRun{t: t, seed: seed, rnd: rand.New(rand.NewPCG(seed, 0)), ttl: time.Second, rw: rw,
		paused: map[int][]fault{}, killed: map[int][]time.Time{}}
	h.clocks = newHistoryClocks(t, nodes)
	for i := range nodes {
		dir := t.TempDir()
		s := dlocktest.Start(t, append(h.clocks.options(i),
			dlocktest.WithArgs("--appendonly", "yes", "--appendfsync", "always", "--dir", dir))...)
		h.servers, h.dirs = append(h.servers, s), append(h.dirs, dir)
	}
	h.proxies = make([][]*dlocktest.Proxy, workers)
	for w := range h.proxies {
		for _, s := range h.servers {
			p, err := dlocktest.NewProxy(s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			h.proxies[w] = append(h.proxies[w], p)
		}
	}
	h.workers = make([]*historyProc, workers)
	for w := range workers {
		h.startWorker(w)
	}
	start := time.Now()
	for time.Since(start) < duration {
		h.inject()
		time.Sleep(time.Duration(100+h.rnd.IntN(400)) * time.Millisecond)
	}
	// Stop: every worker finishes its section and exits.
	for _, p := range h.workers {
		p.stdin.Close()
	}
	for _, p := range h.workers {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("a worker did not stop within 30s")
		}
	}
	stopped := time.Now()
	// One TTL for the keys of killed holders, then nothing may be left.
	time.Sleep(h.ttl + 200*time.Millisecond)
	for i, s := range h.servers {
		c := s.Client()
		if n := c.Exists(context.Background(), "dlock:{"+historyKey+"}").Val(); n != 0 {
			t.Errorf("node %d: the lock key is left %s after every worker stopped", i, time.Since(stopped).Round(time.Millisecond))
		}
		c.Close()
	}
	sum := h.check(t.Errorf)
	t.Log(sum)
	if path := os.Getenv("DLOCK_HISTORY_SUMMARY"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%d node(s), read-write %v, %s, seed %d: %s\n", nodes, rw, duration, seed-uint64(nodes), sum)
			f.Close()
		}
	}
}

// section is one holder's critical section.
type section struct {
	w          int
	fence      uint64
	start, end int64
	since      int64 // when the attempt that granted it began (0: not known)
	lost       bool
	late       bool // the worker saw the end after its validity (it was slow)
	shared     bool // a shared hold: it may overlap other shared ones
}

// check verifies the history, reporting each violation with errorf, and
// returns a summary.
func (h *historyRun) check(errorf func(format string, args ...any)) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	byKey := map[string][]record{}
	for _, r := range h.recs {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	sum, violations, note := h.checkSections(byKey[""], errorf)
	if len(byKey[historyElection])+len(byKey[historySemaphore]) > 0 {
		es, ev := h.checkElection(byKey[historyElection], errorf)
		ss, sv := h.checkLimits(byKey[historySemaphore], errorf)
		sum, violations = sum+"; "+es+"; "+ss, violations+ev+sv
	}
	return fmt.Sprintf("%s, violations %d", sum, violations) + note
}

// checkSections checks the exclusive (or shared) sections of one key's
// records: exclusion, fence order, progress, bounded attempts. It returns
// a summary, the number of violations and a note on the clock limit.
func (h *historyRun) checkSections(recs []record, errorf func(format string, args ...any)) (string, int, string) {
	var secs []section
	open := map[int]*section{}
	attempted := map[int]int64{} // each worker's last attempt's start
	attempts, adopted, failures := 0, 0, map[string]int{}
	var longest time.Duration
	for _, r := range recs {
		switch r.Kind {
		case "begin":
			if s := open[r.W]; s != nil {
				// The worker began again without ending: it was killed
				// (and started anew); its section ended at the kill.
				if k, ok := h.killedAfter(r.W, s.start); ok && k <= r.At {
					s.end = k
				} else {
					errorf("worker %d began fence %d without ending fence %d, and was not killed in between", r.W, r.Fence, s.fence)
					s.end = r.At
				}
				secs = append(secs, *s)
			}
			open[r.W] = &section{w: r.W, fence: r.Fence, start: r.At, shared: r.Shared, since: max(r.Since, attempted[r.W])}
		case "end":
			if r.Adopted {
				adopted++
			}
			if strings.HasPrefix(r.Err, "adopt: ") {
				failures[r.Err]++
			}
			if s := open[r.W]; s != nil && r.Fence != s.fence {
				errorf("worker %d ended fence %d with fence %d (a hand-over changed it)", r.W, s.fence, r.Fence)
			}
			if s := open[r.W]; s != nil {
				// Ownership is guaranteed until ValidUntil; a worker that
				// sees Lost later was slow (a pause), which the fences, not
				// the lock, must cover.
				s.end, s.lost = min(r.At, r.Valid), r.Lost
				s.late = r.At > r.Valid
				secs = append(secs, *s)
				delete(open, r.W)
			}
		case "attempt":
			attempted[r.W] = r.Since
			attempts++
			if r.Err != "" {
				failures[r.Err]++
			}
			d := time.Duration(r.At - r.Since)
			if d > historyAcquire+2*time.Second && !h.pausedDuring(r.W, r.Since, r.At) {
				errorf("worker %d waited %s in an Acquire with a %s context", r.W, d, historyAcquire)
			}
			longest = max(longest, d)
		}
	}
	// A section whose worker was killed ends at the kill.
	for w, s := range open {
		if k, ok := h.killedAfter(w, s.start); ok {
			s.end = k
			secs = append(secs, *s)
		}
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i].start < secs[j].start })
	violations := 0
	// fences: every fence given (never twice, over a Redlock too).
	fences := map[uint64]bool{}
	lost, late, shared, sharedOverlaps, clockOverlaps := 0, 0, 0, 0, 0
	begunLate, begunLateUnpaused, last := 0, 0, -1
	var clockDetails []string
	for i, s := range secs {
		if s.lost {
			lost++
		}
		if s.late && !h.pausedDuring(s.w, s.start, s.end) {
			late++ // not paused by the test: the worker was slow
		}
		if s.shared {
			shared++
		}
		if fences[s.fence] {
			violations++
			errorf("fence %d issued twice", s.fence)
		}
		fences[s.fence] = true
		// Fences follow the order of the sections, except between shared
		// holds (granted at once, recorded in any order), and except for a
		// section whose begin was recorded after its validity had ended:
		// its worker was paused or slow between the grant and the record,
		// so the record does not tell when it was granted (the next
		// holder's larger fence is what refuses its writes). Such a
		// section is counted, and the sections after it are compared with
		// the last one recorded in time.
		if s.end <= s.start {
			begunLate++
			if !h.pausedDuring(s.w, s.since, s.start) {
				begunLateUnpaused++ // slow, not paused by the test: reported
			}
		} else {
			if last >= 0 {
				p := secs[last]
				if s.fence <= p.fence && !(s.shared && p.shared) {
					violations++
					errorf("fence %d (worker %d) after fence %d (worker %d)", s.fence, s.w, p.fence, p.w)
				}
			}
			last = i
		}
		// Overlap, of sections one of which is exclusive: allowed only
		// when the earlier holder was paused when the later one began (a
		// paused process cannot be excluded; the fences then tell them
		// apart).
		overlapped := false
		for j := i - 1; j >= 0 && j >= i-32 && s.end > s.start; j-- {
			q := secs[j]
			if q.end > s.start && q.shared && s.shared && !overlapped {
				overlapped = true
				sharedOverlaps++
			}
			if q.end > s.start && !(q.shared && s.shared) && !h.pausedDuring(q.w, s.start, s.start) {
				if h.clockJumpedDuring(q.start, s.start) {
					clockOverlaps++ // the clock limit of DESIGN §6, measured
					if len(clockDetails) < 3 {
						clockDetails = append(clockDetails, fmt.Sprintf("worker %d (fence %d%s) held until %s after worker %d (fence %d%s) began",
							q.w, q.fence, sharedMark(q.shared), time.Duration(q.end-s.start), s.w, s.fence, sharedMark(s.shared)))
					}
					continue
				}
				violations++
				errorf("overlap: worker %d (fence %d) held until %s after worker %d (fence %d) began",
					q.w, q.fence, time.Duration(q.end-s.start), s.w, s.fence)
			}
		}
	}
	// Progress: a gap between sections not explained by a fault (with a
	// TTL and 2s to recover after it) is a waiter that was not woken.
	worst := time.Duration(0)
	for i := 1; i < len(secs); i++ {
		gap := h.unexplained(secs[i-1].end, secs[i].start)
		worst = max(worst, gap)
		if gap > h.ttl+2*time.Second {
			violations++
			errorf("no holder for %s between fence %d and %d, with workers waiting and no fault to explain it", gap, secs[i-1].fence, secs[i].fence)
		}
	}
	if h.rw && shared >= 20 && sharedOverlaps == 0 {
		// (A short run under faults may hold too few shared sections to
		// tell.)
		violations++
		errorf("no two shared sections overlapped in %d: the shared holds were exclusive", shared)
	}
	kinds := map[string]int{}
	for _, f := range h.faults {
		kinds[f.kind]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ks)
	var fs []string
	for k, n := range failures {
		fs = append(fs, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, "dlock: "), n))
	}
	sort.Strings(fs)
	return fmt.Sprintf("%d acquisitions (%d shared, %d of them beside another; %d ended by Lost; %d not paused by the test but seen by their worker after the validity; %d recorded only after their validity, %d of them not paused by the test), %d attempts (failed: %s; longest %s), faults %d (%s), longest unexplained gap %s, %d sections handed over (Detach, Adopt), overlaps after a server's clock jumped forward (the clock limit) %d",
		len(secs), shared, sharedOverlaps, lost, late, begunLate, begunLateUnpaused, attempts, strings.Join(fs, ", "), longest.Round(time.Millisecond), len(h.faults), strings.Join(ks, ", "),
		worst.Round(time.Millisecond), adopted, clockOverlaps), violations, clockNote(clockDetails)
}

// killedAfter returns the first time worker w was killed after from.
func (h *historyRun) killedAfter(w int, from int64) (int64, bool) {
	for _, k := range h.killed[w] {
		if k.UnixNano() > from {
			return k.UnixNano(), true
		}
	}
	return 0, false
}

// pausedDuring reports whether worker w was paused at some time in [from, to].
func (h *historyRun) pausedDuring(w int, from, to int64) bool {
	for _, p := range h.paused[w] {
		if p.start.UnixNano() <= to && p.end.UnixNano() >= from {
			return true
		}
	}
	return false
}

// unexplained is the part of [from, to] that no fault, with a TTL and 2s of
// recovery after it, covers.
func (h *historyRun) unexplained(from, to int64) time.Duration {
	if to <= from {
		return 0
	}
	type span struct{ a, b int64 }
	var cover []span
	for _, f := range h.faults {
		cover = append(cover, span{f.start.UnixNano(), f.end.Add(h.ttl + 2*time.Second).UnixNano()})
	}
	sort.Slice(cover, func(i, j int) bool { return cover[i].a < cover[j].a })
	left, at := time.Duration(0), from
	for _, c := range cover {
		if c.b <= at || c.a >= to {
			continue
		}
		if c.a > at {
			left += time.Duration(c.a - at)
		}
		at = max(at, c.b)
		if at >= to {
			return left
		}
	}
	return left + time.Duration(to-at)
}

// TestHistoryChecker: the checker finds what it is for, in made-up
// histories: an overlap, a fence that goes backwards or repeats, a gap with
// no fault to explain it; and accepts a paused holder's overlap.
func TestHistoryChecker(t *testing.T) {
	base := time.Now()
	at := func(ms int) int64 { return base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	sec := func(w int, fence uint64, from, to int) []record {
		return []record{{W: w, Kind: "begin", Fence: fence, At: at(from)}, {W: w, Kind: "end", Fence: fence, At: at(to), Valid: at(to + 1000)}}
	}
	shared := func(w int, fence uint64, from, to int) []record {
		rs := sec(w, fence, from, to)
		rs[0].Shared = true
		return rs
	}
	// late: a section whose begin was recorded after its validity ended
	// (its worker was paused or slow between its grant and the record).
	late := func(w int, fence uint64, from, to, valid int) []record {
		rs := sec(w, fence, from, to)
		rs[1].Lost, rs[1].Valid = true, at(valid)
		return rs
	}
	for _, tc := range []struct {
		name   string
		recs   [][]record
		paused map[int][]fault
		want   int // violations
	}{
		{"clean", [][]record{sec(0, 1, 0, 10), sec(1, 2, 20, 30), sec(0, 3, 40, 50)}, nil, 0},
		{"overlap", [][]record{sec(0, 1, 0, 30), sec(1, 2, 20, 40)}, nil, 1},
		{"fence backwards", [][]record{sec(0, 5, 0, 10), sec(1, 4, 20, 30)}, nil, 1},
		{"fence twice", [][]record{sec(0, 5, 0, 10), sec(1, 5, 20, 30)}, nil, 2}, // twice, and not increasing
		{"gap", [][]record{sec(0, 1, 0, 10), sec(1, 2, 5000, 5010)}, nil, 1},
		{"shared overlap", [][]record{shared(0, 2, 0, 30), shared(1, 1, 20, 40), sec(2, 3, 50, 60)}, nil, 0},
		{"exclusive inside shared", [][]record{shared(0, 1, 0, 30), sec(1, 2, 20, 40)}, nil, 1},
		{"shared inside exclusive", [][]record{sec(0, 1, 0, 30), shared(1, 2, 20, 40)}, nil, 1},
		{"shared fence twice on one node", [][]record{shared(0, 1, 0, 30), shared(1, 1, 20, 40)}, nil, 1},
		{"begun after its validity", [][]record{sec(0, 5, 0, 10), late(1, 4, 20, 30, 15), sec(2, 6, 40, 50)}, nil, 0},
		{"late begin inside another's section", [][]record{sec(1, 6, 0, 100), late(0, 5, 50, 60, 40)}, nil, 0},
		{"fence backwards after a late begin", [][]record{sec(0, 5, 0, 10), late(1, 4, 20, 30, 15), sec(2, 5, 40, 50)}, nil, 2},
		{"paused holder", [][]record{sec(0, 1, 0, 3000), sec(1, 2, 2000, 2010)},
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
