package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkScripts measures the ceiling of the uncontended scenarios: dlock's
// own acquire and release scripts on free keys, sent with no library around
// them (no Lock, no timer, no deadline), next to the scripts of a lock
// without fences or waiting (SET NX PX to take it; GET, then DEL, to give it
// back: redislock's), each through a default go-redis client and through
// go-redis' AutoPipeliner (v9.23: not in go.mod's minimum), from 1 and 64
// goroutines. A library that sends dlock's scripts cannot be faster than the
// dlock rows, whatever it does around them; docs/benchmarks-analysis.md
// ("The everyday path") reads these numbers.
//
//	go test -run XXX -bench Scripts -benchtime 3s
func BenchmarkScripts(b *testing.B) {
	srv := startServer(b)
	for _, scripts := range []string{"dlock", "setnx"} {
		for _, via := range []string{"client", "autopipeline"} {
			for _, g := range []int{1, 64} {
				b.Run(fmt.Sprintf("%s/%s/g=%d", scripts, via, g), func(b *testing.B) {
					benchScripts(b, srv, scripts, via, g)
				})
			}
		}
	}
}

// scriptPair is one acquire+release of key k with one library's scripts.
type scriptPair func(ctx context.Context, c redis.Cmdable, k string) error

func loadPair(b *testing.B, c *redis.Client, scripts string) scriptPair {
	ctx := context.Background()
	load := func(src string) string {
		sha, err := c.ScriptLoad(ctx, src).Result()
		if err != nil {
			b.Fatal(err)
		}
		return sha
	}
	if scripts == "setnx" {
		set := load(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`)
		del := load(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
		return func(ctx context.Context, c redis.Cmdable, k string) error {
			if err := c.EvalSha(ctx, set, []string{k}, "tok", 30000).Err(); err != nil {
				return err
			}
			return c.EvalSha(ctx, del, []string{k}, "tok").Err()
		}
	}
	read := func(name string) string {
		src, err := os.ReadFile("../internal/script/" + name)
		if err != nil {
			b.Fatal(err)
		}
		return string(src)
	}
	acq, rel := load(read("acquire.lua")), load(read("release.lua"))
	return func(ctx context.Context, c redis.Cmdable, k string) error {
		// The KEYS and ARGV that dlock sends for an Acquire that does not
		// wait yet, and for its Release (see internal/script).
		err := c.EvalSha(ctx, acq, []string{k, k + ":fence", k + ":waiters", k + ":wexp", k + ":meta", k + ":limit", k + ":dead", k + ":writers"},
			"tok", 30000, 60000, "", "1").Err()
		if err != nil {
			return err
		}
		return c.EvalSha(ctx, rel, []string{k, k + ":waiters", k + ":wexp", k + ":meta", k + ":limit", k + ":dead", k + ":fence", k + ":writers"},
			"tok", "dlock:inbox:", 0, "", "1", "0", "1", "0", 60000, "").Err()
	}
}

func benchScripts(b *testing.B, srv Server, scripts, via string, g int) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	pair := loadPair(b, c, scripts)
	var cl redis.Cmdable = c
	if via == "autopipeline" {
		ap, err := c.AutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		defer ap.Close()
		cl = ap
	}
	ctx := context.Background()
	before, err := srv.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.ResetTimer()
	if g == 1 {
		for i := 0; i < b.N; i++ {
			if err := pair(ctx, cl, "bs{"+strconv.Itoa(i)+"}"); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := pair(ctx, cl, "bs{"+strconv.FormatInt(seq.Add(1), 10)+"}"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	after, err := srv.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(after.Usec-before.Usec)/float64(b.N), "redis-script-µs/pair")
	b.ReportMetric(float64((after.CPU-before.CPU).Microseconds())/float64(b.N), "redis-cpu-µs/pair")
	_ = c.FlushAll(ctx)
}
