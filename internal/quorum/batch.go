package quorum

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the commands that goroutines issue to one node at the same
// time as pipelines: one write and one read for many commands, instead of a
// round trip each (what rueidis calls auto-pipelining).
//
// A command issued while no other is in flight goes out at once, on the
// caller's goroutine, as with the client itself. One issued while another is
// in flight waits in a queue; once the command in flight has its answer, a
// sender goroutine (started then, gone when the queue is empty) sends what
// queued as one pipeline, then what queued meanwhile, and so on. No caller
// ever sends or waits for another caller's command, so every call stays
// bounded by its own deadline. All commands go out one batch after the
// other: a command sent through a batcher runs after every command sent
// through it before.
//
// A queued caller whose ctx ends stops waiting (when abandon is set): its
// command is taken out of the queue if it was not sent yet (it will never
// run, and its error is ctx's), else its answer is ignored and the command
// may still run, though before any command queued after it. Without abandon
// (calls on workers, whose late answers are handled once they are in) a
// caller waits for its command's answer: the pipeline is bounded by the
// latest deadline of its callers and the client's socket deadlines.
type batcher struct {
	// client returns the client for commands with this timeout: the
	// node's client, or a copy whose socket deadlines are the timeout.
	client  func(timeout time.Duration) redis.UniversalClient
	abandon bool

	mu    sync.Mutex
	busy  bool // a command or pipeline is in flight
	queue []*queued
}

// queued is a command waiting in a batcher's queue. The pipeline sends a
// copy of it, whose answer is copied into cmd unless the caller stopped
// waiting (then cmd is the caller's again).
type queued struct {
	ctx     context.Context
	timeout time.Duration
	cmd     *redis.Cmd
	done    chan struct{} // closed once cmd has its answer (or error)

	// Guarded by the batcher's mu.
	taken     bool // in a pipeline, or dropped: no longer in the queue
	dropped   bool // its ctx had ended when the pipeline was made: not sent
	answered  bool // cmd has the pipeline's answer
	abandoned bool // its caller stopped waiting (cmd is left alone)
}

// process sends cmd, with this timeout, in a pipeline with other callers'
// commands if some are in flight. Only a *redis.Cmd is queued; other
// commands go out at once.
func (b *batcher) process(ctx context.Context, timeout time.Duration, cmd redis.Cmder) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return b.client(timeout).Process(ctx, cmd)
	}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		defer b.sent()
		return b.client(timeout).Process(ctx, cmd)
	}
	q := &queued{ctx: ctx, timeout: timeout, cmd: c, done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	var ended <-chan struct{}
	if b.abandon {
		ended = ctx.Done()
	}
	select {
	case <-q.done:
		if q.dropped {
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
	case <-ended:
		b.mu.Lock()
		switch {
		case !q.taken:
			// Never sent: it will not run.
			b.queue = slices.DeleteFunc(b.queue, func(x *queued) bool { return x == q })
			b.mu.Unlock()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		case !q.answered:
			// Sent, or being sent: it may still run; its answer is not
			// waited for (the pipeline no longer touches cmd).
			q.abandoned = true
			b.mu.Unlock()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		// The answer is in.
		b.mu.Unlock()
		<-q.done
	}
	return cmd.Err()
}

// sent is called when the command sent at once has its answer: what queued
// meanwhile goes to a sender goroutine.
func (b *batcher) sent() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy = false
		return
	}
	go b.drain()
}

// drain sends the queue as pipelines until it is empty.
func (b *batcher) drain() {
	for {
		b.mu.Lock()
		batch := b.queue
		if len(batch) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.queue = nil
		live := batch[:0:0]
		for _, q := range batch {
			q.taken = true
			if q.ctx.Err() != nil {
				// Its caller has stopped waiting, or is about to: not sent.
				q.dropped = true
				close(q.done)
				continue
			}
			live = append(live, q)
		}
		b.mu.Unlock()
		batch = live
		if len(batch) == 0 {
			continue
		}

		sent := b.send(batch)

		b.mu.Lock()
		for i, q := range batch {
			if !q.abandoned {
				q.cmd.SetVal(sent[i].Val())
				q.cmd.SetErr(sent[i].Err())
				q.answered = true
			}
		}
		b.mu.Unlock()
		for _, q := range batch {
			close(q.done)
		}
	}
}

// send sends copies of the batch's commands as one pipeline and returns
// them. It runs on a context that its callers' cancellation does not end,
// with the latest of their deadlines if they all have one (go-redis does not
// retry past it; a caller does not wait past its own), on the client of the
// longest timeout among them (whose socket deadlines bound it too), so that
// no caller's command is cut short by another's shorter timeout.
func (b *batcher) send(batch []*queued) []*redis.Cmd {
	var deadline time.Time
	timeout := batch[0].timeout
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			deadline = time.Time{}
			break
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	for _, q := range batch {
		timeout = max(timeout, q.timeout)
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.client(timeout).Pipeline()
	sent := make([]*redis.Cmd, len(batch))
	for i, q := range batch {
		sent[i] = redis.NewCmd(q.ctx, q.cmd.Args()...)
		_ = pipe.Process(q.ctx, sent[i])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// go-redis leaves the commands alone when it got no connection.
		for _, c := range sent {
			if c.Err() == nil && c.Val() == nil {
				c.SetErr(err)
			}
		}
	}
	return sent
}

// batchedClient is a client whose Process goes through a batcher, with the
// timeout of the calls it serves; its other methods are the client's.
type batchedClient struct {
	redis.UniversalClient
	b       *batcher
	timeout time.Duration
}

func (c *batchedClient) Process(ctx context.Context, cmd redis.Cmder) error {
	return c.b.process(ctx, c.timeout, cmd)
}
