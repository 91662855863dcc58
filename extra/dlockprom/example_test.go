package dlockprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/extra/dlockprom"
)

func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	// The lines to write: a Collector, registered with a registry
	// (prometheus.MustRegister for the default one, that promhttp.Handler
	// serves), and installed as the Locker's hook.
	metrics := dlockprom.New()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)
	locker := dlock.New(client, dlock.WithHook(metrics))
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Acquire(ctx, "report")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = locker.TryAcquire(ctx, "report") // held: counted as busy
	fmt.Println(err != nil)
	_ = lock.Release(ctx)

	// What a scrape of the registry (promhttp.HandlerFor) shows, in part.
	families, _ := registry.Gather()
	var text strings.Builder
	for _, mf := range families {
		_, _ = expfmt.MetricFamilyToText(&text, mf)
	}
	for _, line := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(line, "dlock_acquisitions_total{result=\"acquired\"}") ||
			strings.HasPrefix(line, "dlock_acquisitions_total{result=\"busy\"}") ||
			strings.HasPrefix(line, "dlock_held_seconds_count") ||
			strings.HasPrefix(line, "dlock_acquisitions_in_progress") {
			fmt.Println(line)
		}
	}
	// Output:
	// true
	// dlock_acquisitions_in_progress 0
	// dlock_acquisitions_total{result="acquired"} 1
	// dlock_acquisitions_total{result="busy"} 1
	// dlock_held_seconds_count{outcome="released"} 1
}
