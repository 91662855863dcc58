// Package quorum runs one operation on N Redis nodes in parallel and decides
// as soon as the outcome is known, with every wait bounded in time whatever
// the clients' own settings.
//
// go-redis applies a context's deadline to socket reads only when the client
// was built with ContextTimeoutEnabled; with default options a read on a
// frozen node waits for ReadTimeout (3s). A call here therefore runs on its
// own goroutine unless the client is known to honour the deadline, and the
// caller stops waiting at the deadline. The abandoned call finishes in the
// background when go-redis gives up, and its result is handed to a late
// handler so that, for example, a lock it set after all can be released.
package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis deployment (standalone, Sentinel or Cluster).
type Node struct {
	Client redis.UniversalClient
	// Addr names the node in errors.
	Addr string
	// HonoursCtx is true when the client applies ctx deadlines to reads, so
	// a short call can run inline (see Call).
	HonoursCtx bool
	// NoRetries is true when the client never retries a command
	// (MaxRetries < 0): then a failure to get a connection means that the
	// command was never sent. With retries, a command may have been sent by
	// an earlier try whatever the last one says.
	NoRetries bool

	// suspectUntil (Unix ns) is set when the node left a round without an
	// answer, and cleared by its next successful answer: while it is set,
	// rounds do not wait for the node to decide (it still gets every
	// command, and an answer in time still counts).
	suspectUntil atomic.Int64

	// reload, for a Cluster client, makes it ask the cluster for its
	// slots again: go-redis otherwise keeps sending to a failed master
	// until its periodic reload (10s) after a failover.
	reload     func()
	lastReload atomic.Int64 // Unix ns

	jobs      chan func()
	stop      chan struct{}
	closeOnce sync.Once
}

// reloadEvery throttles the reloads of a Cluster's slots.
const reloadEvery = 100 * time.Millisecond

// failed is told of a call to the node that failed without an error reply
// of Redis (a network error, no answer): a Cluster client is made to reload
// its slots, in case a master failed over.
func (n *Node) failed(err error) {
	if n.reload == nil || err == nil || IsReply(err) {
		return
	}
	now := time.Now().UnixNano()
	if last := n.lastReload.Load(); now-last > int64(reloadEvery) && n.lastReload.CompareAndSwap(last, now) {
		n.reload()
	}
}

// workerIdle is how long a worker goroutine waits for another call before
// it exits.
const workerIdle = 10 * time.Second

// run runs f on one of the node's worker goroutines: an idle one if there is
// one, else a new one. Reusing workers saves a goroutine start and the
// growth of a fresh stack to go-redis' depth on every call.
func (n *Node) run(f func()) {
	select {
	case n.jobs <- f:
	default:
		go n.worker(f)
	}
}

func (n *Node) worker(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-n.jobs:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-n.stop:
			return
		}
	}
}

// Close makes the node's idle workers exit; busy ones exit after their call.
func (n *Node) Close() {
	n.closeOnce.Do(func() { close(n.stop) })
}

// suspectFor is how long a node that did not answer in time is not waited
// for, unless it answers meanwhile.
const suspectFor = 10 * time.Second

// Suspect reports whether the node recently failed to answer in time.
func (n *Node) Suspect() bool { return time.Now().UnixNano() < n.suspectUntil.Load() }

func (n *Node) answered(err error) {
	if err == nil && n.suspectUntil.Load() != 0 {
		n.suspectUntil.Store(0)
	}
}

// Inline reports whether a call with this timeout runs inline (see Call).
func (n *Node) Inline(timeout time.Duration) bool { return n.HonoursCtx && timeout <= MaxInline }

// IsReply reports whether err is an error reply of Redis. (A function of
// its own, so that the target of errors.As is allocated only when it is
// called.)
func IsReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// NewNode describes client, deriving its address and whether it applies
// context deadlines from its options.
func NewNode(client redis.UniversalClient, fallbackAddr string) *Node {
	n := &Node{Client: client, Addr: fallbackAddr, jobs: make(chan func()), stop: make(chan struct{})}
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		n.Addr, n.HonoursCtx, n.NoRetries = o.Addr, o.ContextTimeoutEnabled, o.MaxRetries < 0
	case *redis.ClusterClient:
		o := c.Options()
		if len(o.Addrs) > 0 {
			n.Addr = "cluster(" + o.Addrs[0] + ",...)"
		}
		n.HonoursCtx, n.NoRetries = o.ContextTimeoutEnabled, o.MaxRetries < 0 && o.MaxRedirects < 0
		n.reload = func() { c.ReloadState(context.Background()) }
	case *redis.Ring:
		o := c.Options()
		n.HonoursCtx = o.ContextTimeoutEnabled
	}
	if n.Addr == "" {
		n.Addr = fallbackAddr
	}
	return n
}

// Result is one node's answer.
type Result[T any] struct {
	Node int
	Val  T
	Err  error
}

// MaxInline is the longest timeout of a call that runs inline on a client
// that honours ctx deadlines. go-redis applies a context's deadline to reads
// but not its cancellation, so an inline call outlives a cancelled context
// until its deadline; a longer call (a renewal waits up to the end of the
// lock's validity) runs on a worker, and the caller stops waiting when ctx
// is cancelled.
const MaxInline = time.Second

// Call runs fn on one node and returns when fn returns, timeout elapses or
// ctx ends, whichever is first. answered is false when no answer came in
// time: then err is the context's error and, if late is not nil, late gets
// fn's result once fn returns. A client that honours ctx deadlines runs fn
// inline when timeout is at most MaxInline (late is then never called), and
// a context error it returns also counts as no answer.
func Call[T any](ctx context.Context, n *Node, timeout time.Duration, fn func(ctx context.Context) (T, error), late func(T, error)) (v T, err error, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	if n.Inline(timeout) {
		defer cancel()
		v, err = fn(ctx)
		n.failed(err)
		if err != nil && ctx.Err() != nil {
			return v, ctx.Err(), false
		}
		return v, err, true
	}
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	n.run(func() {
		v, err := fn(ctx)
		n.failed(err)
		ch <- res{v, err}
	})
	select {
	case r := <-ch:
		cancel()
		return r.v, r.err, true
	case <-ctx.Done():
	}
	// An answer that arrived together with the deadline still counts.
	select {
	case r := <-ch:
		cancel()
		return r.v, r.err, true
	default:
	}
	err = ctx.Err()
	cancel()
	if late != nil {
		go func() {
			r := <-ch
			late(r.v, r.err)
		}()
	}
	return v, err, false
}

// ErrNotWaited is the failure of a node that a round did not wait for
// because it recently did not answer in time. It wraps
// context.DeadlineExceeded.
var ErrNotWaited = fmt.Errorf("not waited for: it recently did not answer in time (%w)", context.DeadlineExceeded)

// Missing is a node that gave no answer that counted in a round.
type Missing struct {
	Node int
	// Err is context.DeadlineExceeded when the round ran out of time,
	// ErrNotWaited when the round decided without waiting for the suspect
	// node, or the error of the caller's context.
	Err error
}

// Fanout runs fn on every node in parallel and returns the results received
// by the time done reports true for them, every node has answered, timeout
// has elapsed or ctx has ended. It also returns the nodes whose missing
// answer is part of the outcome: all unanswered nodes when the round ran out
// of time (or ctx ended), only the suspect ones when done decided early
// (a node that was merely slower than the decision is not listed). done is called after each result (and once before any), on
// the caller's goroutine, with the results so far and the number of nodes
// that have not answered yet and are suspect (they recently left a round
// unanswered: a frozen or partitioned node), which the caller may count as
// failed so as not to wait for them. Results that arrive after Fanout
// returned are passed to late (on another goroutine), if late is not nil.
// With one node, fn runs through Call without the fan-out machinery.
func Fanout[T any](ctx context.Context, nodes []*Node, timeout time.Duration,
	fn func(ctx context.Context, i int) (T, error),
	done func(results []Result[T], suspects int) bool,
	late func(Result[T]),
) ([]Result[T], []Missing) {
	if len(nodes) == 1 {
		var lateOne func(T, error)
		if late != nil {
			lateOne = func(v T, err error) { late(Result[T]{Node: 0, Val: v, Err: err}) }
		}
		v, err, answered := Call(ctx, nodes[0], timeout, func(ctx context.Context) (T, error) { return fn(ctx, 0) }, lateOne)
		if !answered {
			return nil, []Missing{{Node: 0, Err: err}}
		}
		return []Result[T]{{Node: 0, Val: v, Err: err}}, nil
	}

	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	ch := make(chan Result[T], len(nodes))
	answeredNode := make([]bool, len(nodes))
	suspectBefore := make([]bool, len(nodes))
	suspects := 0
	for i, n := range nodes {
		if n.Suspect() {
			suspects++
			suspectBefore[i] = true
		}
		n.run(func() {
			v, err := fn(ctx, i)
			nodes[i].answered(err)
			nodes[i].failed(err)
			ch <- Result[T]{Node: i, Val: v, Err: err}
		})
	}
	results := make([]Result[T], 0, len(nodes))
	decided := done(results, suspects)
	for !decided && len(results) < len(nodes) {
		select {
		case r := <-ch:
			results = append(results, r)
			answeredNode[r.Node] = true
			if suspects > 0 {
				suspects = pendingSuspects(nodes, answeredNode)
			}
			decided = done(results, suspects)
			continue
		case <-ctx.Done():
		}
		break
	}
	var missing []Missing
	timedOut := !decided && len(results) < len(nodes)
	until := time.Now().Add(suspectFor).UnixNano()
	for i, a := range answeredNode {
		switch {
		case a:
		case timedOut && !time.Now().Before(deadline):
			// Out of time: the nodes still pending are suspect from now on.
			nodes[i].suspectUntil.Store(until)
			missing = append(missing, Missing{Node: i, Err: context.DeadlineExceeded})
		case timedOut:
			missing = append(missing, Missing{Node: i, Err: ctx.Err()})
		case suspectBefore[i]:
			missing = append(missing, Missing{Node: i, Err: ErrNotWaited})
		}
	}
	pending := len(nodes) - len(results)
	if pending == 0 {
		cancel()
		return results, missing
	}
	go func() {
		defer cancel()
		for ; pending > 0; pending-- {
			r := <-ch
			if late != nil {
				late(r)
			}
		}
	}()
	return results, missing
}

func pendingSuspects(nodes []*Node, answered []bool) int {
	n := 0
	for i, a := range answered {
		if !a && nodes[i].Suspect() {
			n++
		}
	}
	return n
}
