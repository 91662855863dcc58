package dlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// BenchmarkAcquireRelease measures one uncontended Acquire+Release on one
// Redis and on a five-node Redlock, with default go-redis clients and with
// clients built with ContextTimeoutEnabled (-ctx): run with -benchmem for
// allocs/op and B/op (bench/ compares them with the peers).
func BenchmarkAcquireRelease(b *testing.B) {
	one := dlocktest.Start(b).Addr()
	var redlock []string
	for _, s := range dlocktest.StartN(b, 5) {
		redlock = append(redlock, s.Addr())
	}
	for _, ctxTimeout := range []bool{false, true} {
		suffix := ""
		if ctxTimeout {
			suffix = "-ctx"
		}
		b.Run("single"+suffix, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: one, ContextTimeoutEnabled: ctxTimeout})
			defer c.Close()
			l := dlock.New(c)
			defer l.Close()
			benchAcquireRelease(b, l)
		})
		b.Run("redlock5"+suffix, func(b *testing.B) {
			var clients []redis.UniversalClient
			for _, a := range redlock {
				c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: ctxTimeout})
				defer c.Close()
				clients = append(clients, c)
			}
			l, err := dlock.NewRedlock(clients)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			benchAcquireRelease(b, l)
		})
	}
}

func benchAcquireRelease(b *testing.B, l *dlock.Locker) {
	ctx := context.Background()
	key := fmt.Sprintf("bench-%s", b.Name())
	for i := 0; i < 10; i++ { // connections and scripts warm
		k, err := l.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	failed := 0
	for i := 0; i < b.N; i++ {
		k, err := l.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		// A release that was not confirmed in time (a stall on a loaded
		// machine) is counted, not fatal: the key expires after its TTL.
		if err := k.Release(ctx); err != nil {
			failed++
			b.Log(err)
		}
	}
	b.ReportMetric(float64(failed)/float64(b.N), "release-errors/op")
}

// maxAllocs is the most allocations one uncontended Acquire+Release on one
// Redis may cost (go test without -race; the race detector's sync.Pool drops
// items at random, which costs go-redis a few more).
const maxAllocs = 19

// TestAllocsPerAcquireRelease keeps the everyday path's allocations in
// check, with default clients and with ContextTimeoutEnabled. make test also
// runs it without -race, where the limit is maxAllocs.
func TestAllocsPerAcquireRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	limit := int64(maxAllocs)
	if raceEnabled {
		limit += 4
	}
	one := dlocktest.Start(t).Addr()
	for _, ctxTimeout := range []bool{false, true} {
		c := redis.NewClient(&redis.Options{Addr: one, ContextTimeoutEnabled: ctxTimeout})
		l := dlock.New(c)
		r := testing.Benchmark(func(b *testing.B) { benchAcquireRelease(b, l) })
		_ = l.Close()
		_ = c.Close()
		if r.N == 0 {
			t.Fatal("the benchmark failed")
		}
		limit := limit
		if !ctxTimeout && !dlock.DefaultClientsInline() {
			limit += 6 // calls on a helper goroutine (see New): 3 per call
		}
		if got := r.AllocsPerOp(); got > limit {
			t.Errorf("ContextTimeoutEnabled %v: %d allocations per Acquire+Release, want at most %d", ctxTimeout, got, limit)
		} else {
			t.Logf("ContextTimeoutEnabled %v: %d allocations per Acquire+Release (%d B)", ctxTimeout, got, r.AllocedBytesPerOp())
		}
	}
	// What a hook costs (reported, not checked): the events themselves,
	// without the hook's own work.
	c := redis.NewClient(&redis.Options{Addr: one})
	defer c.Close()
	l := dlock.New(c, dlock.WithHook(nopHook{}))
	defer l.Close()
	r := testing.Benchmark(func(b *testing.B) { benchAcquireRelease(b, l) })
	t.Logf("with a hook that does nothing: %d allocations per Acquire+Release (%d B)", r.AllocsPerOp(), r.AllocedBytesPerOp())
	// What go-redis itself costs (reported, not checked): the floor of a
	// fenced lock (floor_test.go), two scripts by Script.Run on the same
	// client, with nothing around them.
	pair, _ := floorOf(false).new(c)
	ctx := context.Background()
	r = testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := pair(ctx, "allocs"); err != nil {
				b.Fatal(err)
			}
		}
	})
	t.Logf("the floor of a fenced lock on the same client: %d allocations per pair (%d B)", r.AllocsPerOp(), r.AllocedBytesPerOp())
}

type nopHook struct{}

func (nopHook) Start(ctx context.Context, _ string) context.Context { return ctx }
func (nopHook) Event(context.Context, dlock.Event)                  {}

// BenchmarkAcquireReleaseParallel is BenchmarkAcquireRelease's single case
// from 64 goroutines, each on its own key.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c := dlocktest.Start(b).Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	b.ResetTimer() // the server's start out of the measure
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench-parallel-%d", n.Add(1))
		for pb.Next() {
			k, err := l.Acquire(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			_ = k.Release(ctx)
		}
	})
}
