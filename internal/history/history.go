// Package history is dlock's history checker, for the tests of every
// client family: worker processes take a lock under a seeded random
// schedule of faults on real servers and record every critical section;
// the checker verifies mutual exclusion, fence order, progress and that
// nothing is left behind. `make test` runs a short version; `make soak
// DURATION=10m` a long one (see Test).
//
// A package's tests run it with Test, and their TestMain hands the worker
// processes (the same test binary, started again) to Worker with the
// package's Lockers:
//
//	func TestMain(m *testing.M) {
//		if history.IsWorker() {
//			os.Exit(history.Worker(lockers))
//		}
//		...
//	}
package history

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

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
	rw      bool // workers take shared holds too (see Worker)
	servers []*dlocktest.Server
	dirs    []string
	proxies [][]*dlocktest.Proxy // [worker][node]
	workers []*historyProc
	clocks  *historyClocks // the servers' clocks under libfaketime (make reliability), or nil

	mu     sync.Mutex
	faults []fault
	recs   []Record
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
		cmd.Env = append(cmd.Env, "DLOCK_HISTORY_EXTRA=1") // extra.go
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
			var r Record
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
		kinds = 12 // and the clock faults (clock.go)
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
		kind = h.partitionWorker(w, d)
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
		kind = h.killWorker(w)
	case 9:
		kind = h.pauseWorker(w)
	}
	h.logFault(fault{kind: kind, w: w, node: node, start: start, end: time.Now()})
}

// partitionWorker cuts worker w off from a majority or a minority of the
// nodes (from its one node of one) for d, and returns the fault's kind.
func (h *historyRun) partitionWorker(w int, d time.Duration) string {
	n := len(h.servers)
	kind := "worker partitioned from a majority"
	if n == 1 {
		kind = "worker partitioned"
	} else if h.rnd.IntN(2) == 0 {
		kind = "worker partitioned from a minority"
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
	return kind
}

// killWorker kills worker w (SIGKILL), records when, and starts it anew.
func (h *historyRun) killWorker(w int) string {
	p := h.workers[w]
	_ = p.cmd.Process.Kill()
	<-p.done
	h.mu.Lock()
	h.killed[w] = append(h.killed[w], time.Now())
	h.mu.Unlock()
	h.startWorker(w)
	return "holder killed (SIGKILL)"
}

// pauseWorker stops worker w (SIGSTOP) for longer than its validity, and
// records the pause.
func (h *historyRun) pauseWorker(w int) string {
	p, start := h.workers[w], time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(h.ttl * 3 / 2)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	h.mu.Lock()
	h.paused[w] = append(h.paused[w], fault{start: start, end: time.Now()})
	h.mu.Unlock()
	return "holder paused (SIGSTOP) over its validity"
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

// Test runs the history checker on one Redis and on a 5-node Redlock,
// each for $DLOCK_HISTORY_DURATION (default: duration), with seed
// $DLOCK_HISTORY_SEED (default random, printed); then the read-write
// scenario (two acquisitions in three shared) on each, for a third as
// long; with parallel, two or more of the four at once (as many as
// -parallel lets run). Its workers are the test binary itself, started
// again: its TestMain must run Worker when IsWorker.
func Test(t *testing.T, duration time.Duration, parallel bool) {
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
				if parallel {
					t.Parallel()
				}
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
