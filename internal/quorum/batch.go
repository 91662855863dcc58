package quorum

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher is a client whose Process sends the commands that goroutines
// issue at the same time as pipelines: one write and one read for many
// commands, instead of a round trip each (what rueidis calls
// auto-pipelining). A command issued while no other is in flight goes out at
// once, as with the client itself. One issued while another is in flight
// waits in a queue; when the command in flight has its answer, its caller
// sends everything queued as one pipeline, and when that pipeline has its
// answers, one of its callers sends what queued meanwhile, and so on: no
// goroutine sends more than its own command and one pipeline, so no caller
// is kept long for the others, and at most one connection is busy.
//
// A queued caller whose ctx ends stops waiting: its command is taken out of
// the queue if it was not sent yet (it will never run, and its error is
// ctx's), else its answer is ignored and the command may still run, as with
// any call that timed out. Other methods go to the client directly.
type batcher struct {
	redis.UniversalClient

	mu    sync.Mutex
	busy  bool // a command or pipeline is in flight
	queue []*queued
}

// queued is a command waiting in a batcher's queue. The pipeline sends a
// copy of it, whose answer is copied into cmd unless the caller stopped
// waiting (then cmd is the caller's again).
type queued struct {
	ctx  context.Context
	cmd  *redis.Cmd
	done chan struct{} // closed once cmd has its answer (or error)

	// Guarded by the batcher's mu.
	taken     bool // in a pipeline: no longer in the queue
	answered  bool // cmd has the pipeline's answer
	abandoned bool // its caller stopped waiting (cmd is left alone)
	lead      bool // its caller sends the next pipeline once done
}

// Process sends cmd, in a pipeline with other callers' commands if some are
// in flight. Only a *redis.Cmd is queued; other commands go out at once.
func (b *batcher) Process(ctx context.Context, cmd redis.Cmder) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return b.UniversalClient.Process(ctx, cmd)
	}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		err := b.UniversalClient.Process(ctx, cmd)
		b.next()
		return err
	}
	q := &queued{ctx: ctx, cmd: c, done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
		b.mu.Lock()
		switch {
		case !q.taken:
			// Never sent: it will not run.
			b.queue = slices.DeleteFunc(b.queue, func(x *queued) bool { return x == q })
			b.mu.Unlock()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		case !q.answered:
			// Sent: it may still run; its answer is not waited for (the
			// pipeline no longer touches cmd).
			q.abandoned = true
			b.mu.Unlock()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		// The answer is in.
		b.mu.Unlock()
		<-q.done
	}
	b.mu.Lock()
	lead := q.lead
	b.mu.Unlock()
	if lead {
		b.next()
	}
	return cmd.Err()
}

// next is called by the caller whose command or pipeline just got its
// answers: it sends what is queued, if anything, as one pipeline, and then
// hands the next one to one of that pipeline's callers that still waits.
func (b *batcher) next() {
	for {
		b.mu.Lock()
		batch := b.queue
		if len(batch) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.queue = nil
		for _, q := range batch {
			q.taken = true
		}
		b.mu.Unlock()

		sent := b.send(batch)

		b.mu.Lock()
		for i, q := range batch {
			if !q.abandoned {
				q.cmd.SetVal(sent[i].Val())
				q.cmd.SetErr(sent[i].Err())
				q.answered = true
			}
		}
		var leader *queued
		more := len(b.queue) > 0
		if more {
			for _, q := range batch {
				if !q.abandoned {
					leader = q
					break
				}
			}
			if leader != nil {
				leader.lead = true
			}
		} else {
			b.busy = false
		}
		b.mu.Unlock()
		for _, q := range batch {
			close(q.done)
		}
		if !more || leader != nil {
			return
		}
		// Every caller of the batch stopped waiting: nobody of it is left
		// to send what queued meanwhile, so go on.
	}
}

// send sends copies of the batch's commands as one pipeline, on a context
// that its callers' cancellation does not end, with the latest of their
// deadlines, if they all have one (the client's socket deadlines bound it
// too), and returns them.
func (b *batcher) send(batch []*queued) []*redis.Cmd {
	var deadline time.Time
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
	ctx := context.WithoutCancel(batch[0].ctx)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.UniversalClient.Pipeline()
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
