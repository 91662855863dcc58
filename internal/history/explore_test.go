package history

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestExplore runs the explorer on go-redis clients: every public call at
// random and at once, under command-level and server faults, on one Redis,
// Redlocks of 3 and 5 masters and a Cluster, 5s each unless
// $DLOCK_EXPLORE_DURATION says otherwise (make verify); then go-redis with
// its default options behind proxies that reset connections and hold
// copies back (its own retries), on one Redis and a Redlock of 3, 4s each.
func TestExplore(t *testing.T) {
	t.Run("go-redis", func(t *testing.T) {
		Explore{Family: GoRedisFamily, Duration: 5 * time.Second}.Run(t)
	})
	t.Run("go-redis behind proxies", func(t *testing.T) {
		Explore{Family: GoRedisProxyFamily, Duration: 4 * time.Second, Topologies: Topologies[:2]}.Run(t)
	})
}

// TestExploreSabotage: each defect of Sabotages, planted in the library's
// scripts (or, for Close, by the harness), is reported by one of the
// checks named for it, in a run of 4s on one Redis (9s for the fence's
// clock floor, which only a restart shows; up to three runs, each with a
// seed of its own: most take one), all five at once.
func TestExploreSabotage(t *testing.T) {
	var names []string
	for name := range Sabotages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want := Sabotages[name].Checks
			var runs []string
			d := 4 * time.Second
			if name == "fence without the clock floor" {
				// Only a restart empty shows it (fences counted from 1
				// again), and a restart waits for the longest TTL, 5s:
				// the run goes on after it.
				d = 9 * time.Second
			}
			for range 3 {
				var got Result
				Explore{Family: GoRedisFamily, Duration: d, Topologies: Topologies[:1], Sabotage: name,
					Report: func(r Result) { got = r }}.Run(t)
				for _, v := range got.Violations {
					if slices.Contains(want, v.Check) {
						t.Logf("reported: %s at %s: %s", v.Check, v.At.Round(time.Millisecond), v.Message)
						return
					}
				}
				runs = append(runs, got.Summary())
			}
			t.Errorf("sabotage %q: none of %q reported in %d runs:\n%s", name, want, len(runs), strings.Join(runs, "\n"))
		})
	}
}
