package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/script"
)

// releaseHook counts the release.lua calls a client sends, and fails the
// first one after drop is set without sending it (as a connection that broke
// before the command was written).
type releaseHook struct {
	n    atomic.Int64
	drop atomic.Bool
}

func isRelease(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	for _, s := range []*script.Script{script.Release, script.Unlock} {
		if a[1] == s.SHA() || a[1] == s.Source() {
			return true
		}
	}
	return false
}

func (h *releaseHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *releaseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isRelease(c) {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
func (h *releaseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isRelease(cmd) {
			return next(ctx, cmd)
		}
		if h.drop.CompareAndSwap(true, false) {
			err := errors.New("test: connection broken before the release was written")
			cmd.SetErr(err)
			return err
		}
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

// TestReleaseAwaitsPendingAnswers: on a quorum, a Release right after an
// Acquire that decided without a slow node waits for that node's answer and
// then releases it once, instead of releasing at once and cleaning the node
// up again in the background; the key is gone from every node.
func TestReleaseAwaitsPendingAnswers(t *testing.T) {
	counter := &releaseHook{}
	l, servers, proxy := slowFifthNode(t, "pending", counter)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := counter.n.Load()

	proxy.SetLatency(30 * time.Millisecond)
	k, err := l.Acquire(ctx, "pending")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, l, 4)
	if n := counter.n.Load() - before; n != 1 {
		t.Errorf("the slow node got %d releases, want 1", n)
	}
	for i, s := range servers {
		if n, err := s.Client().Exists(ctx, "dlock:{pending}").Result(); err != nil || n != 0 {
			t.Errorf("node %d: key left (%d, %v)", i, n, err)
		}
	}
}

// slowFifthNode returns a Locker on five nodes, the fifth behind a proxy and
// with hook on its client, after one acquisition and release of key (the
// scripts loaded everywhere, so that the slow node's first command is not a
// NOSCRIPT round trip more) and once the fifth node's cleaner is idle.
func slowFifthNode(t *testing.T, key string, hook redis.Hook) (*Locker, []*dlocktest.Server, *dlocktest.Proxy) {
	t.Helper()
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
	slow.AddHook(hook)
	clients = append(clients, slow)
	l, err := NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, l, 4)
	return l, servers, proxy
}

// waitIdle waits until node i's cleaner has nothing to do.
func waitIdle(t *testing.T, l *Locker, i int) {
	t.Helper()
	c := l.cleaners[i]
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c.Idle() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the cleaner is still busy")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
