package dlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

// callsOf returns the calls of each command the server ran since its last
// CONFIG RESETSTAT (those inside scripts included), by lower-case name.
func callsOf(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	stats, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		var n int64
		fmt.Sscanf(rest, "%d", &n)
		m[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return m
}

// TestWokenGrantCommands: the grant of a plain lock's waiter that a release
// woke (which popped its registration) removes only its lease: no ZREM of
// the waiting set, none of the writers' intents (it wrote none), and
// nothing of the waiter is left on the server. A writer that wrote an
// intent (it waited for shared holds) still has it removed by its grant.
func TestWokenGrantCommands(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holderC, waiterC := s.Client(), s.Client()
	defer holderC.Close()
	defer waiterC.Close()
	holder, waiter := New(holderC), New(waiterC)
	defer holder.Close()
	defer waiter.Close()

	for _, tc := range []struct {
		name   string
		first  []LockOption // the holder's
		zrem   int64        // ZREM calls the release and the grant may run: a shared hold's release removes its permit, a writer's grant its entry and its intent
		intent bool
	}{
		{name: "plain", first: nil, zrem: 0},
		{name: "after shared holds", first: []LockOption{WithShared()}, zrem: 3, intent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "woken-" + strings.ReplaceAll(tc.name, " ", "-")
			h, err := holder.Acquire(ctx, key, tc.first...)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			var k *Lock
			go func() {
				var err error
				k, err = waiter.Acquire(ctx, key)
				got <- err
			}()
			waitUntil(t, func() bool { return admin.ZCard(ctx, "dlock:{"+key+"}:waiters").Val() == 1 })
			if tc.intent {
				waitUntil(t, func() bool { return admin.ZCard(ctx, "dlock:{"+key+"}:writers").Val() == 1 })
			}
			before := callsOf(t, admin)
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			after := callsOf(t, admin)
			if n := after["zrem"] - before["zrem"]; n > tc.zrem {
				t.Errorf("the release and the woken grant ran ZREM %d times, want at most %d", n, tc.zrem)
			}
			for _, suffix := range []string{":waiters", ":wexp", ":writers"} {
				if n := admin.Exists(ctx, "dlock:{"+key+"}"+suffix).Val(); n != 0 {
					vals, _ := admin.Do(ctx, "DUMP", "dlock:{"+key+"}"+suffix).Result()
					t.Errorf("%s left after the grant (%v)", suffix, vals != nil)
				}
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitUntil waits for cond, checked every few milliseconds, for 10s at most.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
