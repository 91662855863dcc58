package dlockotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/extra/dlockotel"
)

func Example() {
	// A program sets up its OpenTelemetry SDK and calls dlockotel.New()
	// with no options: the hook then uses the global providers. Here
	// in-memory ones show what the hook records.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	hook, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client, dlock.WithHook(hook))
	defer locker.Close()

	ctx := context.Background()
	err = locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		return nil // the work, under the lock
	})
	if err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == dlockotel.KeyKey || kv.Key == dlockotel.KeyResult {
				fmt.Printf("%s %s=%s\n", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "dlock.acquisitions" {
			for _, p := range sum.DataPoints {
				result, _ := p.Attributes.Value(dlockotel.KeyResult)
				fmt.Printf("%s{%s=%s} %d\n", m.Name, dlockotel.KeyResult, result.Emit(), p.Value)
			}
		}
	}
	// Output:
	// dlock.acquire dlock.key=nightly-report
	// dlock.acquire dlock.result=acquired
	// dlock.acquisitions{dlock.result=acquired} 1
}
