package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
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
		if n := fmt.Sprint(a[1]); n == s.SHA() || n == s.Source() {
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

// TestLateAnswerAfterCallerCancelled: on clients that apply context
// cancellations to reads (the other client families, through node.Client;
// go-redis' ContextTimeoutEnabled clients, whose calls go through dlock's
// batchers), an acquisition decided without a slow node, whose caller
// cancels its context as soon as Acquire returns (defer cancel()), still
// learns the slow node's answer: the command was sent and runs. Before, on
// the other families, the cancellation cut the answer short, the node's
// effect stayed unknown, every Release waited a tenth of its timeout for it
// and a clean-up followed (a Redlock of five on rueidis released in 22ms
// instead of about 3, and handed a contended lock over at a third of go-redis'
// rate).
func TestLateAnswerAfterCallerCancelled(t *testing.T) {
	for _, family := range []bool{false, true} {
		t.Run(fmt.Sprintf("family=%v", family), func(t *testing.T) {
			servers := dlocktest.StartN(t, 5)
			proxy, err := dlocktest.NewProxy(servers[4].Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			var clients []redis.UniversalClient
			var ncs []node.Client
			for i, s := range servers {
				addr := s.Addr()
				if i == 4 {
					addr = proxy.Addr()
				}
				c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				clients = append(clients, c)
				ncs = append(ncs, ctxFamily{c, addr})
			}
			var l *Locker
			if family {
				l, err = newFamilyLocker(ncs, nil)
			} else {
				l, err = NewRedlock(clients)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			lateAnswerAfterCancel(t, l, proxy)
		})
	}
}

// ctxFamily is a go-redis client as another client family's node.Client
// whose calls return as soon as their context ends, as rueidis' do (the
// command runs all the same).
type ctxFamily struct {
	c    *redis.Client
	addr string
}

func (f ctxFamily) Conn() node.Conn            { return abortingConn{quorum.NewConn(f.c)} }
func (f ctxFamily) NewPubSub() node.PubSub     { return quorum.NewNode(f.c, f.addr).NewPubSub() }
func (f ctxFamily) Describe() node.Description { return node.Description{Addr: f.addr} }

// abortingConn's calls return ctx's error as soon as ctx ends.
type abortingConn struct{ node.Conn }

func (c abortingConn) Do(ctx context.Context, args ...any) (any, error) {
	r := abortable(ctx, func(ctx context.Context) node.Result {
		v, err := c.Conn.Do(ctx, args...)
		return node.Result{Val: v, Err: err}
	}, func(err error) node.Result { return node.Result{Err: err} })
	return r.Val, r.Err
}

func (c abortingConn) DoMulti(ctx context.Context, cmds ...[]any) []node.Result {
	return abortable(ctx, func(ctx context.Context) []node.Result { return c.Conn.DoMulti(ctx, cmds...) },
		func(err error) []node.Result {
			rs := make([]node.Result, len(cmds))
			for i := range rs {
				rs[i].Err = err
			}
			return rs
		})
}

func (c abortingConn) DoWait(ctx context.Context, args []any, replicas int, timeoutMS int64) (cmd, wait node.Result) {
	rs := abortable(ctx, func(ctx context.Context) [2]node.Result {
		cmd, wait := c.Conn.DoWait(ctx, args, replicas, timeoutMS)
		return [2]node.Result{cmd, wait}
	}, func(err error) [2]node.Result { return [2]node.Result{{Err: err}, {Err: err}} })
	return rs[0], rs[1]
}

// abortable runs f (on a context that ctx's cancellation does not reach)
// and returns its result, or aborted(ctx's error) as soon as ctx ends.
func abortable[T any](ctx context.Context, f func(context.Context) T, aborted func(error) T) T {
	done := make(chan T, 1)
	go func() { done <- f(context.WithoutCancel(ctx)) }()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		return aborted(ctx.Err())
	}
}

func lateAnswerAfterCancel(t *testing.T, l *Locker, proxy *dlocktest.Proxy) {
	warm, err := l.Acquire(context.Background(), "late-cancel") // scripts loaded, connections made
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	k, err := l.Acquire(ctx, "late-cancel")
	cancel() // as soon as Acquire returns
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	unknown := k.nodes[4].unknown
	k.mu.Unlock()
	if unknown != 1 {
		t.Skipf("the acquisition waited for the slow node (unknown %d)", unknown)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		k.mu.Lock()
		unknown, mayHold := k.nodes[4].unknown, k.nodes[4].mayHold
		k.mu.Unlock()
		if unknown == 0 {
			if !mayHold {
				t.Errorf("the slow node's late answer did not record that it may hold the key")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow node's answer was never learnt: its effect is still unknown after the caller cancelled its context")
		}
		time.Sleep(5 * time.Millisecond)
	}
	proxy.SetLatency(0)
	if err := k.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
