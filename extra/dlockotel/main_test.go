package dlockotel_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockotel"
)

func TestMain(m *testing.M) {
	// The Examples' Redis, at the address they name.
	os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379"))
}

// env is a hook on an in-memory span recorder and a manual metric reader.
type env struct {
	t      *testing.T
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	hook   *dlockotel.Hook
}

func newEnv(t *testing.T, opts ...dlockotel.Option) *env {
	t.Helper()
	e := &env{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() {
		_ = e.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	h, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithTracerProvider(e.tp), dlockotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.hook = h
	return e
}

// locker returns a Locker on c with the hook (and opts), closed in the
// test's Cleanup.
func (e *env) locker(c redis.UniversalClient, opts ...dlock.Option) *dlock.Locker {
	e.t.Helper()
	l := dlock.New(c, append([]dlock.Option{dlock.WithHook(e.hook)}, opts...)...)
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// ended returns the ended spans named name.
func (e *env) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span named name, failing the test otherwise.
func (e *env) one(name string) sdktrace.ReadOnlySpan {
	e.t.Helper()
	ss := e.ended(name)
	if len(ss) != 1 {
		e.t.Fatalf("%d ended %q spans, want 1 (all: %v)", len(ss), name, spanNames(e.spans.Ended()))
	}
	return ss[0]
}

func spanNames(ss []sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, s := range ss {
		names = append(names, s.Name())
	}
	return names
}

// metrics collects the metrics.
func (e *env) metrics() metrics {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	m := metrics{t: e.t, byName: map[string]metricdata.Metrics{}}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName {
			e.t.Errorf("scope %q, want %q", sm.Scope.Name, dlockotel.ScopeName)
		}
		for _, mm := range sm.Metrics {
			m.byName[mm.Name] = mm
		}
	}
	return m
}

type metrics struct {
	t      *testing.T
	byName map[string]metricdata.Metrics
}

// int returns the value of the int64 sum name at the attributes kvs
// exactly (0 when there is no such point).
func (m metrics) int(name string, kvs ...attribute.KeyValue) int64 {
	m.t.Helper()
	mm, ok := m.byName[name]
	if !ok {
		return 0
	}
	sum, ok := mm.Data.(metricdata.Sum[int64])
	if !ok {
		m.t.Fatalf("%s is a %T, want an int64 sum", name, mm.Data)
	}
	want := attribute.NewSet(kvs...)
	for _, p := range sum.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Value
		}
	}
	return 0
}

// hist returns the count and sum of the float64 histogram name at the
// attributes kvs exactly.
func (m metrics) hist(name string, kvs ...attribute.KeyValue) (uint64, float64) {
	m.t.Helper()
	mm, ok := m.byName[name]
	if !ok {
		return 0, 0
	}
	h, ok := mm.Data.(metricdata.Histogram[float64])
	if !ok {
		m.t.Fatalf("%s is a %T, want a float64 histogram", name, mm.Data)
	}
	if mm.Unit != "s" {
		m.t.Errorf("%s: unit %q, want s", name, mm.Unit)
	}
	want := attribute.NewSet(kvs...)
	for _, p := range h.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Count, p.Sum
		}
	}
	return 0, 0
}

// noKey fails the test if a data point carries the lock's key.
func (m metrics) noKey() {
	m.t.Helper()
	for name, mm := range m.byName {
		var sets []attribute.Set
		switch d := mm.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		}
		for _, s := range sets {
			if s.HasValue(dlockotel.KeyKey) {
				m.t.Errorf("metric %s has a data point with the key: %v", name, s.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
}

// attr returns the attribute k of the span (or of the event).
func attr(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every few milliseconds until it holds, failing the
// test after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
