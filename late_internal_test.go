package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

// dropRelease fails the first release.lua call armed for, without sending it
// (as a connection that broke before the command was written).
type dropRelease struct{ armed atomic.Bool }

func (h *dropRelease) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *dropRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *dropRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && (a[1] == releaseScript.sha || a[1] == releaseScript.src) && h.armed.CompareAndSwap(true, false) {
			err := errors.New("test: connection broken before the release was written")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestLateSetDuringReleaseCleanedUp: a late acquisition answer that arrives
// while Release waits for it (awaitAnswers), followed by a release that fails
// on that node, still has the node cleaned up (found by a review: the key was
// left for a whole TTL).
func TestLateSetDuringReleaseCleanedUp(t *testing.T) {
	servers := dlocktest.StartN(t, 5)
	proxy, err := dlocktest.NewProxy(servers[4].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	var clients []redis.UniversalClient
	for _, s := range servers[:4] {
		c := s.Client()
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = slow.Close() })
	drop := &dropRelease{}
	slow.AddHook(drop)
	clients = append(clients, slow)
	l, err := NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := l.Acquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, l, 4)

	proxy.SetLatency(30 * time.Millisecond)
	k, err = l.Acquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	unknown := k.nodes[4].unknown
	k.mu.Unlock()
	if unknown != 1 {
		t.Skipf("the acquisition waited for the slow node (unknown %d)", unknown)
	}
	drop.armed.Store(true)
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if drop.armed.Load() {
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
