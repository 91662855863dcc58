package dlock

import (
	"context"
	"testing"
	"time"
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
