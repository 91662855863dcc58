package dlock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
)

// TestListScale: List on a keyspace of many unrelated keys and many locks,
// on one Redis and on a Cluster of 3 masters, counts the commands each
// server ran and the time, and checks the bounds: SCANs of COUNT 1000
// (about one per 1,000 keys of each server), and the reads of the locks
// found in pipelines; no KEYS; every lock listed. make test runs it on
// 100,000 keys and 1,000 locks; DLOCK_LIST_KEYS and DLOCK_LIST_LOCKS set
// the sizes (the measurement in docs/operations.md: 1,000,000 and 10,000).
func TestListScale(t *testing.T) {
	t.Parallel()
	keys, locks := envInt(t, "DLOCK_LIST_KEYS", 100_000), envInt(t, "DLOCK_LIST_LOCKS", 1_000)
	t.Run("one Redis", func(t *testing.T) {
		s := dlocktest.Start(t)
		admin := s.Client()
		defer admin.Close()
		listScale(t, keys, locks, []*redis.Client{admin}, newLocker(t, s.Client(), dlock.WithPrefix("scale:")))
	})
	t.Run("Cluster of 3", func(t *testing.T) {
		cl := dlocktest.StartCluster(t, 3)
		cc := cl.Client()
		defer cc.Close()
		var admins []*redis.Client
		for _, s := range cl.Servers {
			c := s.Client()
			defer c.Close()
			admins = append(admins, c)
		}
		listScale(t, keys, locks, admins, newLocker(t, cc, dlock.WithPrefix("scale:")))
	})
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("$%s: %v", name, err)
	}
	return n
}

// listScale fills the servers of admins (the masters of l's deployment)
// with keys unrelated keys (each key on the server of its slot), takes
// locks locks with l, and lists them.
func listScale(t *testing.T, keys, locks int, admins []*redis.Client, l *dlock.Locker) {
	ctx := context.Background()
	fill(t, keys, admins)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < locks; i += 16 {
				_, err := l.TryAcquire(ctx, fmt.Sprintf("job/%06d", i), dlock.WithTTL(10*time.Minute), dlock.WithAutoRenew(false),
					dlock.WithMetadata("host-"+strconv.Itoa(i%50)))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, c := range admins {
		n, _ := c.DBSize(ctx).Result()
		total += int(n)
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d keys in all (%d unrelated, %d locks taken in %s)", total, keys, locks, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	got, err := l.List(ctx, "job/*")
	took := time.Since(start)
	if err != nil || len(got) != locks {
		t.Fatalf("List: %d locks, %v; want %d", len(got), err, locks)
	}
	for i, st := range got {
		if want := fmt.Sprintf("job/%06d", i); st.Key != want || !st.Held || st.Metadata != "host-"+strconv.Itoa(i%50) {
			t.Fatalf("lock %d: %+v, want %s held", i, st, want)
		}
	}
	var scans, all int64
	var report []string
	for _, c := range admins {
		stats := commandStats(t, c)
		scans += stats["scan"].calls
		if stats["keys"].calls > 0 {
			t.Errorf("%s ran KEYS", c.Options().Addr)
		}
		var n int64
		var parts []string
		for name, s := range stats {
			n += s.calls
			parts = append(parts, fmt.Sprintf("%s %d (%.1fµs per call)", name, s.calls, s.usecPerCall))
		}
		all += n
		report = append(report, fmt.Sprintf("%s: %d commands: %s", c.Options().Addr, n, strings.Join(parts, ", ")))
	}
	t.Logf("List of %d locks among %d keys: %s, %d commands (%d SCANs)\n%s", locks, total, took.Round(time.Millisecond), all, scans,
		strings.Join(report, "\n"))
	// One SCAN per 1,000 keys of each server, give or take the rehashing
	// (SCAN COUNT is a number of the table's buckets, not of keys).
	if maxScans := int64(total/1000 + 2*len(admins) + total/4000); scans > maxScans {
		t.Errorf("%d SCANs for %d keys, want at most %d (COUNT 1000)", scans, total, maxScans)
	}
}

// fill writes n keys that are not dlock's, 1,000 per MSET, on the server of
// each key's slot (a tag of a slot each server serves).
func fill(t *testing.T, n int, admins []*redis.Client) {
	t.Helper()
	ctx := context.Background()
	tags := make([]string, len(admins))
	for i, c := range admins {
		if len(admins) == 1 {
			break
		}
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if s.Nodes[0].Addr == c.Options().Addr {
				tags[i] = slotTag(s.Start)
			}
		}
	}
	var wg sync.WaitGroup
	for i, c := range admins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per := n / len(admins)
			pipe := c.Pipeline()
			for j := 0; j < per; j += 1000 {
				args := []any{"mset"}
				for k := j; k < min(j+1000, per); k++ {
					args = append(args, fmt.Sprintf("user:{%s}:%d:%d", tags[i], i, k), "v")
				}
				pipe.Do(ctx, args...)
				if pipe.Len() == 50 {
					if _, err := pipe.Exec(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}
			if _, err := pipe.Exec(ctx); err != nil && pipe.Len() > 0 {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// slotTag returns a hash tag of the given slot.
func slotTag(slot int) string {
	for i := 0; ; i++ {
		tag := strconv.Itoa(i)
		if keys.Slot(tag) == slot {
			return tag
		}
	}
}

// cmdStat is a command's INFO commandstats entry.
type cmdStat struct {
	calls       int64
	usecPerCall float64
}

// commandStats returns the server's INFO commandstats, but for INFO and
// CONFIG (the test's own).
func commandStats(t *testing.T, c *redis.Client) map[string]cmdStat {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		name = strings.TrimPrefix(name, "cmdstat_")
		if !ok || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		var s cmdStat
		fmt.Sscanf(rest, "%d", &s.calls)
		if _, per, ok := strings.Cut(rest, "usec_per_call="); ok {
			fmt.Sscanf(per, "%f", &s.usecPerCall)
		}
		out[name] = s
	}
	return out
}
