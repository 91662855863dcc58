package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// Server is what the scenarios need from a redis-server: its address and an
// uncounted admin client for INFO and FLUSHALL.
type Server struct {
	Addr  string
	Admin *redis.Client
}

// ServerStats is a snapshot of a server's INFO commandstats and cpu.
type ServerStats struct {
	// Commands is the number of commands executed, including those run
	// inside scripts, excluding INFO, CONFIG and the admin's FLUSHALL.
	Commands int64
	// CPU is used_cpu_sys + used_cpu_user.
	CPU time.Duration
	// Usec is the time Redis spent running scripts (EVAL and EVALSHA,
	// commandstats' usec), in microseconds.
	Usec int64
	// Scripts is the number of script calls (EVAL, EVALSHA and their _RO
	// variants).
	Scripts int64
}

// Stats takes a snapshot of the server's counters.
func (s Server) Stats(ctx context.Context) (ServerStats, error) {
	info, err := s.Admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return ServerStats{}, err
	}
	return parseStats(info), nil
}

func parseStats(info string) ServerStats {
	var st ServerStats
	var cpu float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if name, rest, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, "cmdstat_") {
			cmd := strings.TrimPrefix(name, "cmdstat_")
			if cmd == "info" || strings.HasPrefix(cmd, "config") || cmd == "flushall" {
				continue
			}
			// Usec counts EVAL and EVALSHA only: their time includes the
			// commands the script runs, which Redis 7 also counts under
			// their own names.
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					st.Commands += n
					if strings.HasPrefix(cmd, "eval") {
						st.Scripts += n
					}
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok && strings.HasPrefix(cmd, "eval") {
					n, _ := strconv.ParseInt(v, 10, 64)
					st.Usec += n
				}
			}
			continue
		}
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			}
		}
	}
	st.CPU = time.Duration(cpu * float64(time.Second))
	return st
}

// counters are what a measured window reads at each of its ends: the
// commands the clients sent, this process's CPU time, and the servers'
// counters.
type counters struct {
	sent  int64
	cpu   time.Duration
	stats ServerStats
}

// readCounters reads them, the servers' with stats.
func readCounters(ctx context.Context, sent *Counter, stats func(context.Context) (ServerStats, error)) (counters, error) {
	c := counters{sent: sent.Load(), cpu: processCPU()}
	var err error
	c.stats, err = stats(ctx)
	return c, err
}

// processCPU returns the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the p-th percentile (0..100) of d, sorting it.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d)-1) * p / 100)
	return d[i]
}

// startProcesses starts n processes of lib, closing them all on error.
func startProcesses(lib Library, addrs []string, n int, sent *Counter) ([]Process, error) {
	ps := make([]Process, 0, n)
	for i := 0; i < n; i++ {
		p, err := lib.New(addrs, sent)
		if err != nil {
			closeAll(ps)
			return nil, fmt.Errorf("%s: start process: %w", lib.Name, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func closeAll(ps []Process) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Close() }()
	}
	wg.Wait()
}

var runSeq atomic.Int64

// freshKey returns a key no earlier run used, so no state is left over.
func freshKey(prefix string) string {
	return fmt.Sprintf("bench-%s-%d", prefix, runSeq.Add(1))
}

// UncontendedResult is one run of the uncontended scenario.
type UncontendedResult struct {
	Lib        string
	Goroutines int
	Ops        int64
	OpsPerSec  float64 // acquire+release pairs per second
	AcqP50     time.Duration
	AcqP99     time.Duration
	RelP50     time.Duration
	RelP99     time.Duration
	Errors     int64
	// ScriptUsec is the time Redis spent in scripts per acquire+release
	// (all pairs of the run, warm-up included), when a Server was given.
	ScriptUsec float64
}

// Paired runs the uncontended scenario (see Uncontended) for a and b by
// turns, n times each, in the order a b, b a, a b, …: the two runs of a
// pair are adjacent in time, so the machine's drift, which swings one
// library's rate several-fold within seconds on a shared machine, cancels
// in each pair's ratio. (Within a repetition the libraries run seconds
// apart.) It returns the pairs, a's result first.
func Paired(a, b Library, addrs []string, g, n int, warm, dur time.Duration, srv *Server) ([][]UncontendedResult, error) {
	var out [][]UncontendedResult
	for i := range n {
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		x, err := Uncontended(first, addrs, g, warm, dur, srv)
		if err != nil {
			return out, err
		}
		y, err := Uncontended(second, addrs, g, warm, dur, srv)
		if err != nil {
			return out, err
		}
		if i%2 == 1 {
			x, y = y, x
		}
		out = append(out, []UncontendedResult{x, y})
	}
	return out, nil
}

// Uncontended runs g goroutines of one process, each acquiring and releasing
// its own key, for warm + dur; the numbers cover the last dur. srv, if not
// nil, is the server of addrs[0], whose script time is measured.
func Uncontended(lib Library, addrs []string, g int, warm, dur time.Duration, srv *Server) (UncontendedResult, error) {
	res := UncontendedResult{Lib: lib.Name, Goroutines: g}
	ps, err := startProcesses(lib, addrs, 1, nil)
	if err != nil {
		return res, err
	}
	defer closeAll(ps)
	p := ps[0]
	start := time.Now()
	mStart, mEnd := start.Add(warm), start.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), mEnd.Add(5*time.Second))
	defer cancel()
	base := freshKey("u")
	var before ServerStats
	if srv != nil {
		if before, err = srv.Stats(ctx); err != nil {
			return res, err
		}
	}
	var (
		mu       sync.Mutex
		acq, rel []time.Duration
		pairs    atomic.Int64 // all pairs, warm-up included
		ops      atomic.Int64
		errs     atomic.Int64
		wg       sync.WaitGroup
	)
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := base + ":" + strconv.Itoa(i)
			var la, lr []time.Duration
			for n := 0; n < 10_000_000; n++ {
				t0 := time.Now()
				if !t0.Before(mEnd) {
					break
				}
				h, err := p.Lock(ctx, key)
				t1 := time.Now()
				if err != nil {
					errs.Add(1)
					continue
				}
				err = h.Unlock(ctx)
				t2 := time.Now()
				if err != nil {
					errs.Add(1)
				}
				pairs.Add(1)
				if !t0.Before(mStart) && t2.Before(mEnd) {
					ops.Add(1)
					if g == 1 || n%8 == 0 { // sample, to bound memory with many goroutines
						la = append(la, t1.Sub(t0))
						lr = append(lr, t2.Sub(t1))
					}
				}
			}
			mu.Lock()
			acq = append(acq, la...)
			rel = append(rel, lr...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if srv != nil {
		// A context of its own: a library's call that outlived the run's
		// context (rueidislock's, now and then, on a loaded machine) has
		// ended it, and the run is still worth its numbers.
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		after, err := srv.Stats(sctx)
		scancel()
		if err != nil {
			return res, err
		}
		if n := pairs.Load(); n > 0 {
			res.ScriptUsec = float64(after.Usec-before.Usec) / float64(n)
		}
	}
	res.Ops = ops.Load()
	res.OpsPerSec = float64(res.Ops) / dur.Seconds()
	res.AcqP50, res.AcqP99 = percentile(acq, 50), percentile(acq, 99)
	res.RelP50, res.RelP99 = percentile(rel, 50), percentile(rel, 99)
	res.Errors = errs.Load()
	return res, nil
}

// ContendedResult is one run of the contended scenario.
type ContendedResult struct {
	Lib          string
	Workers      int
	Hold         time.Duration
	Acquisitions int64
	AcqPerSec    float64
	// Handoff: one holder's Release returning → the next Acquire returning,
	// whoever the next holder is (the releaser itself included, when it
	// takes the lock straight back).
	HandoffP50 time.Duration
	HandoffP99 time.Duration
	Handoffs   int
	// OtherP50/P99: the same, counting only handoffs to another worker,
	// i.e. to a process that was waiting.
	OtherP50 time.Duration
	OtherP99 time.Duration
	// WaitP50/P99: how long Acquire took (call → return), over all
	// acquisitions: what a waiting worker experiences.
	WaitP50 time.Duration
	WaitP99 time.Duration
	// SelfShare is the share of acquisitions that went straight back to
	// the worker that had just released.
	SelfShare float64
	FairMin   int64
	FairMax   int64
	// RoundTrips is the number of commands the clients sent per acquisition.
	RoundTrips float64
	// Commands is the number of commands Redis executed per acquisition,
	// including those inside scripts.
	Commands float64
	// ClientCPU and RedisCPU are per acquisition.
	ClientCPU  time.Duration
	RedisCPU   time.Duration
	Violations int64
	Errors     int64
}

// Fairness is min/max acquisitions per worker.
func (r ContendedResult) Fairness() float64 {
	if r.FairMax == 0 {
		return 0
	}
	return float64(r.FairMin) / float64(r.FairMax)
}

// Contended runs w workers, each its own process, on one key, each holding
// the lock for hold (a sleep) and releasing it, for warm + dur; the numbers
// cover the last dur.
func Contended(lib Library, srv Server, w int, hold, warm, dur time.Duration) (ContendedResult, error) {
	res := ContendedResult{Lib: lib.Name, Workers: w, Hold: hold}
	sent := &Counter{}
	ps, err := startProcesses(lib, []string{srv.Addr}, w, sent)
	if err != nil {
		return res, err
	}
	defer closeAll(ps)
	key := freshKey("c")

	// Per acquisition, in the order the lock was taken: when Acquire returned
	// and when the following Release returned, in ns since base.
	const maxRec = 1 << 20
	base := time.Now()
	acqAt := make([]int64, maxRec)
	relAt := make([]int64, maxRec)
	who := make([]int32, maxRec)
	waits := make([][]time.Duration, w)
	var (
		seq, inside, violations, errs atomic.Int64
		counts                        = make([]int64, w)
		wg                            sync.WaitGroup
	)
	mStart, mEnd := base.Add(warm), base.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), mEnd)
	defer cancel()
	for i := 0; i < w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[i]
			for n := 0; n < 10_000_000 && ctx.Err() == nil; n++ {
				t0 := time.Since(base)
				h, err := p.Lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				t := time.Since(base)
				if inside.Add(1) > int64(max(lib.Limit, 1)) {
					violations.Add(1)
				}
				k := seq.Add(1) - 1
				if k < maxRec {
					acqAt[k] = int64(t)
					who[k] = int32(i)
				}
				if t >= warm && t < warm+dur {
					counts[i]++
					waits[i] = append(waits[i], t-t0)
				}
				time.Sleep(hold)
				inside.Add(-1)
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = h.Unlock(rctx)
				rcancel()
				if k < maxRec {
					relAt[k] = int64(time.Since(base))
				}
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}

	sctx, scancel := context.WithTimeout(context.Background(), warm+dur+30*time.Second)
	defer scancel()
	time.Sleep(time.Until(mStart))
	c0, err0 := readCounters(sctx, sent, srv.Stats)
	time.Sleep(time.Until(mEnd))
	c1, err1 := readCounters(sctx, sent, srv.Stats)
	cancel()
	wg.Wait()
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}

	var handoffs, other []time.Duration
	self := 0
	n := min(seq.Load(), maxRec)
	for k := int64(1); k < n; k++ {
		a := time.Duration(acqAt[k])
		if a < warm || a >= warm+dur || relAt[k-1] == 0 {
			continue
		}
		h := a - time.Duration(relAt[k-1])
		if h < 0 {
			// The next holder was told before the releaser read its reply.
			h = 0
		}
		handoffs = append(handoffs, h)
		if who[k] != who[k-1] {
			other = append(other, h)
		} else {
			self++
		}
	}
	for i, c := range counts {
		res.Acquisitions += c
		if i == 0 || c < res.FairMin {
			res.FairMin = c
		}
		res.FairMax = max(res.FairMax, c)
	}
	res.AcqPerSec = float64(res.Acquisitions) / dur.Seconds()
	var all []time.Duration
	for _, ws := range waits {
		all = append(all, ws...)
	}
	res.WaitP50, res.WaitP99 = percentile(all, 50), percentile(all, 99)
	res.Handoffs = len(handoffs)
	res.HandoffP50, res.HandoffP99 = percentile(handoffs, 50), percentile(handoffs, 99)
	res.OtherP50, res.OtherP99 = percentile(other, 50), percentile(other, 99)
	if len(handoffs) > 0 {
		res.SelfShare = float64(self) / float64(len(handoffs))
	}
	if a := res.Acquisitions; a > 0 {
		res.RoundTrips = float64(c1.sent-c0.sent) / float64(a)
		res.Commands = float64(c1.stats.Commands-c0.stats.Commands) / float64(a)
		res.ClientCPU = (c1.cpu - c0.cpu) / time.Duration(a)
		res.RedisCPU = (c1.stats.CPU - c0.stats.CPU) / time.Duration(a)
	}
	res.Violations = violations.Load()
	res.Errors = errs.Load()
	return res, nil
}

// IdleResult is one run of the idle-waiting scenario.
type IdleResult struct {
	Lib     string
	Waiters int
	Window  time.Duration
	// CommandsPerSec counts every command Redis executed (scripts' included)
	// during the window, holder's included; RoundTripsPerSec counts the
	// commands the clients sent.
	CommandsPerSec   float64
	RoundTripsPerSec float64
	// ClientCPU and RedisCPU are the CPU used during the window.
	ClientCPU time.Duration
	RedisCPU  time.Duration
	Errors    int64
}

// PerWaiter is the Redis commands per second per waiter.
func (r IdleResult) PerWaiter() float64 { return r.CommandsPerSec / float64(r.Waiters) }

// Idle holds a lock in one process while n other processes wait for it; after
// settle it measures a window of dur, then cancels the waiters.
func Idle(lib Library, srv Server, n int, settle, dur time.Duration) (IdleResult, error) {
	res := IdleResult{Lib: lib.Name, Waiters: n, Window: dur}
	sent := &Counter{}
	ps, err := startProcesses(lib, []string{srv.Addr}, n+1, sent)
	if err != nil {
		return res, err
	}
	defer closeAll(ps)
	key := freshKey("idle")
	hctx, hcancel := context.WithTimeout(context.Background(), settle+dur+10*time.Second)
	defer hcancel()
	held, err := ps[0].Lock(hctx, key)
	if err != nil {
		return res, fmt.Errorf("%s: holder: %w", lib.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle+dur+10*time.Second)
	defer cancel()
	var (
		wg   sync.WaitGroup
		errs atomic.Int64
	)
	for _, p := range ps[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := p.Lock(ctx, key)
			if err == nil {
				errs.Add(1) // the lock is held throughout: nobody should get it
				_ = h.Unlock(context.Background())
			}
		}()
	}
	time.Sleep(settle)
	c0, err0 := readCounters(ctx, sent, srv.Stats)
	time.Sleep(dur)
	c1, err1 := readCounters(ctx, sent, srv.Stats)
	cancel()
	wg.Wait()
	_ = held.Unlock(hctx)
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}
	res.CommandsPerSec = float64(c1.stats.Commands-c0.stats.Commands) / dur.Seconds()
	res.RoundTripsPerSec = float64(c1.sent-c0.sent) / dur.Seconds()
	res.ClientCPU = c1.cpu - c0.cpu
	res.RedisCPU = c1.stats.CPU - c0.stats.CPU
	res.Errors = errs.Load()
	return res, nil
}

// LatencyResult is a series of uncontended acquisitions (Redlock scenario).
type LatencyResult struct {
	Lib    string
	Nodes  int
	Label  string
	Calls  int
	AcqP50 time.Duration
	AcqP99 time.Duration
	AcqMax time.Duration
	RelP50 time.Duration
	RelMax time.Duration
	Errors int64
}

// Latency acquires and releases a key from one process, one call at a time,
// for dur (at least minCalls calls, at most maxCalls), each call bounded by
// callTimeout.
func Latency(lib Library, addrs []string, label string, warm, dur time.Duration, minCalls, maxCalls int, callTimeout time.Duration) (LatencyResult, error) {
	res := LatencyResult{Lib: lib.Name, Nodes: len(addrs), Label: label}
	ps, err := startProcesses(lib, addrs, 1, nil)
	if err != nil {
		return res, err
	}
	defer closeAll(ps)
	p := ps[0]
	key := freshKey("r")
	var acq, rel []time.Duration
	start := time.Now()
	for n := 0; n < maxCalls+100_000; n++ {
		el := time.Since(start)
		if el >= warm+dur && len(acq) >= minCalls || len(acq) >= maxCalls {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		t0 := time.Now()
		h, err := p.Lock(ctx, key)
		t1 := time.Now()
		if err != nil {
			cancel()
			res.Errors++
			if el >= warm {
				acq = append(acq, t1.Sub(t0))
			}
			continue
		}
		err = h.Unlock(ctx)
		t2 := time.Now()
		cancel()
		if err != nil {
			res.Errors++
		}
		if el >= warm {
			acq = append(acq, t1.Sub(t0))
			rel = append(rel, t2.Sub(t1))
			res.RelMax = max(res.RelMax, t2.Sub(t1))
		}
	}
	res.Calls = len(acq)
	res.AcqP50, res.AcqP99 = percentile(acq, 50), percentile(acq, 99)
	res.RelP50 = percentile(rel, 50)
	if len(acq) > 0 {
		res.AcqMax = acq[len(acq)-1]
	}
	return res, nil
}

// The scenarios of dlock's own features, which none of the peers offers:
// shared (read) holds with WithShared, and AcquireAll. Both run dlock-ctx
// (as the semaphore scenario does); every figure is reported, none is a
// target.

// dlockProcesses starts n processes of dlock-ctx on srv, each with opts,
// counting the commands they send in sent.
func dlockProcesses(srv Server, n int, sent *Counter, opts ...dlock.LockOption) ([]*dlockProcess, error) {
	lib := DlockLibrary(true)
	ps, err := startProcesses(lib, []string{srv.Addr}, n, sent)
	if err != nil {
		return nil, err
	}
	out := make([]*dlockProcess, len(ps))
	for i, p := range ps {
		out[i] = p.(*dlockProcess)
		out[i].opts = opts
	}
	return out, nil
}

func closeDlock(ps []*dlockProcess) {
	var all []Process
	for _, p := range ps {
		all = append(all, p)
	}
	closeAll(all)
}

// ReadWriteResult is one run of the read-write scenario.
type ReadWriteResult struct {
	Lib     string
	Readers int
	Hold    time.Duration
	Window  time.Duration
	// Reads and Writes are the shared and exclusive holds completed (their
	// Release returned) during the window.
	Reads, Writes             int64
	ReadsPerSec, WritesPerSec float64
	// WriterWaitP50/P99: how long the writer's Acquire took (call →
	// return), over its acquisitions in the window; ReaderWait the same
	// for the readers' shared Acquire.
	WriterWaitP50, WriterWaitP99 time.Duration
	ReaderWaitP50, ReaderWaitP99 time.Duration
	// RoundTrips is the number of commands all clients sent per hold
	// (reads + writes); Commands the number Redis executed per hold,
	// those inside scripts included (INFO commandstats).
	RoundTrips float64
	Commands   float64
	// Violations counts a writer holding alongside anyone, or a reader
	// alongside the writer.
	Violations int64
	Errors     int64
	// FirstError is the first error seen, if any.
	FirstError string
}

// ReadWrite runs readers processes looping shared Acquire (WithShared) /
// hold / Release and one writer process looping exclusive Acquire / hold /
// Release, all on one key, for warm + dur; the numbers cover the last dur.
func ReadWrite(srv Server, readers int, hold, warm, dur time.Duration) (ReadWriteResult, error) {
	res := ReadWriteResult{Lib: DlockLibrary(true).Name, Readers: readers, Hold: hold, Window: dur}
	sent := &Counter{}
	rs, err := dlockProcesses(srv, readers, sent, dlock.WithShared())
	if err != nil {
		return res, err
	}
	defer closeDlock(rs)
	ws, err := dlockProcesses(srv, 1, sent)
	if err != nil {
		return res, err
	}
	defer closeDlock(ws)
	key := freshKey("rw")

	base := time.Now()
	mStart, mEnd := base.Add(warm), base.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), mEnd)
	defer cancel()
	var (
		readersIn, writerIn      atomic.Int64
		reads, writes            atomic.Int64
		violations, errs         atomic.Int64
		firstErr                 firstError
		mu                       sync.Mutex
		readerWaits, writerWaits []time.Duration
		wg                       sync.WaitGroup
	)
	loop := func(p *dlockProcess, writer bool) {
		defer wg.Done()
		var waits []time.Duration
		for n := 0; n < 10_000_000 && ctx.Err() == nil; n++ {
			t0 := time.Now()
			h, err := p.Lock(ctx, key)
			t1 := time.Now()
			if err != nil {
				if ctx.Err() == nil && time.Now().Before(mEnd) { // not the run ending (ctx.Err lags its deadline)
					errs.Add(1)
					firstErr.set("acquire", err)
				}
				continue
			}
			if writer {
				if writerIn.Add(1) > 1 || readersIn.Load() > 0 {
					violations.Add(1)
				}
			} else if readersIn.Add(1); writerIn.Load() > 0 {
				violations.Add(1)
			}
			if !t1.Before(mStart) && t1.Before(mEnd) {
				waits = append(waits, t1.Sub(t0))
			}
			time.Sleep(hold)
			if writer {
				writerIn.Add(-1)
			} else {
				readersIn.Add(-1)
			}
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = h.Unlock(rctx)
			rcancel()
			if err != nil {
				errs.Add(1)
				firstErr.set("release", err)
				continue
			}
			if t2 := time.Now(); !t2.Before(mStart) && t2.Before(mEnd) {
				if writer {
					writes.Add(1)
				} else {
					reads.Add(1)
				}
			}
		}
		mu.Lock()
		if writer {
			writerWaits = append(writerWaits, waits...)
		} else {
			readerWaits = append(readerWaits, waits...)
		}
		mu.Unlock()
	}
	for _, p := range rs {
		wg.Add(1)
		go loop(p, false)
	}
	wg.Add(1)
	go loop(ws[0], true)

	sctx, scancel := context.WithTimeout(context.Background(), warm+dur+30*time.Second)
	defer scancel()
	time.Sleep(time.Until(mStart))
	c0, err0 := readCounters(sctx, sent, srv.Stats)
	time.Sleep(time.Until(mEnd))
	c1, err1 := readCounters(sctx, sent, srv.Stats)
	cancel()
	wg.Wait()
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}

	res.Reads, res.Writes = reads.Load(), writes.Load()
	res.ReadsPerSec = float64(res.Reads) / dur.Seconds()
	res.WritesPerSec = float64(res.Writes) / dur.Seconds()
	res.WriterWaitP50, res.WriterWaitP99 = percentile(writerWaits, 50), percentile(writerWaits, 99)
	res.ReaderWaitP50, res.ReaderWaitP99 = percentile(readerWaits, 50), percentile(readerWaits, 99)
	if holds := res.Reads + res.Writes; holds > 0 {
		res.RoundTrips = float64(c1.sent-c0.sent) / float64(holds)
		res.Commands = float64(c1.stats.Commands-c0.stats.Commands) / float64(holds)
	}
	res.Violations = violations.Load()
	res.Errors = errs.Load()
	res.FirstError = firstErr.msg
	return res, nil
}

// MultiVariant is how a worker of the multi-key scenario takes its keys.
type MultiVariant string

const (
	// MultiAcquireAll: one AcquireAll call for both keys.
	MultiAcquireAll MultiVariant = "AcquireAll"
	// MultiOrdered: the baseline written by hand, the keys sorted and
	// acquired one Acquire at a time, in that order.
	MultiOrdered MultiVariant = "sorted Acquire ×2"
)

// MultiResult is one run of the multi-key scenario.
type MultiResult struct {
	Variant      MultiVariant
	Workers      int
	Processes    int
	Keys         int
	PerOp        int
	Hold         time.Duration
	Acquisitions int64 // of all PerOp keys, in the window
	AcqPerSec    float64
	// WaitP50/P99: from the call (the first Acquire, for the baseline) to
	// holding every key.
	WaitP50, WaitP99 time.Duration
	// RoundTrips and Commands are per acquisition (of all PerOp keys),
	// release included, as in ReadWriteResult.
	RoundTrips float64
	Commands   float64
	// Violations counts a key held by two workers at once.
	Violations int64
	Errors     int64
	// FirstError is the first error seen, if any.
	FirstError string
}

// Multi runs workers goroutines spread over procs processes, each looping:
// pick perOp distinct keys of nkeys at random (in random order), lock them
// all the way v says, hold them for hold (a sleep), release them, for warm
// + dur; the numbers cover the last dur.
func Multi(srv Server, v MultiVariant, workers, procs, nkeys, perOp int, hold, warm, dur time.Duration) (MultiResult, error) {
	res := MultiResult{Variant: v, Workers: workers, Processes: procs, Keys: nkeys, PerOp: perOp, Hold: hold}
	if perOp > nkeys {
		return res, fmt.Errorf("multi: %d keys per acquisition of %d", perOp, nkeys)
	}
	sent := &Counter{}
	ps, err := dlockProcesses(srv, procs, sent)
	if err != nil {
		return res, err
	}
	defer closeDlock(ps)
	prefix := freshKey("m")
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, i)
	}

	base := time.Now()
	mStart, mEnd := base.Add(warm), base.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), mEnd)
	defer cancel()
	var (
		inside           = make([]atomic.Int64, nkeys)
		acqs             atomic.Int64
		violations, errs atomic.Int64
		firstErr         firstError
		mu               sync.Mutex
		waits            []time.Duration
		wg               sync.WaitGroup
	)
	lockAll := func(p *dlockProcess, idx []int) ([]*dlock.Lock, error) {
		if v == MultiAcquireAll {
			names := make([]string, len(idx))
			for j, k := range idx {
				names[j] = keys[k]
			}
			return p.locker.AcquireAll(ctx, names)
		}
		sorted := make([]string, len(idx))
		for j, k := range idx {
			sorted[j] = keys[k]
		}
		slices.Sort(sorted)
		var held []*dlock.Lock
		for _, k := range sorted {
			l, err := p.locker.Acquire(ctx, k)
			if err != nil {
				_, _ = releaseLocks(held)
				return nil, err
			}
			held = append(held, l)
		}
		return held, nil
	}
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[i%procs]
			rng := rand.New(rand.NewPCG(uint64(base.UnixNano()), uint64(i)))
			var ws []time.Duration
			for n := 0; n < 10_000_000 && ctx.Err() == nil; n++ {
				idx := rng.Perm(nkeys)[:perOp]
				t0 := time.Now()
				held, err := lockAll(p, idx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() == nil && time.Now().Before(mEnd) { // not the run ending (ctx.Err lags its deadline)
						errs.Add(1)
						firstErr.set("acquire", err)
					}
					continue
				}
				for _, k := range idx {
					if inside[k].Add(1) > 1 {
						violations.Add(1)
					}
				}
				if !t1.Before(mStart) && t1.Before(mEnd) {
					acqs.Add(1)
					ws = append(ws, t1.Sub(t0))
				}
				time.Sleep(hold)
				for _, k := range idx {
					inside[k].Add(-1)
				}
				if n, err := releaseLocks(held); n > 0 {
					errs.Add(int64(n))
					firstErr.set("release", err)
				}
			}
			mu.Lock()
			waits = append(waits, ws...)
			mu.Unlock()
		}()
	}

	sctx, scancel := context.WithTimeout(context.Background(), warm+dur+30*time.Second)
	defer scancel()
	time.Sleep(time.Until(mStart))
	c0, err0 := readCounters(sctx, sent, srv.Stats)
	time.Sleep(time.Until(mEnd))
	c1, err1 := readCounters(sctx, sent, srv.Stats)
	cancel()
	wg.Wait()
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}
	res.Acquisitions = acqs.Load()
	res.AcqPerSec = float64(res.Acquisitions) / dur.Seconds()
	res.WaitP50, res.WaitP99 = percentile(waits, 50), percentile(waits, 99)
	if a := res.Acquisitions; a > 0 {
		res.RoundTrips = float64(c1.sent-c0.sent) / float64(a)
		res.Commands = float64(c1.stats.Commands-c0.stats.Commands) / float64(a)
	}
	res.Violations = violations.Load()
	res.Errors = errs.Load()
	res.FirstError = firstErr.msg
	return res, nil
}

// firstError keeps the first error it is given.
type firstError struct {
	once sync.Once
	msg  string
}

func (f *firstError) set(what string, err error) {
	f.once.Do(func() { f.msg = what + ": " + err.Error() })
}

// releaseLocks releases ls one after the other, in reverse order, and
// returns the number of releases that failed and the first one's error.
func releaseLocks(ls []*dlock.Lock) (int, error) {
	failed := 0
	var first error
	for i := len(ls) - 1; i >= 0; i-- {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := ls[i].Release(rctx); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
		rcancel()
	}
	return failed, first
}

// The scale scenarios (dlock only, full runs only): many locks held by one
// Locker, and many waiters in one Locker. They measure; no figure is a
// target yet.

// add returns the sum of two snapshots (of two nodes).
func (s ServerStats) add(o ServerStats) ServerStats {
	return ServerStats{Commands: s.Commands + o.Commands, CPU: s.CPU + o.CPU, Usec: s.Usec + o.Usec, Scripts: s.Scripts + o.Scripts}
}

// statsAll sums the snapshots of every server.
func statsAll(ctx context.Context, srvs []Server) (ServerStats, error) {
	var sum ServerStats
	for _, s := range srvs {
		st, err := s.Stats(ctx)
		if err != nil {
			return ServerStats{}, err
		}
		sum = sum.add(st)
	}
	return sum, nil
}

// heapInuse returns HeapInuse after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// acquireKeys acquires keys with l (opts applied), par at a time, and
// returns the locks in the order of keys; on an error it releases what it
// took.
func acquireKeys(ctx context.Context, l *dlock.Locker, keys []string, par int, opts ...dlock.LockOption) ([]*dlock.Lock, error) {
	locks := make([]*dlock.Lock, len(keys))
	var (
		next     atomic.Int64
		firstErr firstError
		failed   atomic.Bool
		wg       sync.WaitGroup
	)
	for g := 0; g < par; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				k, err := l.Acquire(ctx, keys[i], opts...)
				if err != nil {
					failed.Store(true)
					firstErr.set("acquire "+keys[i], err)
					return
				}
				locks[i] = k
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		var held []*dlock.Lock
		for _, k := range locks {
			if k != nil {
				held = append(held, k)
			}
		}
		releaseAll(held, par)
		return nil, errors.New(firstErr.msg)
	}
	return locks, nil
}

// releaseAll releases ls, par at a time, and returns the number of releases
// that failed.
func releaseAll(ls []*dlock.Lock, par int) int {
	var (
		next, failed atomic.Int64
		wg           sync.WaitGroup
	)
	for g := 0; g < par; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ls) {
					return
				}
				if n, _ := releaseLocks(ls[i : i+1]); n > 0 {
					failed.Add(int64(n))
				}
			}
		}()
	}
	wg.Wait()
	return int(failed.Load())
}

// ManyLocksResult is one run of the many-locks scenario.
type ManyLocksResult struct {
	Lib    string
	Locks  int
	TTL    time.Duration
	Window time.Duration // measured wall time
	// AcquireTime is how long acquiring every lock took (Par at a time).
	AcquireTime time.Duration
	Par         int
	// CommandsPerSec counts every command Redis executed in the window,
	// those inside scripts included (INFO commandstats); SentPerSec the
	// commands the Locker's client sent (round trips).
	CommandsPerSec float64
	SentPerSec     float64
	// Scripts is the number of script calls (EVAL + EVALSHA) Redis ran in
	// the window; ScriptsPerLockInterval the same per lock per renewal
	// interval (TTL/3).
	Scripts                int64
	ScriptsPerLockInterval float64
	// ClientCPU is this process's CPU (user + system, getrusage) over the
	// window, in % of one core; RedisCPU the server's, likewise.
	ClientCPU float64
	RedisCPU  float64
	// HeapPerLock is HeapInuse after a GC with the locks held, less the same
	// before acquiring them, per lock, in bytes; GoroutinesPerLock the
	// same for runtime.NumGoroutine.
	HeapPerLock       float64
	GoroutinesPerLock float64
	// PoolConns is the client's connection pool (TotalConns) before the
	// baseline and at the end of the window.
	PoolConns0, PoolConns1 int
	// Lost is the number of locks whose Lost channel was closed by the end
	// of the window (a renewal that failed); ReleaseErrors the releases
	// that failed afterwards.
	Lost          int
	ReleaseErrors int
}

// ManyLocks has one Locker (dlock-ctx, on srv) acquire n locks with TTL
// ttl, auto-renewed, par Acquire calls at a time, and keeps them held for a
// window of dur once they all are; it measures the renewals' cost over that
// window and the memory and goroutines the held locks cost.
func ManyLocks(srv Server, n int, ttl, dur time.Duration, par int) (ManyLocksResult, error) {
	res := ManyLocksResult{Lib: DlockLibrary(true).Name, Locks: n, TTL: ttl, Par: par}
	sent := &Counter{}
	ps, err := dlockProcesses(srv, 1, sent)
	if err != nil {
		return res, err
	}
	defer closeDlock(ps)
	p := ps[0]
	client := p.clients[0].(*redis.Client)
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()
	prefix := freshKey("many")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + ":" + strconv.Itoa(i)
	}
	opt := dlock.WithTTL(ttl)

	// Warm up with par keys at once, so that the connections the
	// acquisitions use exist before the baseline.
	warm := make([]string, par)
	for i := range warm {
		warm[i] = fmt.Sprintf("%s:warm:%d", prefix, i)
	}
	wl, err := acquireKeys(ctx, p.locker, warm, par, opt)
	if err != nil {
		return res, err
	}
	if f := releaseAll(wl, par); f > 0 {
		return res, fmt.Errorf("many locks: %d warm-up releases failed", f)
	}
	res.PoolConns0 = int(client.PoolStats().TotalConns)
	heap0, g0 := heapInuse(), runtime.NumGoroutine()

	t0 := time.Now()
	locks, err := acquireKeys(ctx, p.locker, keys, par, opt)
	if err != nil {
		return res, err
	}
	res.AcquireTime = time.Since(t0)
	defer func() { releaseAll(locks, par) }() // on an error; nil once released
	heap1, g1 := heapInuse(), runtime.NumGoroutine()
	res.HeapPerLock = (float64(heap1) - float64(heap0)) / float64(n)
	res.GoroutinesPerLock = float64(g1-g0) / float64(n)

	c0, err0 := readCounters(ctx, sent, srv.Stats)
	w0 := time.Now()
	time.Sleep(dur)
	c1, err1 := readCounters(ctx, sent, srv.Stats)
	wall := time.Since(w0)
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}
	res.PoolConns1 = int(client.PoolStats().TotalConns)
	for _, k := range locks {
		select {
		case <-k.Lost():
			res.Lost++
		default:
		}
	}
	res.Window = wall
	res.CommandsPerSec = float64(c1.stats.Commands-c0.stats.Commands) / wall.Seconds()
	res.SentPerSec = float64(c1.sent-c0.sent) / wall.Seconds()
	res.Scripts = c1.stats.Scripts - c0.stats.Scripts
	res.ScriptsPerLockInterval = float64(res.Scripts) / float64(n) / (float64(wall) / float64(ttl/3))
	res.ClientCPU = 100 * float64(c1.cpu-c0.cpu) / float64(wall)
	res.RedisCPU = 100 * float64(c1.stats.CPU-c0.stats.CPU) / float64(wall)
	res.ReleaseErrors = releaseAll(locks, par)
	locks = nil
	return res, nil
}

// ManyWaitersResult is one run of the many-waiters scenario.
type ManyWaitersResult struct {
	Lib        string
	Deployment string // "1 redis-server", "Cluster, 3 masters"
	Waiters    int
	Window     time.Duration // the idle window, measured wall time
	// RegisterTime: from the first waiter's Acquire call to every waiting
	// set holding its waiter.
	RegisterTime time.Duration
	// SentPerSec is the commands the waiter Locker's client sent per
	// second in the idle window (round trips); CommandsPerSec every
	// command the nodes ran, the holder's renewals and those inside
	// scripts included.
	SentPerSec     float64
	CommandsPerSec float64
	// ClientCPU is this process's CPU over the window (holder and waiters),
	// in % of one core.
	ClientCPU float64
	// Conns is the connections of the waiter Locker's client on the nodes
	// (CLIENT LIST, by client name: pub/sub included) at the window's end;
	// PoolConns its go-redis pools' TotalConns plus active pub/sub
	// connections (go-redis' own count).
	Conns, PoolConns int
	// Wake: one holder's Release returning → its waiter's Acquire
	// returning, the keys released one at a time (each after the previous
	// waiter got its key, or after WakeTimeout).
	WakeP50, WakeP99, WakeMax time.Duration
	Woken                     int
	// Late is the waiters that did not have their key WakeTimeout after the
	// release (counted in Woken if they got it later).
	Late   int
	Errors int64
	// FirstError is the first error seen, if any.
	FirstError string
}

// WakeTimeout bounds the wait for one waiter in ManyWaiters' release phase.
const WakeTimeout = 2 * time.Second

// ManyWaiters has a holder Locker hold n keys (TTL holdTTL) while one
// waiter Locker runs n goroutines, each Acquire-ing its own key; once
// every waiter is registered and settle has passed, it measures an idle
// window of dur, then releases the keys one at a time and measures each
// waiter's wake-up. nodes are one redis-server, or the masters of a
// Cluster (cluster true), each with an admin client.
func ManyWaiters(nodes []Server, cluster bool, n int, holdTTL, settle, dur time.Duration) (ManyWaitersResult, error) {
	res := ManyWaitersResult{Lib: DlockLibrary(true).Name, Deployment: "1 redis-server", Waiters: n}
	if cluster {
		res.Deployment = fmt.Sprintf("Cluster, %d masters", len(nodes))
	}
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr)
	}
	seq := runSeq.Add(1)
	newClient := func(name string, sent *Counter) redis.UniversalClient {
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ClientName: name, ContextTimeoutEnabled: true})
		} else {
			c = redis.NewClient(&redis.Options{Addr: addrs[0], ClientName: name, ContextTimeoutEnabled: true})
		}
		if sent != nil {
			c.AddHook(sent)
		}
		return c
	}
	waiterName := fmt.Sprintf("bench-waiter-%d", seq)
	sent := &Counter{}
	hc, wc := newClient(fmt.Sprintf("bench-holder-%d", seq), nil), newClient(waiterName, sent)
	var admin redis.UniversalClient = nodes[0].Admin
	if cluster {
		admin = newClient("", nil)
	}
	defer func() {
		_ = hc.Close()
		_ = wc.Close()
		if cluster {
			_ = admin.Close()
		}
	}()
	holder, waiter := dlock.New(hc), dlock.New(wc)
	defer func() { _ = holder.Close() }()
	defer func() { _ = waiter.Close() }()

	total := settle + dur + time.Duration(n)*WakeTimeout/8 + 2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	prefix := freshKey("mw")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + ":" + strconv.Itoa(i)
	}
	held, err := acquireKeys(ctx, holder, keys, 32, dlock.WithTTL(holdTTL))
	if err != nil {
		return res, fmt.Errorf("many waiters: holder: %w", err)
	}
	heldRel := make([]bool, n)
	defer func() {
		var rest []*dlock.Lock
		for i, k := range held {
			if !heldRel[i] {
				rest = append(rest, k)
			}
		}
		releaseAll(rest, 32)
	}()

	base := time.Now()
	acqAt := make([]atomic.Int64, n) // ns since base, when the waiter's Acquire returned
	done := make([]chan struct{}, n)
	got := make([]*dlock.Lock, n)
	var (
		wg       sync.WaitGroup
		errs     atomic.Int64
		firstErr firstError
	)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	for i := range keys {
		done[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			k, err := waiter.Acquire(wctx, keys[i])
			acqAt[i].Store(int64(time.Since(base)))
			if err != nil {
				if wctx.Err() == nil {
					errs.Add(1)
					firstErr.set("waiter acquire", err)
				}
				return
			}
			got[i] = k
		}()
	}
	defer func() {
		wcancel()
		wg.Wait()
		var ls []*dlock.Lock
		for _, k := range got {
			if k != nil {
				ls = append(ls, k)
			}
		}
		releaseAll(ls, 32)
	}()

	// Registered: each key's waiting set holds the waiter.
	waitKey := func(k string) string { return dlock.DefaultPrefix + "{" + k + "}:waiters" }
	for {
		if time.Since(base) > time.Minute {
			return res, fmt.Errorf("many waiters: not every waiter registered within a minute")
		}
		cmds := make([]*redis.IntCmd, n)
		_, err := admin.Pipelined(ctx, func(pp redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = pp.ZCard(ctx, waitKey(k))
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		all := true
		for _, c := range cmds {
			if c.Val() != 1 {
				all = false
				break
			}
		}
		if all {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.RegisterTime = time.Since(base)
	time.Sleep(settle)

	nodesStats := func(ctx context.Context) (ServerStats, error) { return statsAll(ctx, nodes) }
	c0, err0 := readCounters(ctx, sent, nodesStats)
	w0 := time.Now()
	time.Sleep(dur)
	c1, err1 := readCounters(ctx, sent, nodesStats)
	wall := time.Since(w0)
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}
	res.Window = wall
	res.SentPerSec = float64(c1.sent-c0.sent) / wall.Seconds()
	res.CommandsPerSec = float64(c1.stats.Commands-c0.stats.Commands) / wall.Seconds()
	res.ClientCPU = 100 * float64(c1.cpu-c0.cpu) / float64(wall)
	for _, s := range nodes {
		list, err := s.Admin.ClientList(ctx).Result()
		if err != nil {
			return res, err
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name="+waiterName+" ") {
				res.Conns++
			}
		}
	}
	switch c := wc.(type) {
	case *redis.Client:
		st := c.PoolStats()
		res.PoolConns = int(st.TotalConns + st.PubSubStats.Active)
	case *redis.ClusterClient:
		st := c.PoolStats()
		res.PoolConns = int(st.TotalConns + st.PubSubStats.Active)
	}

	relAt := make([]int64, n)
	for i, k := range held {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		err := k.Release(rctx)
		rcancel()
		relAt[i] = int64(time.Since(base))
		heldRel[i] = true
		if err != nil {
			errs.Add(1)
			firstErr.set("holder release", err)
			continue
		}
		select {
		case <-done[i]:
		case <-time.After(WakeTimeout):
			res.Late++
		}
	}
	// The late ones, a little longer.
	deadline := time.After(WakeTimeout)
	for i := range done {
		select {
		case <-done[i]:
		case <-deadline:
		}
	}
	var wakes []time.Duration
	for i := range done {
		select {
		case <-done[i]:
		default:
			continue
		}
		if got[i] == nil {
			continue
		}
		wakes = append(wakes, max(time.Duration(acqAt[i].Load()-relAt[i]), 0))
	}
	res.Woken = len(wakes)
	res.WakeP50, res.WakeP99 = percentile(wakes, 50), percentile(wakes, 99)
	if len(wakes) > 0 {
		res.WakeMax = wakes[len(wakes)-1]
	}
	res.Errors = errs.Load()
	res.FirstError = firstErr.msg
	return res, nil
}

// RTTResult is the median PING round trip to a server, directly and
// through each kind of proxy.
type RTTResult struct {
	Direct time.Duration
	// Hop is through a LatencyProxy with no delay: what the proxy itself
	// (two more loopback hops, its goroutines) adds.
	Hop time.Duration
	// Delay is the LatencyProxy delay chosen so that the proxy adds the
	// latency asked for each way (the hop included); LatencyProxy is the
	// round trip through a LatencyProxy with that delay.
	Delay        time.Duration
	LatencyProxy time.Duration
	// DlocktestProxy is through a dlocktest.Proxy with SetLatency(latency).
	DlocktestProxy time.Duration
}

// AddedEachWay is what the LatencyProxy adds each way, as measured.
func (r RTTResult) AddedEachWay() time.Duration { return (r.LatencyProxy - r.Direct) / 2 }

// pingRTT returns the median of n PING round trips to addr, after a
// warm-up.
func pingRTT(ctx context.Context, addr string, n int) (time.Duration, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var d []time.Duration
	for i := 0; i < n+10; i++ {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, fmt.Errorf("PING %d: %w", i, err)
		}
		if i >= 10 { // the first dial and warm-up
			d = append(d, time.Since(t0))
		}
	}
	return percentile(d, 50), nil
}

// proxiedRTT is pingRTT through a fresh LatencyProxy with delay.
func proxiedRTT(ctx context.Context, target string, delay time.Duration, n int) (time.Duration, error) {
	lp, err := NewLatencyProxy(target, delay)
	if err != nil {
		return 0, err
	}
	defer lp.Close()
	return pingRTT(ctx, lp.Addr(), n)
}

// CalibrateProxy picks the LatencyProxy delay that adds latency each way to
// target's round trips, the proxy's own hop included: latency less half
// of what a proxy without delay adds to a PING round trip (medians of n
// calls). It measures the result, and a dlocktest.Proxy with
// SetLatency(latency) for comparison.
func CalibrateProxy(target string, latency time.Duration, n int) (RTTResult, error) {
	var res RTTResult
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	if res.Direct, err = pingRTT(ctx, target, n); err != nil {
		return res, fmt.Errorf("calibrate proxy: direct: %w", err)
	}
	if res.Hop, err = proxiedRTT(ctx, target, 0, n); err != nil {
		return res, fmt.Errorf("calibrate proxy: no delay: %w", err)
	}
	res.Delay = max(latency-(res.Hop-res.Direct)/2, 0)
	if res.LatencyProxy, err = proxiedRTT(ctx, target, res.Delay, n); err != nil {
		return res, fmt.Errorf("calibrate proxy: delay %s: %w", res.Delay, err)
	}
	dp, err := dlocktest.NewProxy(target)
	if err != nil {
		return res, err
	}
	defer dp.Close()
	dp.SetLatency(latency)
	if res.DlocktestProxy, err = pingRTT(ctx, dp.Addr(), n); err != nil {
		return res, fmt.Errorf("calibrate proxy: dlocktest.Proxy: %w", err)
	}
	return res, nil
}

// ClusterWakeupsResult is the outcome of ClusterWakeups.
type ClusterWakeupsResult struct {
	Lib              string
	Masters, Keys    int
	Waiters, Rounds  int
	Acquisitions     int
	Handoffs         int // acquisitions that followed another waiter's release (not the same waiter's)
	BusPublishes     int64
	WakeP50, WakeP99 time.Duration
	WakeMax          time.Duration
	Wakes            []time.Duration // every handoff's wake-up, sorted
	Errors           int64
	FirstError       string
}

// ClusterWakeups runs waitersPerKey waiters (each its own client and
// Locker, as separate processes would) on each of keys keys spread over
// the masters of a Cluster, each acquiring its key rounds times, holding it
// hold, then releasing it. It measures the classic publishes the masters
// sent over the cluster bus meanwhile (cluster_stats_messages_publish_sent,
// summed), and the wake-up of each handoff from one waiter to another: the
// releasing waiter's Release returning → the next holder's Acquire
// returning (as the contended scenario's handoff).
func ClusterWakeups(masters []Server, keys, waitersPerKey, rounds int, hold time.Duration) (ClusterWakeupsResult, error) {
	res := ClusterWakeupsResult{Lib: DlockLibrary(true).Name, Masters: len(masters), Keys: keys, Waiters: keys * waitersPerKey, Rounds: rounds}
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr)
	}
	publishes := func() (int64, error) {
		var n int64
		for _, m := range masters {
			info, err := m.Admin.ClusterInfo(context.Background()).Result()
			if err != nil {
				return 0, err
			}
			n += infoInt(info, "cluster_stats_messages_publish_sent")
		}
		return n, nil
	}
	// The keys, spread over the masters' slots.
	seq := runSeq.Add(1)
	names := make([]string, keys)
	for i := range names {
		tag, err := masterTag(masters, i%len(masters), i/len(masters))
		if err != nil {
			return res, err
		}
		names[i] = fmt.Sprintf("bench-cw-%d-{%s}", seq, tag)
	}
	type worker struct {
		c redis.UniversalClient
		l *dlock.Locker
	}
	ws := make([]worker, res.Waiters)
	for i := range ws {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		ws[i] = worker{c, dlock.New(c)}
	}
	defer func() {
		for _, w := range ws {
			_ = w.l.Close()
			_ = w.c.Close()
		}
	}()
	before, err := publishes()
	if err != nil {
		return res, err
	}
	// holds records each key's holds; the holds of one key do not overlap,
	// so their order of acquisition is the order of the handoffs.
	type holding struct {
		got, released time.Time
		by            int
	}
	holds := make([][]holding, keys)
	var mu sync.Mutex
	var errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				k, err := ws[i].l.Acquire(ctx, names[i%keys])
				got := time.Now()
				if err != nil {
					cancel()
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				time.Sleep(hold)
				err = k.Release(ctx)
				released := time.Now()
				cancel()
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				mu.Lock()
				holds[i%keys] = append(holds[i%keys], holding{got, released, i})
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	after, err := publishes()
	if err != nil {
		return res, err
	}
	var wakes []time.Duration
	for _, hs := range holds {
		slices.SortFunc(hs, func(a, b holding) int { return a.got.Compare(b.got) })
		for k := 1; k < len(hs); k++ {
			if hs[k].by == hs[k-1].by {
				continue
			}
			// Clamped at 0: the next holder may be told before the
			// releaser read its reply.
			wakes = append(wakes, max(hs[k].got.Sub(hs[k-1].released), 0))
		}
	}
	res.Acquisitions = res.Waiters*rounds - int(errs.Load())
	res.Handoffs = len(wakes)
	res.BusPublishes = after - before
	res.WakeP50, res.WakeP99 = percentile(wakes, 50), percentile(wakes, 99)
	res.Wakes = wakes
	if len(wakes) > 0 {
		res.WakeMax = wakes[len(wakes)-1]
	}
	res.Errors = errs.Load()
	if s, ok := first.Load().(string); ok {
		res.FirstError = s
	}
	return res, nil
}

// masterTag returns the k-th of the hash tags "mJ" whose slot the i-th
// of masters serves when the slots are split evenly (as
// dlocktest.NewCluster splits them), asking the server for the slots.
func masterTag(masters []Server, i, k int) (string, error) {
	n := len(masters)
	lo, hi := int64(i*16384/n), int64((i+1)*16384/n-1)
	for j := 0; ; j++ {
		tag := fmt.Sprintf("m%d", j)
		s, err := masters[0].Admin.ClusterKeySlot(context.Background(), tag).Result()
		if err != nil {
			return "", err
		}
		if s >= lo && s <= hi {
			if k == 0 {
				return tag, nil
			}
			k--
		}
	}
}

// infoInt returns the integer field of an INFO-like reply ("field:value"
// lines), 0 if absent.
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
