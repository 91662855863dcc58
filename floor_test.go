package dlock_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// The floor of a fenced lock (issue 46): the least a lock that gives a
// fence costs on one Redis, a script that takes the key with SET NX PX and
// counts the fence with INCR and PEXPIRE, and a compare-and-delete release,
// sent by go-redis' Script.Run on the same client as dlock's. bench/ has the
// same rows (floor, floor-ctx, floor-rueidis) for the report; this test
// measures dlock against it by turns in the library's own module, so that
// it runs on go-redis v9.7.3 (go.mod) and, with
// -modfile=go.redis-latest.mod, on the newest one.
const (
	floorAcquireSrc = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local f = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, f}
end
return {0, redis.call('PTTL', KEYS[1])}`
	floorReleaseSrc = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
)

var floorAcquire, floorRelease = redis.NewScript(floorAcquireSrc), redis.NewScript(floorReleaseSrc)

// floorVariant is one side of a pair: a process (one client, one Locker)
// that takes and gives back a key.
type floorVariant struct {
	name string
	ctx  bool // the client is built with ContextTimeoutEnabled
	new  func(c *redis.Client) (pair func(ctx context.Context, key string) error, close func())
}

func floorOf(ctxTimeout bool) floorVariant {
	name := "floor"
	if ctxTimeout {
		name += "-ctx"
	}
	return floorVariant{name: name, ctx: ctxTimeout, new: func(c *redis.Client) (func(context.Context, string) error, func()) {
		var seq atomic.Int64
		return func(ctx context.Context, key string) error {
			token := strconv.FormatInt(seq.Add(1), 10)
			lock := "floor:{" + key + "}"
			v, err := floorAcquire.Run(ctx, c, []string{lock, lock + ":fence"}, token, 30000, 86400000).Slice()
			if err != nil {
				return err
			}
			if v[0] != int64(1) {
				return fmt.Errorf("%s not free", key)
			}
			return floorRelease.Run(ctx, c, []string{lock}, token).Err()
		}, func() {}
	}}
}

func dlockVariant(ctxTimeout, try bool) floorVariant {
	name := "dlock"
	if ctxTimeout {
		name += "-ctx"
	}
	if try {
		name += "-try"
	}
	return floorVariant{name: name, ctx: ctxTimeout, new: func(c *redis.Client) (func(context.Context, string) error, func()) {
		l := dlock.New(c)
		acquire := l.Acquire
		if try {
			acquire = l.TryAcquire
		}
		return func(ctx context.Context, key string) error {
			k, err := acquire(ctx, key)
			if err != nil {
				return err
			}
			return k.Release(ctx)
		}, func() { _ = l.Close() }
	}}
}

// floorProc is a variant's process, kept for a whole measurement.
type floorProc struct {
	c     *redis.Client
	pair  func(ctx context.Context, key string) error
	close func()
	base  string
}

func newFloorProc(addr string, v floorVariant) *floorProc {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: v.ctx})
	pair, closeV := v.new(c)
	return &floorProc{c: c, pair: pair, close: func() { closeV(); _ = c.Close() }, base: fmt.Sprintf("%s-%d", v.name, time.Now().UnixNano())}
}

// run runs g goroutines, each on its own key, for dur, and returns the
// pairs per second.
func (p *floorProc) run(g int, dur time.Duration) (float64, error) {
	end := time.Now().Add(dur)
	ctx := context.Background()
	var ops atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := p.base + ":" + strconv.Itoa(i)
			for time.Now().Before(end) {
				if err := p.pair(ctx, key); err != nil {
					failed.Store(err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(ops.Load()) / time.Since(start).Seconds(), nil
}

// TestFloorPairs measures dlock's everyday pair (Acquire or TryAcquire,
// then Release) against the floor on the same client, by turns (floor x,
// x floor, …), and logs the median of the pairs' ratios. It runs only when
// $DLOCK_FLOOR is set: DLOCK_FLOOR=1 go test -run TestFloorPairs -v
// [-modfile=go.redis-latest.mod]. $DLOCK_FLOOR_PAIRS (default 12),
// $DLOCK_FLOOR_G (default "1,64") and $DLOCK_FLOOR_ONLY (names, comma
// separated) change what runs.
func TestFloorPairs(t *testing.T) {
	if os.Getenv("DLOCK_FLOOR") == "" {
		t.Skip("set DLOCK_FLOOR=1 to measure")
	}
	n := 12
	if s := os.Getenv("DLOCK_FLOOR_PAIRS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	gs := []int{1, 64}
	if s := os.Getenv("DLOCK_FLOOR_G"); s != "" {
		gs = nil
		for _, f := range strings.Split(s, ",") {
			g, _ := strconv.Atoi(f)
			gs = append(gs, g)
		}
	}
	variants := append([]floorVariant{dlockVariant(false, false), dlockVariant(false, true),
		dlockVariant(true, false), dlockVariant(true, true)}, floorPrototypes...)
	all := append(slices.Clone(variants), floorOf(false), floorOf(true))
	if s := os.Getenv("DLOCK_FLOOR_ONLY"); s != "" {
		only := strings.Split(s, ",")
		variants = slices.DeleteFunc(variants, func(v floorVariant) bool { return !slices.Contains(only, v.name) })
	}
	ref := func(v floorVariant) floorVariant { return floorOf(v.ctx) }
	if name := os.Getenv("DLOCK_FLOOR_REF"); name != "" {
		i := slices.IndexFunc(all, func(v floorVariant) bool { return v.name == name })
		if i < 0 {
			t.Fatalf("no variant %q", name)
		}
		r := all[i]
		ref = func(floorVariant) floorVariant { return r }
	}
	addr := dlocktest.Start(t).Addr()
	dur := 100 * time.Millisecond
	if s := os.Getenv("DLOCK_FLOOR_DUR"); s != "" {
		dur, _ = time.ParseDuration(s)
	}
	t.Logf("go-redis %s, default clients inline: %v", redis.Version(), dlock.DefaultClientsInline())
	for _, g := range gs {
		ratios := make([][]float64, len(variants))
		rates := make([][]float64, len(variants))
		procs := make([][2]*floorProc, len(variants))
		for j, v := range variants {
			procs[j] = [2]*floorProc{newFloorProc(addr, ref(v)), newFloorProc(addr, v)}
			defer procs[j][0].close()
			defer procs[j][1].close()
			for _, p := range procs[j] {
				if _, err := p.run(g, dur); err != nil { // warm-up
					t.Fatal(err)
				}
			}
		}
		for i := range n {
			for j := range variants {
				var r [2]float64
				for k := range 2 {
					side := (i + j + k) % 2
					x, err := procs[j][side].run(g, dur)
					if err != nil {
						t.Fatal(err)
					}
					r[side] = x
				}
				ratios[j] = append(ratios[j], r[1]/r[0])
				rates[j] = append(rates[j], r[1])
			}
		}
		for j, v := range variants {
			r, q := median(ratios[j]), median(rates[j])
			lo, hi := quantile(ratios[j], 0.25), quantile(ratios[j], 0.75)
			t.Logf("g=%-3d %-16s %6.0f pairs/s  %.3f× %s (IQR %.2f–%.2f, %d pairs)", g, v.name, q, r, ref(v).name, lo, hi, len(ratios[j]))
		}

	}
}

// scriptsVariant sends dlock's lock.lua and unlock.lua alone, as dlock
// sends them for an Acquire and a Release on one Redis, with nothing around
// them (bench/'s dlock-scripts).
func scriptsVariant(ctxTimeout bool) floorVariant {
	name := "scripts"
	if ctxTimeout {
		name += "-ctx"
	}
	return floorVariant{name: name, ctx: ctxTimeout, new: func(c *redis.Client) (func(context.Context, string) error, func()) {
		conn := quorum.NewConn(c)
		var seq atomic.Int64
		return func(ctx context.Context, key string) error {
			token := strconv.FormatInt(seq.Add(1), 10)
			nm := keys.Make("dlock:", key)
			v, err := script.Lock.Run(ctx, conn, script.LockCommand(nm.LockKeys(), token, "30000", "86400000"))
			if err != nil {
				return err
			}
			if r, _ := v.([]any); len(r) == 0 || r[0] != int64(1) {
				return fmt.Errorf("%s: not free", key)
			}
			_, err = script.Unlock.Run(ctx, conn, script.UnlockCommand(nm.UnlockKeys(), token))
			return err
		}, func() {}
	}}
}

// TestFloorCosts measures what each variant of TestFloorPairs costs per
// pair, one after the other, 1 goroutine: the client process' CPU
// (getrusage), Redis' CPU and its time in scripts (INFO). It runs only
// when $DLOCK_FLOOR is set.
func TestFloorCosts(t *testing.T) {
	if os.Getenv("DLOCK_FLOOR") == "" {
		t.Skip("set DLOCK_FLOOR=1 to measure")
	}
	variants := append([]floorVariant{floorOf(false), floorOf(true), dlockVariant(false, false), dlockVariant(false, true),
		dlockVariant(true, false), dlockVariant(true, true)}, floorPrototypes...)
	if s := os.Getenv("DLOCK_FLOOR_ONLY"); s != "" {
		only := strings.Split(s, ",")
		variants = slices.DeleteFunc(variants, func(v floorVariant) bool { return !slices.Contains(only, v.name) })
	}
	srv := dlocktest.Start(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := context.Background()
	stats := func() (usec, cpu float64) {
		info := admin.Info(ctx, "commandstats", "cpu").Val()
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						usec, _ = strconv.ParseFloat(v, 64)
					}
				}
			}
			for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(line, k); ok {
					f, _ := strconv.ParseFloat(v, 64)
					cpu += f * 1e6
				}
			}
		}
		return usec, cpu
	}
	rounds := 3
	for r := range rounds {
		for _, v := range variants {
			p := newFloorProc(srv.Addr(), v)
			if _, err := p.run(1, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			u0, c0 := stats()
			cpu0 := processCPU()
			var n int64
			end := time.Now().Add(time.Second)
			for time.Now().Before(end) {
				if err := p.pair(ctx, p.base); err != nil {
					t.Fatal(err)
				}
				n++
			}
			cpu1 := processCPU()
			u1, c1 := stats()
			p.close()
			t.Logf("round %d %-16s %6d pairs/s  client CPU %5.1f µs/pair  Redis CPU %5.1f µs/pair, in scripts %5.1f µs/pair",
				r+1, v.name, n, float64(cpu1-cpu0)/float64(n)/1e3, (c1-c0)/float64(n), (u1-u0)/float64(n))
		}
	}
}

// processCPU is the CPU time this process used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// floorPrototypes are more variants for TestFloorPairs (prototypes of a
// change, measured beside the floor).
var floorPrototypes = []floorVariant{scriptsVariant(false), scriptsVariant(true), noRenewVariant(false)}

// noRenewVariant is dlock's Acquire with WithAutoRenew(false), then
// Release: the lock's renewal left out (what the lifetime's timer costs).
func noRenewVariant(ctxTimeout bool) floorVariant {
	v := dlockVariant(ctxTimeout, false)
	v.name += "-norenew"
	v.new = func(c *redis.Client) (func(context.Context, string) error, func()) {
		l := dlock.New(c)
		return func(ctx context.Context, key string) error {
			k, err := l.Acquire(ctx, key, dlock.WithAutoRenew(false))
			if err != nil {
				return err
			}
			return k.Release(ctx)
		}, func() { _ = l.Close() }
	}
	return v
}

// quantile is the q-quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// median is the median of xs.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// TestFloorScripts measures Redis' time per call of lock.lua and
// unlock.lua, and of variants of them, against the floor's scripts: each
// script alone, in pipelines of 100 calls on fresh keys, INFO
// commandstats' usec per call, rounds interleaved. It runs only when
// $DLOCK_FLOOR is set.
func TestFloorScripts(t *testing.T) {
	if os.Getenv("DLOCK_FLOOR") == "" {
		t.Skip("set DLOCK_FLOOR=1 to measure")
	}
	srv := dlocktest.Start(t)
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	variants := append([]floorScriptVariant{
		{"floor", floorAcquireSrc, floorReleaseSrc, func(k string) []string { return []string{"floor:{" + k + "}", "floor:{" + k + "}:fence"} },
			[]any{"tok", 30000, 86400000}, func(k string) []string { return []string{"floor:{" + k + "}"} }},
		{"dlock", script.Lock.Source(), script.Unlock.Source(), dlockLockKeys, []any{"tok", "30000", "86400000"}, dlockUnlockKeys},
	}, floorScriptPrototypes...)
	if s := os.Getenv("DLOCK_FLOOR_ONLY"); s != "" {
		only := strings.Split(s, ",")
		variants = slices.DeleteFunc(variants, func(v floorScriptVariant) bool { return !slices.Contains(only, v.name) })
	}
	usec := func() (calls, us float64) {
		info := c.Info(ctx, "commandstats").Val()
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						us, _ = strconv.ParseFloat(v, 64)
					}
					if v, ok := strings.CutPrefix(f, "calls="); ok {
						calls, _ = strconv.ParseFloat(v, 64)
					}
				}
			}
		}
		return calls, us
	}
	const n = 20000
	rounds := 7
	if s := os.Getenv("DLOCK_FLOOR_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	res := make([][2][]float64, len(variants))
	seq := 0
	for r := range rounds {
		for i, v := range variants {
			lock, unlock := redis.NewScript(v.lock), redis.NewScript(v.unlock)
			_ = lock.Load(ctx, c).Err()
			_ = unlock.Load(ctx, c).Err()
			for side, s := range []*redis.Script{lock, unlock} {
				base := seq
				c0, u0 := usec()
				for b := 0; b < n; b += 100 {
					pipe := c.Pipeline()
					for j := b; j < b+100; j++ {
						k := fmt.Sprintf("s%d-%d", r, base+j)
						if side == 0 {
							s.EvalSha(ctx, pipe, v.lockKeys(k), v.lockArgs...)
						} else {
							s.EvalSha(ctx, pipe, v.unlockKeys(k), "tok")
						}
					}
					if _, err := pipe.Exec(ctx); err != nil {
						t.Fatal(v.name, err)
					}
				}
				c1, u1 := usec()
				res[i][side] = append(res[i][side], (u1-u0)/(c1-c0))
			}
			seq += n
		}
	}
	for i, v := range variants {
		t.Logf("%-24s lock %.2f µs, unlock %.2f µs, pair %.2f µs (medians of %d rounds)", v.name, median(res[i][0]), median(res[i][1]),
			median(res[i][0])+median(res[i][1]), rounds)
	}
}

// floorScriptVariant is a pair of scripts for TestFloorScripts.
type floorScriptVariant struct {
	name         string
	lock, unlock string
	lockKeys     func(k string) []string
	lockArgs     []any
	unlockKeys   func(k string) []string
}

// dlockLockKeys and dlockUnlockKeys are lock.lua's and unlock.lua's keys.
func dlockLockKeys(k string) []string {
	return []string{"dlock:{" + k + "}", "dlock:{" + k + "}:fence", "dlock:{" + k + "}:dead"}
}

func dlockUnlockKeys(k string) []string {
	return []string{"dlock:{" + k + "}:waiters", "dlock:{" + k + "}"}
}

// floorScriptPrototypes are variants of lock.lua and unlock.lua for
// TestFloorScripts.
var floorScriptPrototypes []floorScriptVariant

func init() {
	src := script.Lock.Source()
	cut := func(name, old, new string) {
		if !strings.Contains(src, old) {
			panic(name)
		}
		floorScriptPrototypes = append(floorScriptPrototypes, floorScriptVariant{name, strings.Replace(src, old, new, 1), script.Unlock.Source(),
			dlockLockKeys, []any{"tok", "30000", "86400000"}, dlockUnlockKeys})
	}
	cut("no-validation", `if c and (not string.match(c, '^[1-9]%d*$') or (#c == 19 and c >= '9223372036854775807') or #c > 19) then`, `if false then`)
	cut("no-zscore", `local d = redis.call('ZSCORE', KEYS[3], token)`, `local d = false`)
	cut("no-header", src[:strings.Index(src, "local token = ARGV[1]")], "")
	floorScriptPrototypes = append(floorScriptPrototypes, floorScriptVariant{"set-incr-time", `local t = redis.call('TIME')
local d = redis.call('ZSCORE', KEYS[3], ARGV[1])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local f = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, f}
end
return {0, redis.call('PTTL', KEYS[1])}`, script.Unlock.Source(), dlockLockKeys, []any{"tok", "30000", "86400000"}, dlockUnlockKeys})
	floorScriptPrototypes = append(floorScriptPrototypes, floorScriptVariant{"empty", `return {1, '1'}`, `return 1`, dlockLockKeys, []any{"tok", "30000", "86400000"}, dlockUnlockKeys})
}
