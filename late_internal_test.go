package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// TestLateSetDuringReleaseCleanedUp: a late acquisition answer that arrives
// while Release waits for it (awaitAnswers), followed by a release that fails
// on that node, still has the node cleaned up (found by a review: the key was
// left for a whole TTL).
func TestLateSetDuringReleaseCleanedUp(t *testing.T) {
	drop := &releaseHook{}
	l, servers, proxy := slowFifthNode(t, "late", drop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	proxy.SetLatency(30 * time.Millisecond)
	k, err := l.Acquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	unknown := k.nodes[4].unknown
	k.mu.Unlock()
	if unknown != 1 {
		t.Skipf("the acquisition waited for the slow node (unknown %d)", unknown)
	}
	drop.drop.Store(true)
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if drop.drop.Load() {
		t.Fatal("no release went to the slow node")
	}
	time.Sleep(200 * time.Millisecond)
	waitIdle(t, l, 4)
	proxy.SetLatency(0)
	n, err := servers[4].Client().Exists(ctx, "dlock:{late}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		pttl, _ := servers[4].Client().PTTL(ctx, "dlock:{late}").Result()
		t.Errorf("the key was left on node 4 (PTTL %v) and no clean-up was scheduled", pttl)
	}
}

// An older server's refusal of a script names the version dlock needs.
func TestVersionBelow(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		below bool
	}{
		{"4.0.14", MinRedisVersion, true}, {"5.0.0", MinRedisVersion, false}, {"7.0.15", MinRedisVersion, false},
		{"6.2", "6.2.0", false}, {"6.0.20", "6.2.0", true}, {"10.0.0", "9.9.9", false},
	} {
		if got := versionBelow(tc.a, tc.b); got != tc.below {
			t.Errorf("versionBelow(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
	if v := serverVersion("# Server\r\nredis_version:4.0.14\r\nredis_mode:standalone\r\n"); v != "4.0.14" {
		t.Errorf("serverVersion: %q", v)
	}
	// How a real server refuses a script that calls a command it does not
	// know (as Redis 4 does ZPOPMIN), and that the version is then asked.
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	err := c.Eval(context.Background(), "return redis.call('NOSUCHCOMMAND')", nil).Err()
	if !olderServer(err) {
		t.Errorf("%v: not recognised as an older server's refusal", err)
	}
	if got := versionError(context.Background(), quorum.NewConn(c), err); got != err {
		t.Errorf("versionError on Redis %s: %v", serverVersion(c.Info(context.Background(), "server").Val()), got)
	}
}
