package quorum

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/node"
)

// countingHook counts the commands and pipelines that pass it.
type countingHook struct{ cmds, pipelines atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// TestDefaultClientInline: on a default client (ContextTimeoutEnabled
// false), a node's short calls run inline with every go-redis version that
// the module supports (go.mod's, and the newest in go.redis-latest.mod,
// whose WithTimeout copies have no hooks: hookedCopy), every command and
// pipeline passes the client's hooks once, and a call to a frozen server
// ends at its timeout, inline.
func TestDefaultClientInline(t *testing.T) {
	if !DefaultClientsInline() {
		t.Fatalf("go-redis %s: calls on a default client run on workers", redis.Version())
	}
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	h := &countingHook{}
	c.AddHook(h)
	n := NewNode(c, s.Addr())
	defer n.Close()
	const timeout = 300 * time.Millisecond
	ping := func(ctx context.Context) (any, error, bool, bool) {
		return Call(ctx, n, timeout, func(ctx context.Context, c node.Conn) (any, error) { return c.Do(ctx, "ping") }, nil)
	}
	v, err, answered, inline := ping(context.Background())
	if err != nil || v != "PONG" || !answered || !inline {
		t.Fatalf("ping: %v %v answered %v inline %v", v, err, answered, inline)
	}
	if got := h.cmds.Load(); got != 1 {
		t.Errorf("the hook saw %d commands, want 1", got)
	}
	// Concurrent calls: one goes out at once, the others as pipelines of
	// the node's batcher; every one passes the hook, once.
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err, _, _ := ping(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if cmds, pipes := h.cmds.Load(), h.pipelines.Load(); cmds+pipes < 2 || cmds > 65 {
		t.Errorf("the hook saw %d commands and %d pipelines for 65 calls", cmds, pipes)
	}

	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Thaw() }()
	before := h.cmds.Load()
	start := time.Now()
	_, err, answered, inline = ping(context.Background())
	took := time.Since(start)
	if answered || !inline || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a frozen server: err %v answered %v inline %v", err, answered, inline)
	}
	if took < timeout-timeout/32 || took > timeout+time.Second { // a loaded machine adds some
		t.Errorf("a call to a frozen server returned after %v, its timeout %v", took, timeout)
	}
	if h.cmds.Load() != before+1 {
		t.Errorf("the hook saw %d commands of the frozen call, want 1", h.cmds.Load()-before)
	}
}
