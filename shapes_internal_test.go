package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/script"
)

// TestSharedWriterAheadWhateverItsIntent: a shared waiter queued after a
// writer is refused while that writer's intent is live, however many
// writers queued after the reader have intents that end sooner (the check
// once read only the 16 intents that end first, and let the reader pass a
// writer queued before it).
func TestSharedWriterAheadWhateverItsIntent(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	nm := keys.Make("dlock:", "ahead")
	run := func(token, limit, ttl, member, pos, queued string) []any {
		t.Helper()
		a := script.AcquireArgs{Token: token, TTL: ttl, Retention: "60000", Metadata: "", Limit: limit}
		w := script.Waiter{Member: member, Lease: "180000", Position: pos, Queued: queued, Refresh: "0"}
		return runScript(t, c, script.Acquire, a.WaiterCommand(nm.AcquireKeys(), w)).([]any)
	}
	// A shared holder, then a writer with a long TTL waits behind it.
	if r := run("h", "0", "60000", "H:r1:ahead", "0", "0"); r[0] != int64(1) {
		t.Fatalf("shared holder: %v", r)
	}
	if r := run("w0", "1", "60000", "W0:1:ahead", "0", "0"); r[0] != int64(0) {
		t.Fatalf("writer: %v, want busy", r)
	}
	// A reader queues behind the writer.
	r := run("r", "0", "60000", "R:r1:ahead", "0", "0")
	pos, _ := r[2].(string)
	if r[0] != int64(0) || pos == "" || pos == "0" {
		t.Fatalf("reader: %v, want busy and queued", r)
	}
	// Many writers queue after the reader, with intents that end sooner.
	for i := 1; i <= 40; i++ {
		if r := run(fmt.Sprintf("w%d", i), "1", "5000", fmt.Sprintf("W%d:1:ahead", i), "0", "0"); r[0] != int64(0) {
			t.Fatalf("writer %d: %v, want busy", i, r)
		}
	}
	// The reader tries again: the first writer is still ahead of it.
	if r := run("r", "0", "60000", "R:r1:ahead", pos, "1"); r[0] != int64(0) {
		t.Fatalf("the reader passed the writer queued before it: %v", r)
	}
}

// TestPlainLockScripts: lock.lua and unlock.lua, a plain lock's everyday
// scripts, answer as acquire.lua and release.lua do for that shape: a
// grant with a fence, the same fence for a retried command, busy with the
// holder's TTL (-3 for a reservation), a buried token refused, and Other
// (acquire.lua's or release.lua's to answer) for a key of another shape or
// a release with waiters, having written nothing.
func TestPlainLockScripts(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	nm := keys.Make("dlock:", "plain")
	lock := func(token string) []any {
		t.Helper()
		return runScript(t, c, script.Lock, script.LockCommand(nm.LockKeys(), token, "30000", "60000")).([]any)
	}
	unlock := func(token string) int64 {
		t.Helper()
		return runScript(t, c, script.Unlock, script.UnlockCommand(nm.UnlockKeys(), token)).(int64)
	}
	first := lock("a")
	if first[0] != int64(1) {
		t.Fatalf("a free lock: %v", first)
	}
	if again := lock("a"); again[0] != int64(1) || again[1] != first[1] {
		t.Errorf("a retried command: %v, want the fence %v again", again, first[1])
	}
	if r := lock("b"); r[0] != int64(0) || r[1].(int64) <= 0 {
		t.Errorf("a held lock: %v, want busy with its TTL", r)
	}
	if n := unlock("b"); n != 0 {
		t.Errorf("unlock by another: %d", n)
	}
	// A waiter: unlock.lua leaves the release to release.lua.
	c.ZAdd(ctx, nm.Waiters(), redis.Z{Score: 1, Member: "L:1:plain"})
	if n := unlock("a"); n != script.Other || c.Get(ctx, nm.Lock()).Val() != "a" {
		t.Errorf("unlock with a waiter: %d, lock %q; want Other and the lock kept", n, c.Get(ctx, nm.Lock()).Val())
	}
	c.Del(ctx, nm.Waiters())
	if n := unlock("a"); n != 1 || c.Exists(ctx, nm.Lock()).Val() != 0 {
		t.Errorf("unlock: %d", n)
	}
	second := lock("c")
	if second[0] != int64(1) || second[1].(string) <= first[1].(string) {
		t.Errorf("the next holder: %v after %v", second, first)
	}
	unlock("c")
	// A reservation; a buried token; a key of another shape.
	c.Set(ctx, nm.Lock(), "~L:1:plain", time.Minute)
	if r := lock("d"); r[0] != int64(0) || r[1] != int64(-3) {
		t.Errorf("a reservation: %v, want -3", r)
	}
	c.Del(ctx, nm.Lock())
	c.ZAdd(ctx, nm.Dead(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "e"})
	if r := lock("e"); r[0] != int64(0) || r[1] != int64(-4) || c.Exists(ctx, nm.Lock()).Val() != 0 {
		t.Errorf("a buried token: %v, want -4 and nothing written", r)
	}
	c.ZAdd(ctx, nm.Lock(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "p"})
	fence := c.Get(ctx, nm.Fence()).Val()
	if r := lock("f"); r[0] != int64(0) || r[1] != int64(script.Other) || c.Get(ctx, nm.Fence()).Val() != fence {
		t.Errorf("shared holds or permits: %v, want Other and nothing written", r)
	}
	if n := unlock("p"); n != 0 {
		t.Errorf("unlock of a permit's token: %d, want 0", n)
	}
	c.Set(ctx, nm.Fence(), "x", 0)
	if _, err := script.Lock.Run(ctx, c, script.LockCommand(nm.LockKeys(), "g", "30000", "60000")); err == nil {
		t.Error("a counter that is no integer: no error")
	}
}

// runScript runs the command args of s on c, failing the test on an error.
func runScript(t *testing.T, c *redis.Client, s *script.Script, args []any) any {
	t.Helper()
	v, err := s.Run(context.Background(), c, args)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
