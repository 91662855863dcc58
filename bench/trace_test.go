package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// traceHook records each command a client sends: when it went out and
// when its answer came, relative to base.
type traceHook struct {
	who  string
	base time.Time
	mu   *sync.Mutex
	log  *[]string
}

func (h traceHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h traceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t0 := time.Since(h.base)
		err := next(ctx, cmd)
		t1 := time.Since(h.base)
		h.add(fmt.Sprintf("%9.3f %9.3f %s %s", tms(t0), tms(t1), h.who, summary(cmd)))
		return err
	}
}
func (h traceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t0 := time.Since(h.base)
		err := next(ctx, cmds)
		t1 := time.Since(h.base)
		var s []string
		for _, c := range cmds {
			s = append(s, summary(c))
		}
		h.add(fmt.Sprintf("%9.3f %9.3f %s pipeline[%s]", tms(t0), tms(t1), h.who, strings.Join(s, "; ")))
		return err
	}
}
func (h traceHook) add(s string) {
	h.mu.Lock()
	*h.log = append(*h.log, s)
	h.mu.Unlock()
}

func tms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func summary(c redis.Cmder) string {
	a := c.Args()
	if len(a) > 4 {
		a = a[:4]
	}
	s := fmt.Sprint(a...)
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// TestTraceHandoff logs, command by command, what two processes contending
// for one key through the latency proxy (100µs each way) send around each
// hand-off. DLOCK_TRACE=1 runs it.
func TestTraceHandoff(t *testing.T) {
	if os.Getenv("DLOCK_TRACE") == "" {
		t.Skip("DLOCK_TRACE=1")
	}
	srv := startServer(t)
	var p interface{ Addr() string }
	if bin := os.Getenv("DLOCK_TRACE_PROXY"); bin != "" {
		cmd := exec.Command(bin, "-target", srv.Addr, "-delay", "95us")
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { in.Close(); cmd.Wait() }()
		var addr string
		fmt.Fscanln(out, &addr)
		p = fixedAddr(addr)
	} else {
		lp, err := NewLatencyProxy(srv.Addr, 95*time.Microsecond)
		if err != nil {
			t.Fatal(err)
		}
		defer lp.Close()
		p = lp
	}
	base := time.Now()
	var mu sync.Mutex
	var log []string
	var procs []Process
	w := 2
	if s := os.Getenv("DLOCK_TRACE_W"); s != "" {
		fmt.Sscan(s, &w)
	}
	q := &handoffQueue{turns: map[string]*handoffTurn{}}
	for i := range w {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: os.Getenv("DLOCK_TRACE_CTX") != ""})
		c.AddHook(traceHook{who: fmt.Sprintf("P%d", i), base: base, mu: &mu, log: &log})
		defer c.Close()
		if os.Getenv("DLOCK_TRACE_FLOOR") != "" {
			procs = append(procs, &handoffProcess{p: &floorProcess{c: c, prefix: fmt.Sprint(i, ":")}, q: q})
			continue
		}
		l := dlock.New(c, dlock.WithHook(wokenHook{who: fmt.Sprintf("P%d", i), base: base, mu: &mu, log: &log}))
		defer l.Close()
		procs = append(procs, &dlockProcess{locker: l})
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	end := time.Now().Add(300 * time.Millisecond)
	for i, l := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				k, err := l.Lock(ctx, "trace")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				log = append(log, fmt.Sprintf("%9.3f %9s P%d ACQUIRED fence %d", tms(time.Since(base)), "", i, 0))
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				t0 := time.Since(base)
				if err := k.Unlock(ctx); err != nil {
					t.Error(err)
				}
				mu.Lock()
				log = append(log, fmt.Sprintf("%9.3f %9.3f P%d RELEASED", tms(t0), tms(time.Since(base)), i))
				mu.Unlock()
				if os.Getenv("DLOCK_TRACE_PAUSE") != "" {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if os.Getenv("DLOCK_TRACE_LOG") != "" {
		for _, s := range log {
			t.Log(s)
		}
	}
	// PING's round trip through the proxy.
	pc := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer pc.Close()
	var pings []time.Duration
	for range 200 {
		t0 := time.Now()
		pc.Ping(ctx)
		pings = append(pings, time.Since(t0))
	}
	t.Logf("PING p50 %v", percentile(pings, 50))
	var evals, sets []time.Duration
	for i := range 200 {
		t0 := time.Now()
		pc.Eval(ctx, "return redis.call('SET', KEYS[1], ARGV[1], 'PX', 30000)", []string{"x"}, strings.Repeat("y", 300))
		evals = append(evals, time.Since(t0))
		t0 = time.Now()
		pc.Set(ctx, fmt.Sprint("k", i), strings.Repeat("y", 300), 0)
		sets = append(sets, time.Since(t0))
	}
	t.Logf("EVAL with 300 bytes p50 %v, SET 300 bytes p50 %v", percentile(evals, 50), percentile(sets, 50))
	var idle []time.Duration
	for range 100 {
		time.Sleep(5 * time.Millisecond)
		t0 := time.Now()
		pc.Set(ctx, "k", strings.Repeat("y", 300), 0)
		idle = append(idle, time.Since(t0))
	}
	t.Logf("SET after 5ms idle p50 %v", percentile(idle, 50))
	t.Logf("%s", handoffStats(log))
}

type wokenHook traceHook

func (h wokenHook) Start(ctx context.Context, _ string) context.Context { return ctx }
func (h wokenHook) Event(_ context.Context, e dlock.Event) {
	if e.Kind == dlock.EventWoken {
		traceHook(h).add(fmt.Sprintf("%9.3f %9s %s WOKEN", tms(time.Since(h.base)), "", h.who))
	}
}

// handoffStats reads the log: for each RELEASED followed by another
// process's ACQUIRED, the hand-off, the wake-up after the release returned,
// and the woken waiter's attempt.
func handoffStats(log []string) string {
	type ev struct {
		t0, t1    float64
		who, what string
	}
	var evs []ev
	for _, l := range log {
		f := strings.Fields(l)
		var e ev
		fmt.Sscan(f[0], &e.t0)
		if len(f) > 3 && f[2] != "ACQUIRED" && f[2] != "WOKEN" && f[2] != "RELEASED" {
			fmt.Sscan(f[1], &e.t1)
			e.who, e.what = f[2], f[3]
		} else {
			e.who, e.what = f[1], f[2]
			if e.what == "RELEASED" {
				fmt.Sscan(f[1], &e.t1)
				e.who, e.what = f[2], f[3]
			}
		}
		evs = append(evs, e)
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmpF(max(a.t0, a.t1), max(b.t0, b.t1)) })
	var hand, wake, att []time.Duration
	var lastRel float64
	for i, e := range evs {
		switch e.what {
		case "RELEASED":
			lastRel = e.t1
		case "ACQUIRED":
			if lastRel == 0 {
				continue
			}
			hand = append(hand, time.Duration((e.t0-lastRel)*1e6))
			// the waiter's last command before and its woken
			for j := i - 1; j >= 0; j-- {
				if evs[j].who == e.who && strings.HasPrefix(evs[j].what, "evalsha") {
					att = append(att, time.Duration((evs[j].t1-evs[j].t0)*1e6))
					break
				}
			}
			for j := i - 1; j >= 0; j-- {
				if evs[j].who == e.who && evs[j].what == "WOKEN" {
					wake = append(wake, time.Duration((evs[j].t0-lastRel)*1e6))
					break
				}
			}
			lastRel = 0
		}
	}
	return fmt.Sprintf("%d hand-offs: p50 %v; woken after the release returned p50 %v; the waiter's last command p50 %v",
		len(hand), percentile(hand, 50), percentile(wake, 50), percentile(att, 50))
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type fixedAddr string

func (a fixedAddr) Addr() string { return string(a) }

// TestHandoffRoundTrips runs the contended scenario through a
// LatencyProxy (100µs each way) for dlock's configurations and the floor
// of a hand-off, by turns, and logs each hand-off to a waiter in round
// trips (dlock's p50 over floor-handoff's). DLOCK_TRACE=1 runs it;
// DLOCK_TRACE_PROXY names a latencyproxy binary to run the proxy in a
// process of its own.
func TestHandoffRoundTrips(t *testing.T) {
	if os.Getenv("DLOCK_TRACE") == "" {
		t.Skip("DLOCK_TRACE=1")
	}
	srv := startServer(t)
	rt, err := CalibrateProxy(srv.Addr, 100*time.Microsecond, 200)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PING through the proxy %v (delay %v)", rt.LatencyProxy, rt.Delay)
	libs := []Library{DlockLibrary(false), DlockLibrary(true), DlockRueidisLibrary(), deferredLibrary(DlockLibrary(true), rt.LatencyProxy), FloorHandoffLibrary()}
	for _, hold := range []time.Duration{200 * time.Microsecond, 5 * time.Millisecond} {
		got := map[string][]float64{}
		for rep := range 3 {
			for _, lib := range libs {
				var addr string
				if bin := os.Getenv("DLOCK_TRACE_PROXY"); bin != "" {
					cmd := exec.Command(bin, "-target", srv.Addr, "-delay", rt.Delay.String())
					in, _ := cmd.StdinPipe()
					out, _ := cmd.StdoutPipe()
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					fmt.Fscanln(out, &addr)
					defer func() { in.Close(); cmd.Wait() }()
				} else {
					px, err := NewLatencyProxy(srv.Addr, rt.Delay)
					if err != nil {
						t.Fatal(err)
					}
					defer px.Close()
					addr = px.Addr()
				}
				res, err := Contended(lib, Server{Addr: addr, Admin: srv.Admin}, 8, hold, 300*time.Millisecond, 2*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				got[lib.Name] = append(got[lib.Name], float64(res.OtherP50))
				t.Logf("hold %v rep %d %-14s to a waiter p50 %v, handoff p50 %v, fairness %.2f, rt/acq %.2f", hold, rep, lib.Name, res.OtherP50, res.HandoffP50, res.Fairness(), res.RoundTrips)
			}
		}
		for _, lib := range libs[:4] {
			rs := ratios(got[lib.Name], got["floor-handoff"])
			t.Logf("hold %v %-14s hand-off to a waiter ÷ floor-handoff's: %.2f (per repetition %s)", hold, lib.Name, median(rs), fmtRatios(rs))
		}
	}
}

// TestTraceUncontended logs what one dlock Acquire+Release and one of the
// floor's take through the proxy, command by command. DLOCK_TRACE=1.
func TestTraceUncontended(t *testing.T) {
	if os.Getenv("DLOCK_TRACE") == "" {
		t.Skip("DLOCK_TRACE=1")
	}
	srv := startServer(t)
	px, err := NewLatencyProxy(srv.Addr, 55*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	base := time.Now()
	var mu sync.Mutex
	var log []string
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	c.AddHook(traceHook{who: "D", base: base, mu: &mu, log: &log})
	l := dlock.New(c)
	defer l.Close()
	f := &floorProcess{c: redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true}), prefix: "x:"}
	defer f.Close()
	f.c.AddHook(traceHook{who: "F", base: base, mu: &mu, log: &log})
	var dl, fl []time.Duration
	for i := range 400 {
		t0 := time.Now()
		k, err := l.Acquire(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		_ = k.Release(ctx)
		t2 := time.Now()
		h, err := f.Lock(ctx, "u")
		if err != nil {
			t.Fatal(err)
		}
		t3 := time.Now()
		_ = h.Unlock(ctx)
		t4 := time.Now()
		if i >= 20 {
			dl = append(dl, t1.Sub(t0), t2.Sub(t1))
			fl = append(fl, t3.Sub(t2), t4.Sub(t3))
		}
	}
	var da, dr, fa, fr []time.Duration
	for i := 0; i < len(dl); i += 2 {
		da, dr, fa, fr = append(da, dl[i]), append(dr, dl[i+1]), append(fa, fl[i]), append(fr, fl[i+1])
	}
	t.Logf("dlock acquire p50 %v release p50 %v; floor acquire p50 %v release p50 %v", percentile(da, 50), percentile(dr, 50), percentile(fa, 50), percentile(fr, 50))
	// The commands' own times, from the hooks.
	var dcmd, fcmd []time.Duration
	for _, s := range log {
		var t0, t1 float64
		var who string
		fmt.Sscan(s, &t0, &t1, &who)
		d := time.Duration((t1 - t0) * 1e6)
		if who == "D" {
			dcmd = append(dcmd, d)
		} else {
			fcmd = append(fcmd, d)
		}
	}
	t.Logf("commands: dlock's p50 %v, the floor's p50 %v", percentile(dcmd, 50), percentile(fcmd, 50))
}

// deferredLibrary is lib whose processes, right after a release, wait one
// round trip (rtt) before asking for the key again: a prototype of a
// releaser that, having woken a waiter, registers behind it a round trip
// later instead of at once.
func deferredLibrary(lib Library, rtt time.Duration) Library {
	lib.Name += "-deferred"
	newProcess := lib.New
	lib.New = func(addrs []string, sent *Counter) (Process, error) {
		p, err := newProcess(addrs, sent)
		if err != nil {
			return nil, err
		}
		return &deferredProcess{Process: p, rtt: rtt}, nil
	}
	return lib
}

type deferredProcess struct {
	Process
	rtt      time.Duration
	released time.Time
}

func (p *deferredProcess) Lock(ctx context.Context, key string) (Held, error) {
	if d := time.Until(p.released.Add(p.rtt)); d > 0 {
		time.Sleep(d)
	}
	h, err := p.Process.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return deferredHeld{h, p}, nil
}

type deferredHeld struct {
	Held
	p *deferredProcess
}

func (h deferredHeld) Unlock(ctx context.Context) error {
	err := h.Held.Unlock(ctx)
	h.p.released = time.Now()
	return err
}
