package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A bounded copy with the client's hooks, where go-redis' WithTimeout copy
// has none (v9.23): the client's own hooks run, then the command is sent
// through the copy, on the caller's goroutine.
//
// c.Conn() makes a *redis.Conn that runs the hooks c has then (a copy of
// its hook chain, as WithTimeout's copy made one before v9.23), and whose
// own hooks, added to the Conn alone, run innermost, after the client's.
// dlock adds one, divertHook, which sends the command through the
// WithTimeout copy (the same connection pool, the timeout as its socket
// deadlines, no hooks) instead of the Conn's connection. So the command
// passes every hook of the client once, and is bounded as the copy's
// commands are, without a goroutine; the Conn never takes a connection
// of its own, and nothing is added to the caller's client. As with the
// copies that keep hooks, hooks added to the client after the first call
// with a timeout are not seen (docs/operations.md says: add hooks before
// dlock.New).

// hookedCopy is the WithTimeout copy of a client whose Process and
// pipelines go through the client's hooks first (conn, with divertHook
// innermost); its other methods are the copy's.
type hookedCopy struct {
	redis.UniversalClient // the WithTimeout copy
	conn                  *redis.Conn
}

// newHookedCopy returns c's copy with timeout, run through c's hooks.
func newHookedCopy(c *redis.Client, timeout time.Duration) *hookedCopy {
	cp := c.WithTimeout(timeout)
	conn := c.Conn()
	conn.AddHook(divertHook{to: cp})
	return &hookedCopy{UniversalClient: cp, conn: conn}
}

func (h *hookedCopy) Process(ctx context.Context, cmd redis.Cmder) error {
	return h.conn.Process(ctx, cmd)
}

func (h *hookedCopy) Pipeline() redis.Pipeliner { return h.conn.Pipeline() }

func (h *hookedCopy) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return h.conn.Pipelined(ctx, fn)
}

// divertHook, the innermost hook of a hookedCopy's Conn, sends what reaches
// it through the copy (to) instead of the Conn's connection.
type divertHook struct{ to *redis.Client }

func (divertHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h divertHook) ProcessHook(redis.ProcessHook) redis.ProcessHook { return h.to.Process }

func (h divertHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		pipe := h.to.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
}

// connsDivert reports whether the go-redis version in use runs a Conn's
// hooks as hookedCopy needs: the client's hooks first, then the Conn's own,
// for single commands and pipelines. Found out once, without a network, as
// withTimeoutKeepsHooks.
var connsDivert = sync.OnceValue(probeConnsDivert)

func probeConnsDivert() bool {
	c := probeClient()
	defer c.Close()
	var seen, seenPipe atomic.Bool
	c.AddHook(probeHook{seen: &seen, pipeline: &seenPipe})
	conn := c.Conn()
	var diverted, divertedPipe atomic.Bool
	conn.AddHook(probeDivert{&diverted, &divertedPipe})
	ctx := context.Background()
	_ = conn.Process(ctx, redis.NewCmd(ctx, "ping"))
	_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Process(ctx, redis.NewCmd(ctx, "ping")) })
	return seen.Load() && diverted.Load() && seenPipe.Load() && divertedPipe.Load()
}

// probeDivert records what reaches it, and sends nothing.
type probeDivert struct{ seen, pipeline *atomic.Bool }

func (probeDivert) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h probeDivert) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(context.Context, redis.Cmder) error { h.seen.Store(true); return nil }
}
func (h probeDivert) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { h.pipeline.Store(true); return nil }
}
