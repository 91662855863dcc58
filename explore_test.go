package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/history"
)

// TestExplore runs the explorer (internal/history, explore.go) on go-redis
// clients: every public call at random and at once, under command-level
// and server faults, on one Redis, Redlocks of 3 and 5 masters and a
// Cluster, 6s each unless $DLOCK_EXPLORE_DURATION says otherwise (make
// verify); then go-redis with its default options behind proxies that reset
// connections and hold copies back (its own retries), on one Redis and a
// Redlock of 3.
func TestExplore(t *testing.T) {
	t.Parallel()
	history.Explore{Family: history.GoRedisFamily, Duration: 6 * time.Second}.Run(t)
	history.Explore{Family: history.GoRedisProxyFamily, Duration: 6 * time.Second,
		Topologies: history.Topologies[:2]}.Run(t)
}
