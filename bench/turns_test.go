package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// byTurnsLibraries are the libraries TestByTurns can name: every library,
// the ceiling and the floors, and dlock's TryAcquire configurations.
func byTurnsLibraries() []Library {
	libs := append(Libraries(), CeilingLibraries()...)
	libs = append(libs, FloorLibraries()...)
	for _, d := range []Library{DlockLibrary(false), DlockLibrary(true), DlockRueidisLibrary()} {
		libs = append(libs, DlockTryLibrary(d))
	}
	return append(libs, byTurnsPrototypes...)
}

// byTurnsPrototypes are more libraries for TestByTurns (prototypes).
var byTurnsPrototypes []Library

// TestByTurns runs pairs of libraries by turns in short windows, each
// library's process kept for the whole run (so that the windows can be
// short, and the machine's drift cancels within a pair), and logs the
// median of the pairs' ratios with its interquartile range: a tool for
// looking at a change while working, beside the report's bench.Paired.
// DLOCK_TURNS="a:b,c:d" names the pairs (a measured against b);
// DLOCK_TURNS_G (default "1,64"), DLOCK_TURNS_N (pairs, default 40) and
// DLOCK_TURNS_DUR (each window, default 100ms) tune it.
func TestByTurns(t *testing.T) {
	spec := os.Getenv("DLOCK_TURNS")
	if spec == "" {
		t.Skip("DLOCK_TURNS=a:b,... names the pairs to measure")
	}
	n, dur, gs := 40, 100*time.Millisecond, []int{1, 64}
	if s := os.Getenv("DLOCK_TURNS_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("DLOCK_TURNS_DUR"); s != "" {
		dur, _ = time.ParseDuration(s)
	}
	if s := os.Getenv("DLOCK_TURNS_G"); s != "" {
		gs = nil
		for _, f := range strings.Split(s, ",") {
			g, _ := strconv.Atoi(f)
			gs = append(gs, g)
		}
	}
	libs := byTurnsLibraries()
	find := func(name string) Library {
		i := slices.IndexFunc(libs, func(l Library) bool { return l.Name == name })
		if i < 0 {
			t.Fatalf("no library %q", name)
		}
		return libs[i]
	}
	var pairs [][2]Library
	for _, p := range strings.Split(spec, ",") {
		a, b, _ := strings.Cut(p, ":")
		pairs = append(pairs, [2]Library{find(a), find(b)})
	}
	srv := startServer(t)
	for _, g := range gs {
		for _, p := range pairs {
			var procs [2]*turnsProc
			for i, l := range p {
				pr, err := l.New([]string{srv.Addr}, nil)
				if err != nil {
					t.Fatal(err)
				}
				procs[i] = &turnsProc{p: pr, base: freshKey("t")}
				defer pr.Close()
				procs[i].run(g, dur) // warm-up
			}
			var rs, as, bs []float64
			var writes, reads, cpu, ops [2]float64
			for i := range n {
				var r [2]float64
				for k := range 2 {
					side := (i + k) % 2
					w0, r0, c0 := syscalls()
					x, err := procs[side].run(g, dur)
					if err != nil {
						t.Fatal(p[side].Name, err)
					}
					w1, r1, c1 := syscalls()
					r[side] = x
					writes[side] += w1 - w0
					reads[side] += r1 - r0
					cpu[side] += c1 - c0
					ops[side] += x * dur.Seconds()
				}
				rs, as, bs = append(rs, r[0]/r[1]), append(as, r[0]), append(bs, r[1])
			}
			s := slices.Clone(rs)
			slices.Sort(s)
			t.Logf("g=%-3d %-18s %7.0f pairs/s ÷ %-16s %7.0f = %.3f× (IQR %.2f–%.2f, %d pairs of %v)",
				g, p[0].Name, median(as), p[1].Name, median(bs), median(rs), s[len(s)/4], s[3*len(s)/4], n, dur)
			for i := range 2 {
				t.Logf("      %-18s per pair: %.2f writes, %.2f reads, %.1f µs of the process' CPU", p[i].Name, writes[i]/ops[i], reads[i]/ops[i], cpu[i]/ops[i]/1e3)
			}
		}
	}
}

type turnsProc struct {
	p    Process
	base string
}

// run runs g goroutines, each on its own key, for dur; it returns the pairs
// per second.
func (p *turnsProc) run(g int, dur time.Duration) (float64, error) {
	end := time.Now().Add(dur)
	ctx := context.Background()
	var ops atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := p.base + ":" + strconv.Itoa(i)
			for time.Now().Before(end) {
				h, err := p.p.Lock(ctx, key)
				if err == nil {
					err = h.Unlock(ctx)
				}
				if err != nil {
					failed.Store(fmt.Errorf("%s: %w", key, err))
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(ops.Load()) / time.Since(start).Seconds(), nil
}

// syscalls returns this process's write and read system calls so far
// (/proc/self/io; 0 elsewhere) and its CPU time in ns.
func syscalls() (writes, reads, cpu float64) {
	b, _ := os.ReadFile("/proc/self/io")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			writes, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			reads, _ = strconv.ParseFloat(v, 64)
		}
	}
	return writes, reads, float64(processCPU())
}
