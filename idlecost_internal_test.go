package dlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// commandsRun is the number of commands the server ran since CONFIG
// RESETSTAT, those inside scripts included, less the INFO that asks.
func commandsRun(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	stats, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" || strings.HasPrefix(name, "cmdstat_config") {
			continue
		}
		var n int64
		fmt.Sscanf(rest, "%d", &n)
		total += n
	}
	return total
}

// TestIdleWaiterAttemptCost: the attempt of a registered waiter of a plain
// lock that another holds (its fallback wake-up, what an idle waiter costs)
// runs 5 commands in Redis, EVALSHA included; the tombstone check it skips
// still refuses a buried token wherever the attempt would write: a
// registration to write again, a free lock.
func TestIdleWaiterAttemptCost(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	nm := keys.Make("dlock:", "cost")
	run := func(token, pos string) []any {
		t.Helper()
		a := script.AcquireArgs{Token: token, TTL: "30000", Retention: "60000", Metadata: "", Limit: "1"}
		w := script.Waiter{Member: "L:1:cost", Lease: "180000", Position: pos, Queued: "1", Refresh: "0"}
		v, err := script.Acquire.Run(ctx, quorum.NewConn(c), a.WaiterCommand(nm.AcquireKeys(), w))
		if err != nil {
			t.Fatal(err)
		}
		return v.([]any)
	}
	if err := c.Set(ctx, nm.Lock(), "holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	first := run("t1", "0")
	pos, _ := first[2].(string)
	if first[0] != int64(0) || pos == "0" || pos == "" {
		t.Fatalf("first attempt: %v, want busy and registered", first)
	}
	c.ConfigResetStat(ctx)
	if r := run("t2", pos); r[0] != int64(0) || r[1].(int64) <= 0 {
		t.Fatalf("idle attempt: %v, want busy with the holder's PTTL", r)
	}
	if n := commandsRun(t, c); n > 5 {
		t.Errorf("an idle waiter's attempt ran %d commands, want at most 5", n)
	}
	// A waiter with metadata (shown by Status) costs no more: the
	// metadata is written with the registration, in its HSET.
	meta := func(token, pos string) []any {
		t.Helper()
		a := script.AcquireArgs{Token: token, TTL: "30000", Retention: "60000", Metadata: "host-b", Limit: "1"}
		w := script.Waiter{Member: "L:2:cost", Lease: "180000", Position: pos, Queued: "1", Refresh: "0"}
		v, err := script.Acquire.Run(ctx, quorum.NewConn(c), a.WaiterCommand(nm.AcquireKeys(), w))
		if err != nil {
			t.Fatal(err)
		}
		return v.([]any)
	}
	c.ConfigResetStat(ctx)
	mpos, _ := meta("t5", "0")[2].(string)
	if n := commandsRun(t, c); n > 9 {
		t.Errorf("the first attempt of a waiter with metadata ran %d commands, want at most 9", n)
	}
	if got := c.HGet(ctx, nm.Leases(), "m:L:2:cost").Val(); got != "host-b" {
		t.Errorf("the registration's metadata: %q, want host-b", got)
	}
	c.ConfigResetStat(ctx)
	if r := meta("t5", mpos); r[0] != int64(0) || r[1].(int64) <= 0 {
		t.Fatalf("idle attempt with metadata: %v, want busy with the holder's PTTL", r)
	}
	if n := commandsRun(t, c); n > 5 {
		t.Errorf("an idle waiter's attempt with metadata ran %d commands, want at most 5", n)
	}

	// A buried token: refused where the attempt would write.
	bury := func(token string) {
		if err := c.ZAdd(ctx, nm.Dead(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: token}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bury("t3")
	c.ZRem(ctx, nm.Waiters(), "L:1:cost")
	c.HDel(ctx, nm.Leases(), "L:1:cost")
	if r := run("t3", pos); r[1] != int64(-4) {
		t.Errorf("a buried token whose registration vanished: %v, want refused (-4)", r)
	}
	if c.ZScore(ctx, nm.Waiters(), "L:1:cost").Err() != redis.Nil {
		t.Error("a buried token registered the waiter again")
	}
	c.Del(ctx, nm.Lock())
	bury("t4")
	if r := run("t4", pos); r[1] != int64(-4) {
		t.Errorf("a buried token on a free lock: %v, want refused (-4)", r)
	}
	if n := c.Exists(ctx, nm.Lock()).Val(); n != 0 {
		t.Error("a buried token took the lock")
	}
}
