package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisserver"
)

// The demo's shape. Its TTL is short so that the failure scenes are quick:
// a frozen node costs a round a fifth of it.
const (
	demoServers = 5
	demoWorkers = 20
	demoTTL     = time.Second
	// demoWork is the pause between the read and the write of the shared
	// counter: long enough for unprotected workers to interleave.
	demoWork = 200 * time.Microsecond
	// sceneBudget bounds each contention scene, so that the whole demo
	// stays well within 30 seconds on a slow machine.
	sceneBudget = 3 * time.Second
)

// demo is dlock demo.
func (c *cli) demo(ctx context.Context, args []string) int {
	fset := newFlagSet("demo")
	short := fset.Bool("short", false, "a shorter run")
	if code := c.parseFlags(fset, args); code >= 0 {
		return code
	}
	if fset.NArg() > 0 {
		return c.usageError("demo", "unexpected argument %q", fset.Arg(0))
	}
	if _, err := redisserver.Binary(); err != nil {
		c.errorf("redis-server not found: the demo starts its own local Redis servers")
		c.hintf("install Debian's redis-server package (sudo apt-get install redis-server), or set $REDIS_SERVER to a redis-server binary")
		return exitUnavailable
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	d := &demoRun{c: c, out: c.stdout, tty: isTerminal(c.stdout), perWorker: 25, frozenPerWorker: 10}
	if *short {
		d.perWorker, d.frozenPerWorker = 5, 3
	}
	err := d.run(ctx)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
		c.errorf("cannot start redis-server: %s", errText(err))
		c.hintf("install Debian's redis-server package (sudo apt-get install redis-server), or set $REDIS_SERVER to a redis-server binary")
		return exitUnavailable
	case ctx.Err() != nil:
		d.prog.stop()
		c.errorf("demo interrupted; every redis-server it started is stopped")
		return 130
	case err != nil:
		c.errorf("demo: %s", errText(err))
		return exitFailure
	case d.failed > 0:
		c.errorf("demo: %d check(s) failed", d.failed)
		return exitFailure
	}
	return exitOK
}

type demoRun struct {
	c         *cli
	out       io.Writer
	tty       bool
	perWorker int
	// frozenPerWorker is the acquisitions per worker with 2 nodes frozen.
	frozenPerWorker int

	servers []*redisserver.Server
	admin   []*redis.Client // for INFO, one per server
	prog    progress
	sent    redisserver.Counter // commands sent by the demo's Lockers
	rows    []phaseStats
	failed  int
}

// phaseStats is one row of the summary.
type phaseStats struct {
	name         string
	acquisitions int
	elapsed      time.Duration
	handoffs     []time.Duration
	// sent is the commands the Lockers sent (counted by a client hook); run
	// is the commands the servers ran (INFO commandstats), which counts
	// those that scripts call too. -1 when not measured.
	sent, run int64
}

func (d *demoRun) printf(format string, args ...any) {
	d.prog.clear()
	fmt.Fprintf(d.out, format, args...)
}

// check prints the verdict of one check and counts failures.
func (d *demoRun) check(ok bool) string {
	if ok {
		return "ok"
	}
	d.failed++
	return "FAILED"
}

func (d *demoRun) run(ctx context.Context) error {
	start := time.Now()
	d.prog = progress{out: d.out, tty: d.tty}
	defer d.prog.stop()
	if err := d.startServers(); err != nil {
		return err
	}
	defer d.stopServers()
	ports := make([]string, len(d.servers))
	for i, s := range d.servers {
		ports[i] = strconv.Itoa(s.Port())
	}
	d.printf("dlock demo: %d redis-servers started on 127.0.0.1, ports %s\n\n", len(d.servers), strings.Join(ports, ", "))

	for _, scene := range []func(context.Context) error{d.single, d.redlock, d.frozenHolder} {
		if err := scene(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.printf("\n")
	}
	d.summary()
	d.printf("\nfinished in %s; all %d redis-servers stopped.\n", time.Since(start).Round(100*time.Millisecond), len(d.servers))
	return nil
}

func (d *demoRun) startServers() error {
	type started struct {
		s   *redisserver.Server
		err error
	}
	ch := make(chan started, demoServers)
	for range demoServers {
		go func() {
			s, err := redisserver.NewServer()
			ch <- started{s, err}
		}()
	}
	var errs []error
	for range demoServers {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		d.servers = append(d.servers, r.s)
	}
	slices.SortFunc(d.servers, func(a, b *redisserver.Server) int { return a.Port() - b.Port() })
	for _, s := range d.servers {
		d.admin = append(d.admin, s.Client())
	}
	if len(errs) > 0 {
		d.stopServers()
		// The servers fail alike; one message says it.
		return errs[0]
	}
	return nil
}

// stopServers stops every server the demo started, thawing frozen ones.
func (d *demoRun) stopServers() {
	for _, cl := range d.admin {
		_ = cl.Close()
	}
	var wg sync.WaitGroup
	for _, s := range d.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Close()
		}()
	}
	wg.Wait()
}

// lockers returns n Lockers, one per simulated process, each with its own
// clients to the given servers, and a function that closes them all.
func (d *demoRun) lockers(n int, servers []*redisserver.Server) ([]*dlock.Locker, func(), error) {
	var ls []*dlock.Locker
	var cls []*redis.Client
	closeAll := func() {
		for _, l := range ls {
			_ = l.Close()
		}
		for _, cl := range cls {
			_ = cl.Close()
		}
	}
	for range n {
		ucs := make([]redis.UniversalClient, len(servers))
		for i, s := range servers {
			cl := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true})
			cl.AddHook(&d.sent)
			cls = append(cls, cl)
			ucs[i] = cl
		}
		if len(ucs) == 1 {
			ls = append(ls, dlock.New(ucs[0]))
			continue
		}
		l, err := dlock.NewRedlock(ucs)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ls = append(ls, l)
	}
	return ls, closeAll, nil
}

// contendSpec describes one contention scene.
type contendSpec struct {
	label     string
	lockers   []*dlock.Locker // one per worker; nil: unprotected workers
	workers   int             // with lockers nil
	key       string
	perWorker int
	budget    time.Duration
	nodes     []*redis.Client // whose commands are counted; nil: none
}

// contention is the outcome of workers incrementing a shared counter.
type contention struct {
	want, got      int
	overlaps       int
	stale          int // reads and writes of holders whose lock had expired, refused: see fencedCounter
	fenceErrors    int
	firstF, lastF  uint64
	acquireErrors  int
	lastAcquireErr error
	stats          phaseStats
}

func (r contention) ok() bool {
	return r.got == r.want && r.overlaps == 0 && r.fenceErrors == 0 && r.acquireErrors == 0
}

// contend runs one worker per Locker; each does perWorker increments of a
// shared counter by reading it, pausing, and writing it back: a non-atomic
// read-modify-write, under the lock named key unless lockers is nil (then n
// unprotected workers). It checks that no two critical sections overlapped
// and that fences strictly increased from one holder to the next.
func (d *demoRun) contend(ctx context.Context, sp contendSpec) contention {
	lockers, n, key, nodes := sp.lockers, sp.workers, sp.key, sp.nodes
	if lockers != nil {
		n = len(lockers)
	}
	var (
		counter                    fencedCounter
		sections                   sectionSet
		done                       atomic.Int64
		mu                         sync.Mutex // guards what follows
		lastFence, firstFence      uint64
		fenceErrors, acquireErrors int
		lastErr                    error
		lastRelease                time.Time
		handoffs                   []time.Duration
	)
	total := n * sp.perWorker
	d.prog.start(sp.label, total, &done)
	before, sentBefore := commandCount(ctx, nodes), d.sent.Load()
	start := time.Now()
	// The scene ends after its budget even if not every increment was done,
	// so that the demo keeps to its time on a slow machine.
	deadline := start.Add(sp.budget)
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < sp.perWorker && actx.Err() == nil; {
				var lock *dlock.Lock
				fence := uint64(0) // unprotected workers: the counter takes every write
				if lockers != nil {
					var err error
					lock, err = lockers[w].Acquire(actx, key, dlock.WithTTL(demoTTL))
					if err != nil {
						if actx.Err() == nil {
							mu.Lock()
							acquireErrors++
							lastErr = err
							mu.Unlock()
						}
						continue
					}
					fence = lock.Fence()
					mu.Lock()
					if !lastRelease.IsZero() {
						handoffs = append(handoffs, time.Since(lastRelease))
					}
					// A holder whose lock expired before it got here (it was
					// paused: the machine is slow) may come after the next
					// holder; the counter refuses it (see fencedCounter).
					if fence > lastFence {
						lastFence = fence
					} else if time.Now().Before(lock.ValidUntil()) {
						fenceErrors++
					}
					if firstFence == 0 {
						firstFence = fence
					}
					mu.Unlock()
				}
				h := sections.enter(lock)
				v, ok := counter.read(fence)
				time.Sleep(demoWork)
				ok = ok && counter.write(fence, v+1)
				sections.leave(h)
				if ok {
					i++
					done.Add(1)
				}
				if lock != nil {
					mu.Lock()
					lastRelease = time.Now()
					mu.Unlock()
					_ = lock.Release(ctx)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	d.prog.finish()
	run, sent := int64(-1), int64(-1)
	if nodes != nil {
		run = commandCount(ctx, nodes) - before - int64(len(nodes)) // less the first INFO
		sent = d.sent.Load() - sentBefore
	}
	return contention{
		want: int(done.Load()), got: int(counter.value), overlaps: sections.overlaps, stale: counter.refused,
		fenceErrors: fenceErrors, firstF: firstFence, lastF: lastFence,
		acquireErrors: acquireErrors, lastAcquireErr: lastErr,
		stats: phaseStats{name: sp.label, acquisitions: int(done.Load()), elapsed: elapsed, handoffs: handoffs, run: run, sent: sent},
	}
}

// report prints the outcome of a locked contention.
func (d *demoRun) report(what string, r contention) {
	d.printf("   %-18s counter = %d of %d, %d overlapping critical sections, fences %d..%d strictly increasing: %s\n",
		what, r.got, r.want, r.overlaps, r.firstF, r.lastF, d.check(r.ok()))
	if r.fenceErrors > 0 {
		d.printf("   %-18s %d fences did not increase\n", "", r.fenceErrors)
	}
	if r.stale > 0 {
		d.printf("   %-18s %d reads or writes of holders whose lock had expired (paused: the machine is slow) refused by their fences, and done again\n", "", r.stale)
	}
	if r.acquireErrors > 0 {
		d.printf("   %-18s %d acquisitions failed, the last: %s\n", "", r.acquireErrors, errText(r.lastAcquireErr))
	}
	d.rows = append(d.rows, r.stats)
}

// single is scene 1: one Redis, with and without the lock.
func (d *demoRun) single(ctx context.Context) error {
	d.printf("1. One Redis: %d workers (each its own connection, as separate processes would)\n", demoWorkers)
	d.printf("   each add 1 to a shared counter %d times by reading it, pausing %s, and writing it back.\n", d.perWorker, demoWork)
	ls, closeAll, err := d.lockers(demoWorkers, d.servers[:1])
	if err != nil {
		return err
	}
	defer closeAll()
	r := d.contend(ctx, contendSpec{label: "single redis", lockers: ls, key: "demo:single",
		perWorker: d.perWorker, budget: sceneBudget, nodes: d.admin[:1]})
	if ctx.Err() != nil {
		return nil
	}
	d.report("with the lock:", r)
	u := d.contend(ctx, contendSpec{label: "no lock", workers: demoWorkers, perWorker: d.perWorker, budget: sceneBudget})
	if ctx.Err() != nil {
		return nil
	}
	d.printf("   %-18s counter = %d of %d: %d updates lost\n", "without the lock:", u.got, u.want, u.want-u.got)
	return nil
}

// redlock is scene 2: five nodes, then two frozen, then three, then thawed.
func (d *demoRun) redlock(ctx context.Context) error {
	d.printf("2. Redlock over %d nodes: a lock needs %d of them. The same %d workers, the same counter.\n",
		len(d.servers), len(d.servers)/2+1, demoWorkers)
	ls, closeAll, err := d.lockers(demoWorkers, d.servers)
	if err != nil {
		return err
	}
	defer closeAll()
	const key = "demo:redlock"
	r := d.contend(ctx, contendSpec{label: "redlock, 5 nodes", lockers: ls, key: key,
		perWorker: d.perWorker, budget: sceneBudget, nodes: d.admin})
	if ctx.Err() != nil {
		return nil
	}
	d.report("all 5 up:", r)
	d.printf("   %-18s (fences skip numbers: each node counts every attempt it granted, also\n", "")
	d.printf("   %-18s the attempts that lost a split vote)\n", "")

	// Freeze two nodes: they keep their sockets open but answer nothing,
	// like a node in a long pause or behind a partition.
	for _, s := range d.servers[3:] {
		if err := s.Freeze(); err != nil {
			return err
		}
	}
	r = d.contend(ctx, contendSpec{label: "redlock, 2 of 5 frozen", lockers: ls, key: key,
		perWorker: d.frozenPerWorker, budget: sceneBudget, nodes: d.admin[:3]})
	if ctx.Err() != nil {
		return nil
	}
	d.report("2 nodes frozen:", r)
	// The same with one worker: what the frozen nodes cost without
	// contention.
	alone := d.contend(ctx, contendSpec{label: "redlock, 2 frozen, 1 worker", lockers: ls[:1], key: key,
		perWorker: d.perWorker * 40, budget: time.Second, nodes: d.admin[:3]})
	if ctx.Err() != nil {
		return nil
	}
	d.report("one worker alone:", alone)

	if err := d.servers[2].Freeze(); err != nil {
		return err
	}
	const attempts = 3
	refused, slowest := 0, time.Duration(0)
	var lastErr error
	for range attempts {
		t0 := time.Now()
		k, err := ls[0].TryAcquire(ctx, key, dlock.WithTTL(demoTTL))
		slowest = max(slowest, time.Since(t0))
		if k != nil {
			_ = k.Release(ctx)
			continue
		}
		if errors.Is(err, dlock.ErrUnavailable) && countNodeErrors(err) >= 3 {
			refused++
			lastErr = err
		}
	}
	why := ""
	if lastErr != nil {
		why = ": " + quorumReason(lastErr)
	}
	d.printf("   %-18s %d of %d attempts refused within %s each%s: %s\n", "3 nodes frozen:",
		refused, attempts, slowest.Round(time.Millisecond), why, d.check(refused == attempts && ctx.Err() == nil))

	for _, s := range d.servers[2:] {
		if err := s.Thaw(); err != nil {
			return err
		}
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	k, err := ls[0].Acquire(actx, key, dlock.WithTTL(demoTTL))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		d.printf("   %-18s not acquired: %s: %s\n", "all thawed:", errText(err), d.check(false))
		return nil
	}
	d.printf("   %-18s acquired again, fence %d (above every earlier one): %s\n", "all thawed:", k.Fence(), d.check(k.Fence() > r.lastF))
	_ = k.Release(ctx)
	return nil
}

// quorumReason extracts "quorum not reached (...)" from an acquisition error.
func quorumReason(err error) string {
	msg := errText(err)
	if i := strings.Index(msg, " ("); i >= 0 {
		if j := strings.Index(msg[i:], ")"); j >= 0 {
			return "too few nodes answered" + msg[i:i+j+1]
		}
	}
	return msg
}

// frozenHolder is scene 3: the holder's only Redis stops answering; the
// holder must learn that it lost the lock before the key can expire.
func (d *demoRun) frozenHolder(ctx context.Context) error {
	const ttl = demoTTL
	d.printf("3. A holder whose Redis stops answering (ttl %s, renewed every %s)\n", ttl, (ttl / 3).Round(time.Millisecond))
	ls, closeAll, err := d.lockers(2, d.servers[:1])
	if err != nil {
		return err
	}
	defer closeAll()
	t0 := time.Now()
	k, err := ls[0].TryAcquire(ctx, "demo:holder", dlock.WithTTL(ttl))
	if err != nil {
		return fmt.Errorf("scene 3: %w", err)
	}
	// The key was set after t0, with a relative expiry: it cannot expire in
	// Redis before t0+ttl.
	if err := d.servers[0].Freeze(); err != nil {
		return err
	}
	frozenAt := time.Since(t0)
	select {
	case <-k.Lost():
	case <-ctx.Done():
		return nil
	}
	lostAt := time.Since(t0)
	if err := d.servers[0].Thaw(); err != nil {
		return err
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
	d.printf("   %-18s %6s  (the key cannot expire in Redis before %s)\n", "acquired at", ms(0), ms(ttl))
	d.printf("   %-18s %6s\n", "redis frozen at", ms(frozenAt))
	d.printf("   %-18s %6s  %s before the key could expire: %s\n", "Lost() fired at", ms(lostAt),
		ms(ttl-lostAt), d.check(lostAt < ttl))
	// Once Redis answers again, the lost holder's Release still deletes the
	// key where it holds its token (and reports ErrNotHeld), so the next
	// holder need not wait for the key to expire.
	_ = k.Release(ctx)
	actx, cancel := context.WithTimeout(ctx, 5*ttl)
	defer cancel()
	k2, err := ls[1].Acquire(actx, "demo:holder", dlock.WithTTL(ttl))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		d.printf("   %-18s not acquired: %s: %s\n", "next holder", errText(err), d.check(false))
		return nil
	}
	d.printf("   %-18s %6s  after Redis answered again and the lost holder released: fence %d > %d: %s\n",
		"next holder at", ms(time.Since(t0)), k2.Fence(), k.Fence(), d.check(k2.Fence() > k.Fence()))
	_ = k2.Release(ctx)
	return nil
}

// summary is scene 4.
func (d *demoRun) summary() {
	d.printf("4. Summary\n")
	w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "   \tacquisitions\tper second\thandoff p50\thandoff p99\tcommands sent\tcommands run\t\n")
	for _, r := range d.rows {
		fmt.Fprintf(w, "   %s\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", r.name, r.acquisitions,
			float64(r.acquisitions)/r.elapsed.Seconds(), fmtMS(percentile(r.handoffs, 50)), fmtMS(percentile(r.handoffs, 99)),
			perAcq(r.sent, r.acquisitions), perAcq(r.run, r.acquisitions))
	}
	_ = w.Flush()
	d.printf("   handoff: from one holder's release to the next holder's acquisition.\n")
	d.printf("   commands per acquisition: sent by the Lockers (a client hook), and run by the\n")
	d.printf("   redis-servers (INFO commandstats, which counts the commands scripts call too;\n")
	d.printf("   with 2 nodes frozen, on the 3 live ones). Acquisitions that lost a split vote\n")
	d.printf("   on the Redlock count in both.\n")
}

// perAcq is n per acquisition, or "-" when not measured.
func perAcq(n int64, acquisitions int) string {
	if n < 0 || acquisitions == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(acquisitions))
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// commandCount is the number of commands the servers have run, from INFO
// commandstats (which counts the INFO calls too).
func commandCount(ctx context.Context, nodes []*redis.Client) int64 {
	var n int64
	for _, cl := range nodes {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := cl.Info(ictx, "commandstats").Result()
		cancel()
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			_, stats, _ := strings.Cut(line, ":")
			for _, f := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					c, _ := strconv.ParseInt(v, 10, 64)
					n += c
				}
			}
		}
	}
	return n
}

// progress is the live progress line, on a terminal only.
type progress struct {
	out  io.Writer
	tty  bool
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex // serialises writes of the line
}

func (p *progress) start(label string, total int, done *atomic.Int64) {
	if !p.tty {
		return
	}
	p.quit = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			p.mu.Lock()
			fmt.Fprintf(p.out, "\r\033[K   %s: %d of %d", label, done.Load(), total)
			p.mu.Unlock()
			select {
			case <-t.C:
			case <-p.quit:
				return
			}
		}
	}()
}

// finish stops the line's updates and clears it.
func (p *progress) finish() {
	if p.quit == nil {
		return
	}
	close(p.quit)
	p.wg.Wait()
	p.quit = nil
	p.clear()
}

func (p *progress) stop() { p.finish() }

func (p *progress) clear() {
	if p.tty {
		p.mu.Lock()
		fmt.Fprint(p.out, "\r\033[K")
		p.mu.Unlock()
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTTY(f)
}

// fencedCounter is a locked scene's shared resource: a counter that, as a
// store guarded by fences does, refuses a read or a write with a fence
// lower than the highest it has seen. A holder paused past its lock's
// expiry (on a machine starved of CPU) may go on after the next holder
// began; the next holder's fence is larger, so the late holder's write is
// refused and no update is lost. Unprotected workers pass fence 0: every
// write is taken.
type fencedCounter struct {
	mu      sync.Mutex
	value   int64
	highest uint64
	refused int
}

func (c *fencedCounter) read(fence uint64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence < c.highest {
		c.refused++
		return 0, false
	}
	c.highest = fence
	return c.value, true
}

func (c *fencedCounter) write(fence uint64, v int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence < c.highest {
		c.refused++
		return false
	}
	c.highest, c.value = fence, v
	return true
}

// sectionSet tells overlapping critical sections: a section that begins
// while another is inside is an overlap if that other's lock is still
// valid (or it holds none: the unprotected workers); if its lock had
// expired, its holder was paused past the lock's TTL, which no lock can
// prevent and the fences cover (see fencedCounter), and it is no overlap.
type sectionSet struct {
	mu       sync.Mutex
	inside   map[*int]*dlock.Lock
	overlaps int
}

// enter records a section of lock (nil: an unprotected worker) and
// returns its handle for leave.
func (s *sectionSet) enter(lock *dlock.Lock) *int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inside == nil {
		s.inside = map[*int]*dlock.Lock{}
	}
	now := time.Now()
	for _, other := range s.inside {
		if other == nil || now.Before(other.ValidUntil()) {
			s.overlaps++
		}
	}
	h := new(int)
	s.inside[h] = lock
	return h
}

func (s *sectionSet) leave(h *int) {
	s.mu.Lock()
	delete(s.inside, h)
	s.mu.Unlock()
}
