package dlock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestServerTimeInScript backs docs/operations.md (Supported servers): what
// TIME answers inside a script differs between the servers tested. Redis
// 7.0 answers the time of the call; Valkey 8 and Redis 8 the time the
// script began, at every call (as their keys' expiry does), so that a
// script that loops on TIME never ends. dlock's scripts take TIME as the
// script's instant, which both give: each TIME of a script is at least the
// time it began, and the next script's is later.
func TestServerTimeInScript(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	// About 10ms of work between two TIMEs of one script.
	const spin = `local a = redis.call('TIME'); local x = 0
for i = 1, 1000000 do x = x + i end
local b = redis.call('TIME')
return {a[1] * 1000000 + a[2], b[1] * 1000000 + b[2]}`
	first, err := c.Eval(ctx, spin, nil).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	next, err := c.Eval(ctx, spin, nil).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if first[1] < first[0] || next[0] <= first[1] {
		t.Errorf("TIME in scripts: %v, then %v: not a script's instant", first, next)
	}
	info := c.Info(ctx, "server").Val()
	frozen := strings.Contains(info, "server_name:valkey") || !strings.Contains(info, "redis_version:7.")
	if got := first[1] == first[0]; got != frozen {
		t.Errorf("TIME twice in one script, 10ms apart: %v (equal: %v); the docs say equal on Valkey 8 and Redis 8, later on Redis 7.0", first, got)
	}
	t.Logf("TIME twice in one script: %d µs apart", first[1]-first[0])
}
