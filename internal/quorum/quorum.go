// Package quorum runs one operation on N Redis nodes in parallel and decides
// as soon as the outcome is known, with every wait bounded in time whatever
// the clients' own settings.
//
// go-redis applies a context's deadline to socket reads only when the client
// was built with ContextTimeoutEnabled; with default options a read on a
// frozen node waits for ReadTimeout (3s). A short call therefore runs inline
// only on a client whose socket deadlines bound it: one that honours ctx
// deadlines, or a copy of a *redis.Client made with WithTimeout (it shares
// the pool and sets the call's timeout as its socket deadlines), which runs
// the client's hooks: the copy's own where it keeps them (see
// withTimeoutKeepsHooks), else the copy run through a Conn of the client
// (see hookedCopy). Any other call runs on a worker goroutine, and the
// caller stops waiting at the deadline. The abandoned call finishes in the
// background when go-redis gives up, and its result is handed to a late
// handler so that, for example, a lock it set after all can be released.
package quorum

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/node"
)

// Decided is the stop rule of a round that needs need of n nodes to grant
// (granted tells a grant): it has decided once need nodes granted, or once
// the other answers put need out of reach, counting as failed the suspect
// nodes that the round does not wait for.
func Decided[T any](rs []Result[T], suspects, n, need int, granted func(Result[T]) bool) bool {
	g, f := 0, 0
	for _, r := range rs {
		if granted(r) {
			g++
		} else {
			f++
		}
	}
	return g >= need || f+suspects > n-need
}

// Agreed is the stop rule of a round that needs need of n nodes to grant
// with one value (value tells a grant and its value): it has decided once
// need nodes granted with the same value, once the nodes that did not
// grant put need out of reach (as Decided), or once every node answered
// or is a suspect (grants that disagree wait for the others: a refusal
// among them may decide the round's class).
func Agreed[T any, V comparable](rs []Result[T], suspects, n, need int, value func(Result[T]) (V, bool)) bool {
	var counts map[V]int
	best, f := 0, 0
	for _, r := range rs {
		v, ok := value(r)
		if !ok {
			f++
			continue
		}
		if counts == nil {
			counts = make(map[V]int, n)
		}
		counts[v]++
		best = max(best, counts[v])
	}
	return best >= need || f+suspects > n-need || len(rs)+suspects >= n
}

// AllAnswering is the stop rule of a round that wants the answer of every
// node that is answering: it has decided once each of the n nodes has
// answered or is a suspect, not waited for.
func AllAnswering[T any](rs []Result[T], suspects, n int) bool { return len(rs)+suspects >= n }

// For is how many of n nodes must grant a key held with this limit: a
// majority for a lock (limit ≤ 1), ⌊n·limit/(limit+1)⌋+1 for a semaphore
// of limit permits, so that limit+1 holders can never each hold a quorum
// (each node grants at most limit permits).
func For(n, limit int) int {
	if limit <= 1 {
		return n/2 + 1
	}
	return n*limit/(limit+1) + 1
}

// Node is one independent Redis deployment (standalone, Sentinel or Cluster).
type Node struct {
	// Set by NewNode (or NewNodeOf) and never changed.
	//
	// Client is the go-redis client, nil for another family's (family).
	Client redis.UniversalClient
	family node.Client
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
	// Cluster is true for a Cluster client: a pub/sub subscription of its
	// may sit on another node than the keys it is about.
	Cluster bool
	// TLS is true for a client with a TLSConfig.
	TLS bool
	// tlsDial is the client's DialTimeout when it dials with TLS (else 0):
	// go-redis' TLS dialer bounds the handshake by it, not by the
	// context, so that an inline call could wait for it (see inline).
	tlsDial time.Duration

	// The suspect state: suspectUntil and lastReload are atomics, closed
	// is under suspectMu, OnSuspect is called under it.
	//
	// suspectUntil (Unix ns) is set when the node left a round without an
	// answer, and cleared by its next successful answer: while it is set,
	// rounds do not wait for the node to decide (it still gets every
	// command, and an answer in time still counts).
	suspectUntil atomic.Int64
	// OnSuspect, if set, is told when the node becomes suspect (true) and
	// when a suspect node answers again or is closed (false), under
	// suspectMu, so that the calls alternate and none follows Close's.
	// Set before first use.
	OnSuspect func(suspect bool)
	suspectMu sync.Mutex
	closed    bool // guarded by suspectMu

	// reload, for a Cluster client, makes it ask the cluster for its
	// slots again: go-redis otherwise keeps sending to a failed master
	// until its periodic reload (10s) after a failover.
	reload     func()
	lastReload atomic.Int64 // Unix ns

	// withTimeout, for a *redis.Client that does not honour ctx deadlines,
	// returns a copy of it whose socket deadlines are the timeout and that
	// runs the client's hooks (see bounded, hookedCopy).
	withTimeout func(time.Duration) redis.UniversalClient
	// inlineB batches the inline calls (a *redis.Client), workerB the calls
	// on workers; nil for other clients.
	inlineB, workerB *batcher
	worker1          redis.UniversalClient // Client through workerB
	conn, workerConn node.Conn             // Client's and workerClient's
	boundedMu        sync.Mutex
	boundedList      atomic.Pointer[[]boundedClient]
	deadline         atomic.Pointer[deadline] // see sharedDeadline

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
// A suspect node is forgotten: OnSuspect is told false.
func (n *Node) Close() {
	n.closeOnce.Do(func() { close(n.stop) })
	n.suspectMu.Lock()
	n.closed = true
	n.suspectMu.Unlock()
	n.clearSuspect()
}

// suspectFor is how long a node that did not answer in time is not waited
// for, unless it answers meanwhile.
const suspectFor = 10 * time.Second

// Suspect reports whether the node recently failed to answer in time.
func (n *Node) Suspect() bool { return time.Now().UnixNano() < n.suspectUntil.Load() }

func (n *Node) answered(err error) {
	if err == nil && n.suspectUntil.Load() != 0 {
		n.clearSuspect()
	}
}

// clearSuspect ends the node's suspicion, telling OnSuspect.
func (n *Node) clearSuspect() {
	n.suspectMu.Lock()
	defer n.suspectMu.Unlock()
	if n.suspectUntil.Swap(0) != 0 && n.OnSuspect != nil {
		n.OnSuspect(false)
	}
}

// suspect makes the node suspect until the time until (Unix ns), telling
// OnSuspect unless it was suspect already or is closed.
func (n *Node) suspect(until int64) {
	n.suspectMu.Lock()
	defer n.suspectMu.Unlock()
	if n.closed {
		return
	}
	if n.suspectUntil.Swap(until) == 0 && n.OnSuspect != nil {
		n.OnSuspect(true)
	}
}

// boundedClient is the client of inline calls with a timeout: through the
// node's inline batcher, on the node's client or a copy of it whose socket
// deadlines are the timeout.
type boundedClient struct {
	timeout time.Duration
	base    redis.UniversalClient // the client or its copy
	client  redis.UniversalClient // base through the batcher
	conn    node.Conn             // client's
}

// maxBounded is how many timeouts a node keeps a bounded client for. A
// Locker uses a few (its node timeout for the TTLs in use, the release's);
// calls with other timeouts run on a worker.
const maxBounded = 8

// bounded returns a client for an inline call with this timeout, or nil if
// there is none (see Call).
func (n *Node) bounded(timeout time.Duration) node.Conn {
	if b := n.boundedFor(timeout); b != nil {
		return b.conn
	}
	if n.HonoursCtx && n.inlineB == nil {
		return n.conn // a Cluster client: no batcher
	}
	return nil
}

// boundedFor returns the bounded client for timeout, made if need be.
func (n *Node) boundedFor(timeout time.Duration) *boundedClient {
	if n.inlineB == nil || (!n.HonoursCtx && n.withTimeout == nil) {
		return nil
	}
	if l := n.boundedList.Load(); l != nil {
		for i := range *l {
			if (*l)[i].timeout == timeout {
				return &(*l)[i]
			}
		}
	}
	n.boundedMu.Lock()
	defer n.boundedMu.Unlock()
	var list []boundedClient
	if l := n.boundedList.Load(); l != nil {
		list = *l
	}
	for i := range list {
		if list[i].timeout == timeout {
			return &list[i]
		}
	}
	if len(list) >= maxBounded {
		return nil
	}
	base := n.Client
	if !n.HonoursCtx {
		base = n.withTimeout(timeout)
	}
	client := &batchedClient{UniversalClient: base, b: n.inlineB, timeout: timeout}
	list = append(slices.Clip(list), boundedClient{timeout: timeout, base: base, client: client, conn: n.wrap(&redisConn{client})})
	n.boundedList.Store(&list)
	return &list[len(list)-1]
}

// baseFor is the inline batcher's client for timeout.
func (n *Node) baseFor(timeout time.Duration) redis.UniversalClient {
	if b := n.boundedFor(timeout); b != nil {
		return b.base
	}
	return n.Client
}

// workerClient returns the client with which a call runs on a worker.
func (n *Node) workerClient() redis.UniversalClient {
	if n.worker1 != nil {
		return n.worker1
	}
	return n.Client
}

// withTimeoutKeepsHooks reports whether a copy made with (*redis.Client).
// WithTimeout runs the hooks added to the client before. Some go-redis
// versions (v9.23) build the copy without them: commands sent through it
// would be hidden from the application's tracing and metrics hooks, so such
// a copy is used only through the client's hooks (see hookedCopy), and
// where that cannot be done either, calls on clients that do not honour ctx
// deadlines run on a worker. Found out once, without a network and without
// a word in the log: a command on a context that is already cancelled goes
// through the hooks, and then the pool refuses it before dialing (a dialer
// that failed instead would have newer go-redis versions retry and log the
// failure).
var withTimeoutKeepsHooks = sync.OnceValue(probeKeepsHooks)

// probeClient is a client for the probes: it reaches no network, and
// retries nothing.
func probeClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:       "probe:0",
		MaxRetries: -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no network: a probe")
		},
	})
}

func probeKeepsHooks() bool {
	c := probeClient()
	defer c.Close()
	var seen atomic.Bool
	c.AddHook(probeHook{seen: &seen})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.WithTimeout(time.Second).Process(ctx, redis.NewCmd(ctx, "ping"))
	return seen.Load()
}

// DefaultClientsInline reports whether, with the go-redis version in use,
// calls on a *redis.Client that does not honour ctx deadlines run inline:
// through a WithTimeout copy that keeps the client's hooks (see
// withTimeoutKeepsHooks), or one run through them (see hookedCopy). Where
// neither can be made, they run on workers.
func DefaultClientsInline() bool { return withTimeoutKeepsHooks() || connsDivert() }

// probeHook records that a command (and, if pipeline is not nil, a
// pipeline) went through the hooks.
type probeHook struct{ seen, pipeline *atomic.Bool }

func (h probeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h probeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.seen.Store(true)
		return next(ctx, cmd)
	}
}
func (h probeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.pipeline == nil {
		return next
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipeline.Store(true)
		return next(ctx, cmds)
	}
}

// inline returns the client with which a call with this timeout on ctx runs
// inline, or nil if it runs on a worker (see Call).
func (n *Node) inline(ctx context.Context, timeout time.Duration) node.Conn {
	if timeout > MaxInline || timeout < n.tlsDial {
		// Longer than MaxInline, or a TLS dial could outlast it (a
		// handshake to a port that does not speak TLS, or to a frozen
		// server, waits for DialTimeout whatever the deadline).
		return nil
	}
	if !n.HonoursCtx {
		// The socket deadlines are the timeout: the caller's deadline must
		// not come sooner.
		if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
			return nil
		}
	}
	return n.bounded(timeout)
}

// IsReply reports whether err is an error reply of Redis (node.IsReply).
func IsReply(err error) bool { return node.IsReply(err) }

// NewNode describes client, deriving its address and whether it applies
// context deadlines from its options.
func NewNode(client redis.UniversalClient, fallbackAddr string) *Node {
	n := &Node{Client: client, Addr: fallbackAddr, jobs: make(chan func()), stop: make(chan struct{})}
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		n.Addr, n.HonoursCtx, n.NoRetries = o.Addr, o.ContextTimeoutEnabled, o.MaxRetries < 0
		if o.TLSConfig != nil {
			n.TLS, n.tlsDial = true, o.DialTimeout
		}
		n.inlineB = &batcher{client: n.baseFor, abandon: true}
		n.workerB = &batcher{client: func(time.Duration) redis.UniversalClient { return c }}
		n.worker1 = &batchedClient{UniversalClient: c, b: n.workerB}
		switch {
		case n.HonoursCtx:
		case withTimeoutKeepsHooks():
			n.withTimeout = func(d time.Duration) redis.UniversalClient { return c.WithTimeout(d) }
		case connsDivert():
			// The copy without the client's hooks, run through them (see
			// hookedCopy).
			n.withTimeout = func(d time.Duration) redis.UniversalClient { return newHookedCopy(c, d) }
		}
	case *redis.ClusterClient:
		o := c.Options()
		if len(o.Addrs) > 0 {
			n.Addr = "cluster(" + o.Addrs[0] + ",...)"
		}
		n.HonoursCtx, n.NoRetries, n.Cluster = o.ContextTimeoutEnabled, o.MaxRetries < 0 && o.MaxRedirects < 0, true
		if o.TLSConfig != nil {
			n.TLS, n.tlsDial = true, o.DialTimeout
		}
		n.reload = func() { c.ReloadState(context.Background()) }
	case *redis.Ring:
		o := c.Options()
		n.HonoursCtx = o.ContextTimeoutEnabled
	}
	if n.Addr == "" {
		n.Addr = fallbackAddr
	}
	n.conn, n.workerConn = n.wrap(&redisConn{client}), n.wrap(&redisConn{n.workerClient()})
	return n
}

// NewNodeOf describes the client of another family than go-redis (see
// node.Client): its calls run inline up to MaxInline, without batchers
// (the client pipelines concurrent commands itself, if it does).
func NewNodeOf(client node.Client, fallbackAddr string) *Node {
	d := client.Describe()
	n := &Node{Addr: d.Addr, HonoursCtx: true, NoRetries: d.NoRetries, Cluster: d.Cluster, TLS: d.TLS,
		family: client, jobs: make(chan func()), stop: make(chan struct{})}
	if n.Addr == "" {
		n.Addr = fallbackAddr
	}
	n.conn = n.wrap(client.Conn())
	n.workerConn = n.conn
	return n
}

// Late receives the answers that arrive after a round returned (an
// interface, so that a pointer to the caller's state serves without a
// closure).
type Late[T any] interface{ Late(Result[T]) }

// LateFunc is a function as a Late.
type LateFunc[T any] func(Result[T])

// Late calls f.
func (f LateFunc[T]) Late(r Result[T]) { f(r) }

// Result is one node's answer.
type Result[T any] struct {
	Node int
	Val  T
	Err  error
}

// MaxInline is the longest timeout of a call that runs inline. go-redis
// applies a deadline to reads but not a context's cancellation, so an inline
// call outlives a cancelled context until its deadline; a longer call (a
// renewal waits up to the end of the lock's validity) runs on a worker, and
// the caller stops waiting when ctx is cancelled.
const MaxInline = time.Second

// Call runs fn on one node and returns when fn returns, timeout elapses or
// ctx ends, whichever is first. answered is false when no answer came in
// time: then err is the context's error. inline reports that fn ran on the
// caller's goroutine: with a client whose socket deadlines bound it (see
// Node), when timeout is at most MaxInline and, for a client that dials
// with TLS, at least its DialTimeout, and, for a client that does not
// honour ctx deadlines, ctx's deadline is not sooner than timeout. An inline
// call that got no answer may still run on the node at any time, and late is
// never called for it; otherwise late, if not nil, gets fn's result once fn
// returns after Call did. fn is given the client to use.
func Call[T any](ctx context.Context, n *Node, timeout time.Duration, fn func(ctx context.Context, c node.Conn) (T, error), late func(T, error)) (v T, err error, answered, inline bool) {
	var lateR Late[T]
	if late != nil {
		lateR = LateFunc[T](func(r Result[T]) { late(r.Val, r.Err) })
	}
	r, answered, inline := call(ctx, n, 0, timeout, RunFunc[T](func(ctx context.Context, _ int, c node.Conn) (T, error) { return fn(ctx, c) }), lateR)
	return r.Val, r.Err, answered, inline
}

// A Runner runs a round's command on node i with its client c.
type Runner[T any] interface {
	Run(ctx context.Context, i int, c node.Conn) (T, error)
}

// RunFunc is a function as a Runner.
type RunFunc[T any] func(ctx context.Context, i int, c node.Conn) (T, error)

// Run calls f.
func (f RunFunc[T]) Run(ctx context.Context, i int, c node.Conn) (T, error) {
	return f(ctx, i, c)
}

// call is Call for node i of a Fanout (fn is given i).
func call[T any](ctx context.Context, n *Node, i int, timeout time.Duration, fn Runner[T], late Late[T]) (r Result[T], answered, inline bool) {
	r.Node = i
	c := n.inline(ctx, timeout)
	ctx, cancel := n.bound(ctx, timeout)
	if c != nil {
		defer cancel()
		r.Val, r.Err = fn.Run(ctx, i, c)
		n.failed(r.Err)
		if r.Err != nil && (ctx.Err() != nil || isTimeout(r.Err)) {
			r.Err = ctx.Err()
			if r.Err == nil {
				r.Err = context.DeadlineExceeded // the socket deadline came first
			}
			return r, false, true
		}
		return r, true, true
	}
	ch := make(chan Result[T], 1)
	n.run(func() {
		v, err := fn.Run(ctx, i, n.workerConn)
		n.failed(err)
		ch <- Result[T]{Node: i, Val: v, Err: err}
	})
	select {
	case r = <-ch:
		cancel()
		return r, true, false
	case <-ctx.Done():
	}
	// An answer that arrived together with the deadline still counts.
	select {
	case r = <-ch:
		cancel()
		return r, true, false
	default:
	}
	r.Err = ctx.Err()
	cancel()
	if late != nil {
		go func() { late.Late(<-ch) }()
	}
	return r, false, false
}

// bound is ctx with timeout, as context.WithTimeout makes it, with a
// cancel that Call calls only once fn has returned or ctx has ended (so
// that a cancel that does nothing changes nothing). Two cases take no
// timer of their own:
//   - when ctx's own deadline comes no later, it is ctx itself: the call
//     ends at the same instant, with the same error;
//   - when ctx can never be cancelled (no Done channel: Background, or
//     WithoutCancel's, as every Release's), its deadline is one that the
//     node's calls with this timeout share (see sharedDeadline): the call
//     ends with context.DeadlineExceeded no later than timeout after it
//     began, and no sooner than a 32nd of it before that, and ctx's values
//     are kept. (Never later: a node is never waited for beyond its
//     timeout.)
func (n *Node) bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	now := time.Now()
	d, ok := ctx.Deadline()
	switch {
	case ok && !d.After(now.Add(timeout)):
		return ctx, noCancel
	case !ok && ctx.Done() == nil && timeout > 0:
		shared := n.sharedDeadline(now, timeout)
		if ctx == context.Background() {
			return shared, noCancel
		}
		return &valuesOf{Context: shared, values: ctx}, noCancel
	}
	return context.WithTimeout(ctx, timeout)
}

func noCancel() {}

// deadline is a context that ends at a deadline, shared by the calls to a
// node that begin within a 32nd of their timeout of one another: a call
// takes no timer of its own. (A timer per call, in context.WithTimeout, was
// the largest cost of dlock's own on an everyday Acquire and Release with
// a client that waits on ctx.Done(), rueidis': a 10th of the process' CPU.)
type deadline struct {
	timeout time.Duration
	at      time.Time
	ctx     context.Context
	cancel  context.CancelFunc // never called: the deadline ends ctx
}

// sharedDeadline returns a context that ends no later than timeout after
// now and no sooner than a 32nd of it before that: the node's shared one
// if it does, else a new one, ending at now plus timeout, which becomes
// the node's.
func (n *Node) sharedDeadline(now time.Time, timeout time.Duration) context.Context {
	latest := now.Add(timeout)
	if d := n.deadline.Load(); d != nil && d.timeout == timeout && !d.at.After(latest) && !d.at.Before(latest.Add(-timeout/32)) {
		return d.ctx
	}
	d := &deadline{timeout: timeout, at: latest}
	d.ctx, d.cancel = context.WithDeadline(context.Background(), d.at)
	n.deadline.Store(d)
	return d.ctx
}

// valuesOf is a shared deadline's context with the values of the caller's
// context.
type valuesOf struct {
	context.Context
	values context.Context
}

func (c *valuesOf) Value(key any) any { return c.values.Value(key) }

// isTimeout reports whether err is a socket deadline that passed: the call
// got no answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return !IsReply(err) && errors.As(err, &ne) && ne.Timeout()
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
	// Inline is true when the call ran inline (see Call): no late answer
	// will come, and the command may run on the node at any time.
	Inline bool
}

// Fanout runs fn on every node in parallel and returns the results received
// by the time done reports true for them, every node has answered, timeout
// has elapsed or ctx has ended. It also returns the nodes whose missing
// answer is part of the outcome: all unanswered nodes when the round ran out
// of time (or ctx ended), only the suspect ones when done decided early
// (a node that was merely slower than the decision is not listed). done is
// called after each result (and once before any), on the caller's
// goroutine, with the results so far and the number of nodes that have not
// answered yet and are suspect (they recently left a round unanswered: a
// frozen or partitioned node), which the caller may count as failed so as
// not to wait for them. Results that arrive after Fanout returned are
// passed to late (on another goroutine), if late is not nil. fn's context
// ends at the round's deadline, not when ctx is cancelled after the calls
// began: a command sent runs anyway, and late learns its answer. With one
// node, fn runs through Call without the fan-out machinery.
func Fanout[T any](ctx context.Context, nodes []*Node, timeout time.Duration,
	fn Runner[T],
	done func(results []Result[T], suspects int) bool,
	late Late[T],
) ([]Result[T], []Missing) {
	if len(nodes) == 1 {
		r, answered, inline := call(ctx, nodes[0], 0, timeout, fn, late)
		if !answered {
			return nil, []Missing{{Node: 0, Err: r.Err, Inline: inline}}
		}
		return []Result[T]{r}, nil
	}

	deadline := time.Now().Add(timeout)
	ctx, callCtx, cancel := roundContexts(ctx, deadline)
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
			v, err := fn.Run(callCtx, i, n.workerConn)
			nodes[i].answered(err)
			nodes[i].failed(err)
			ch <- Result[T]{Node: i, Val: v, Err: err}
		})
	}
	results, decided := gather(ctx, nodes, ch, answeredNode, suspects, done)
	timedOut := !decided && len(results) < len(nodes)
	missing := missingOf(ctx, nodes, answeredNode, suspectBefore, timedOut, deadline)
	pending := len(nodes) - len(results)
	if pending == 0 {
		cancel()
		return results, missing
	}
	go lateAnswers(ch, pending, late, cancel)
	return results, missing
}

// roundContexts returns the round's context (ctx, ending at deadline), the
// context of its calls, and the cancel of both, to be called once every
// call has returned.
//
// The calls' context ends at the round's deadline, and with the caller's
// cancellation only if it came before they were sent: once sent, a command
// runs whatever the caller does next, and its answer, however late, tells
// what it did. A client that ends a call as soon as its context ends (the
// other client families) would otherwise lose the answers of the nodes that
// a round decided without whenever the caller cancels as the round returns
// (defer cancel()): their effect would stay unknown, to be cleaned up, and a
// Release would wait for them. It ends after the round's context, never
// before, so that a call cut short by the deadline is reported as timed
// out, never as an answer.
func roundContexts(parent context.Context, deadline time.Time) (ctx, callCtx context.Context, cancel context.CancelFunc) {
	ctx, cancel = context.WithDeadline(parent, deadline)
	if ctx.Err() != nil {
		return ctx, ctx, cancel
	}
	callCtx, cancelCalls := context.WithCancel(context.WithoutCancel(ctx))
	if WrapConn != nil {
		callCtx = context.WithValue(callCtx, roundDeadlineKey{}, deadline)
	}
	context.AfterFunc(ctx, func() {
		if d := time.Until(deadline); d > 0 {
			time.AfterFunc(d, cancelCalls)
			return
		}
		cancelCalls()
	})
	cancelRound := cancel
	return ctx, callCtx, func() {
		cancelRound()
		cancelCalls()
	}
}

// gather receives the round's answers from ch, recording in answered the
// nodes that gave them, until done decides (called once before any answer,
// then after each, with the suspect nodes still pending), every node has
// answered, or ctx ends. It reports whether done decided.
func gather[T any](ctx context.Context, nodes []*Node, ch <-chan Result[T], answered []bool, suspects int,
	done func(results []Result[T], suspects int) bool) (results []Result[T], decided bool) {
	results = make([]Result[T], 0, len(nodes))
	decided = done(results, suspects)
	for !decided && len(results) < len(nodes) {
		select {
		case r := <-ch:
			results = append(results, r)
			answered[r.Node] = true
			if suspects > 0 {
				suspects = pendingSuspects(nodes, answered)
			}
			decided = done(results, suspects)
			continue
		case <-ctx.Done():
		}
		break
	}
	return results, decided
}

// missingOf lists the nodes whose missing answer is part of the round's
// outcome (see Fanout): when the round timed out, every node that did not
// answer (made suspect if the deadline passed, else the caller's ctx ended
// first); else the nodes that were suspect when it began and did not
// answer before it decided.
func missingOf(ctx context.Context, nodes []*Node, answered, suspectBefore []bool, timedOut bool, deadline time.Time) []Missing {
	var missing []Missing
	until := time.Now().Add(suspectFor).UnixNano()
	for i, a := range answered {
		switch {
		case a:
		case timedOut && !time.Now().Before(deadline):
			// Out of time: the nodes still pending are suspect from now on.
			nodes[i].suspect(until)
			missing = append(missing, Missing{Node: i, Err: context.DeadlineExceeded})
		case timedOut:
			missing = append(missing, Missing{Node: i, Err: ctx.Err()})
		case suspectBefore[i]:
			missing = append(missing, Missing{Node: i, Err: ErrNotWaited})
		}
	}
	return missing
}

// lateAnswers passes the pending answers that arrive on ch after the round
// returned to late (if not nil), then cancels the round's contexts.
func lateAnswers[T any](ch <-chan Result[T], pending int, late Late[T], cancel context.CancelFunc) {
	defer cancel()
	for ; pending > 0; pending-- {
		r := <-ch
		if late != nil {
			late.Late(r)
		}
	}
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
