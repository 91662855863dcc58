package history

import (
	"testing"
	"time"
)

// TestExplore runs the explorer on go-redis clients: every public call at
// random and at once, under command-level and server faults, on one Redis,
// Redlocks of 3 and 5 masters and a Cluster, 6s each unless
// $DLOCK_EXPLORE_DURATION says otherwise (make verify); then go-redis with
// its default options behind proxies that reset connections and hold
// copies back (its own retries), on one Redis and a Redlock of 3.
func TestExplore(t *testing.T) {
	t.Run("go-redis", func(t *testing.T) {
		Explore{Family: GoRedisFamily, Duration: 6 * time.Second}.Run(t)
	})
	t.Run("go-redis behind proxies", func(t *testing.T) {
		Explore{Family: GoRedisProxyFamily, Duration: 6 * time.Second, Topologies: Topologies[:2]}.Run(t)
	})
}
