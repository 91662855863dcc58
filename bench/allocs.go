package bench

import (
	"context"
	"testing"
)

// AllocResult is the allocations of one Acquire+Release.
type AllocResult struct {
	Lib         string
	Nodes       int
	AllocsPerOp int64
	BytesPerOp  int64
	NsPerOp     int64
	N           int
}

// BenchAcquireRelease is a testing.B body: one process acquires and releases
// one key b.N times.
func BenchAcquireRelease(b *testing.B, lib Library, addrs []string) {
	p, err := lib.New(addrs, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	key := freshKey("alloc")
	// Warm up: connections, scripts loaded.
	for i := 0; i < 10; i++ {
		h, err := p.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	failed := 0
	for i := 0; i < b.N; i++ {
		h, err := p.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		// A release not confirmed in time (a stall on a loaded machine) is
		// counted, not fatal.
		if err := h.Unlock(ctx); err != nil {
			failed++
		}
	}
	b.ReportMetric(float64(failed)/float64(b.N), "release-errors/op")
}

// Allocs measures BenchAcquireRelease with testing.Benchmark (the test
// flags, such as -test.benchtime, apply once testing.Init has run).
func Allocs(lib Library, addrs []string) AllocResult {
	r := testing.Benchmark(func(b *testing.B) { BenchAcquireRelease(b, lib, addrs) })
	return AllocResult{Lib: lib.Name, Nodes: len(addrs), AllocsPerOp: r.AllocsPerOp(),
		BytesPerOp: r.AllocedBytesPerOp(), NsPerOp: r.NsPerOp(), N: r.N}
}
