package dlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/bridge"
	"github.com/dlock-dev/dlock/internal/cleanup"
	"github.com/dlock-dev/dlock/internal/inbox"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// A Locker acquires locks on one Redis deployment ([New]) or on a quorum of
// independent Redis masters ([NewRedlock]). It is safe for concurrent use by
// many goroutines; one Locker per process is the intended use, since waiters
// for the same key in one Locker queue locally and share one subscription.
type Locker struct {
	// Set by newLocker and never changed (the subscribers and cleaners
	// have their own locks; recent and seq are atomic).
	nodes  []*quorum.Node
	quorum int
	cfg    lockerConfig
	hook   Hook // nil: no hook (see WithHook)
	// reserve is how long a release keeps the lock for the woken waiter:
	// reserveFor on one Redis, 0 on a quorum (where each node would pick
	// its own next waiter and could split the votes).
	reserve time.Duration

	// id names this Locker in waiter registrations; a waiter is told of
	// releases on the channel inbox (prefix + "inbox:" + id), or, when the
	// inbox is sharded, on one channel per hash slot (see newInbox).
	id      string
	inbox   string
	inboxes string // the prefix of every inbox channel
	// Script arguments, boxed once: reserve in milliseconds (release.lua),
	// the fence retention in milliseconds, the inbox prefix, DefaultTTL in
	// milliseconds.
	reserveArg, retentionArg, inboxesArg, defaultTTLArg any
	seq                                                 atomic.Uint64
	subs                                                []inbox.Inbox
	cleaners                                            []*cleanup.Cleaner // per node
	// sharded is the inbox of a Locker on one Cluster (also in subs), nil
	// otherwise.
	sharded *inbox.Sharded
	// nameCache caches the names of recently used keys (see names).
	nameCache *keys.Cache
	// servers checks that a Redlock's nodes are distinct servers (nil for
	// one node): its own lock and atomics.
	servers *serverIDs
	// logsNodes: WithLogger logs the nodes' failures (see noteNodes);
	// toldUnreachable: slog.Default was told of a wait for nodes that do
	// not answer, and these have not all answered since.
	logsNodes       bool
	toldUnreachable atomic.Bool

	// The lifetimes, each ended by Close alone, in this order: done
	// (below) is closed when Close begins (waiting calls return, observers
	// end), renewCtx is cancelled right after (renewals under way stop),
	// bg once Close has waited for what it waits for (background clean-up
	// stops).
	renewCtx    context.Context
	renewCancel context.CancelFunc
	// renewals is the schedule of the renewals due together; timers the
	// one timer of the locks' own instants (lost-lock signals, renewals
	// alone).
	renewals renewals
	timers   lockTimers
	// bg is cancelled when Close ends: background clean-up stops.
	bg       context.Context
	bgCancel context.CancelFunc

	// Guarded by mu: the keys being waited for (keyState.refs counts their
	// Acquire calls, under mu too), the locks held, and Close's progress.
	mu      sync.Mutex
	keys    map[waitSlot]*keyState
	locks   map[*Lock]struct{}
	closed  bool
	stopped bool          // Close is waiting for the tracked goroutines
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
	// calls counts the Acquire and TryAcquire calls under way (see join),
	// so that Close can wait for them to leave the waiting queue;
	// observers counts the Observe calls whose goroutine still runs, so
	// that Close can wait for them to give back their connections.
	calls, observers sync.WaitGroup
	// asked is the listening for release requests (asked.go's), under mu.
	asked listening
}

// New returns a Locker on one Redis deployment: a standalone server, a
// Sentinel-managed master or a Cluster, through any go-redis v9 client. It is
// a Redlock quorum of one. New panics if client is nil; an invalid Option, or
// a *redis.Ring (see below), is reported by the Locker's methods as an error
// wrapping ErrInvalid. Close the Locker when done; it does not close client.
//
// A *redis.Ring is refused: it moves a key to another shard when a shard
// fails or returns, so two owners could each hold the lock on a different
// shard. Give NewRedlock one client per shard instead, or use a Cluster.
//
// Every call to Redis is bounded by the node timeout whatever the client's
// settings. A client built with ContextTimeoutEnabled applies context
// deadlines to its reads, and dlock calls it directly (the fastest setup).
// go-redis' default options do not: dlock then calls a copy of a
// *redis.Client made with WithTimeout (the same pool, with the node timeout
// as its socket deadlines), which it makes the first time it needs it, so
// hooks added to client after New may not see dlock's commands: add them
// before. Where the go-redis version makes such copies without the client's
// hooks (v9.23 does), and with a Cluster client that does not honour ctx
// deadlines, each call runs on a helper goroutine instead, which dlock stops
// waiting for at the deadline (a goroutine hand-off per call), so that the
// hooks see every command. So does a call on a client with a TLSConfig
// whose DialTimeout (default 5s) is longer than the call's timeout:
// go-redis' TLS dialer bounds a new connection's handshake by DialTimeout
// alone, not by the context (a TLS client pointed at a port that speaks
// plain text, or at a frozen server, would wait for it); set DialTimeout
// to at most the node timeout to have such calls run inline. Commands that several goroutines send to the
// Redis at the same time go out as one pipeline, through the client's
// pipeline hooks.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	if isNil(client) {
		panic("dlock: New called with a nil client")
	}
	l := newLocker(goRedisNodes([]redis.UniversalClient{client}), opts)
	l.cfg.refuseRing([]redis.UniversalClient{client})
	return l
}

// NewRedlock returns a Locker over N independent Redis masters (the Redlock
// algorithm): a lock is held when a majority, N/2+1, granted it within its
// validity, so the loss of a minority of nodes is survived. The clients must
// reach distinct deployments that do not replicate to each other. It
// returns an error wrapping ErrInvalid for an empty list, a nil client, a
// *redis.Ring (see New), or an invalid Option; and one wrapping both
// ErrMisconfigured and ErrInvalid, naming the server, for the same client
// twice, two *redis.Client of one address (Options().Addr), or two Cluster
// clients that share a seed address: a quorum of clients of one server is
// one point of failure. Two addresses of one server (127.0.0.1:P and
// localhost:P, a proxy in front of it) only the servers can tell: the
// Locker asks each node its run id (INFO server, once, sent with its first
// acquisition rounds), and an acquisition whose round finds two nodes with
// one run id fails with an error wrapping ErrMisconfigured that names both
// addresses, as does every acquisition after it (the keys the round set
// are cleaned up). A node that refuses INFO (an ACL user without +info)
// is not checked, nor is a Cluster client. Close the Locker when done; it
// does not close the clients.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(clients) == 0 {
		return nil, invalid("NewRedlock needs at least one client")
	}
	for i, c := range clients {
		if isNil(c) {
			return nil, invalid("client %d of %d is nil", i, len(clients))
		}
	}
	if err := sameAddress(clients); err != nil {
		return nil, err
	}
	l := newLocker(goRedisNodes(clients), opts)
	l.cfg.refuseRing(clients)
	if l.cfg.err != nil {
		return nil, l.cfg.err
	}
	return l, nil
}

// nodeMaker makes node i of a Locker.
type nodeMaker func(i int) *quorum.Node

// goRedisNodes makes the nodes of go-redis clients.
func goRedisNodes(clients []redis.UniversalClient) []nodeMaker {
	makers := make([]nodeMaker, len(clients))
	for i, c := range clients {
		makers[i] = func(i int) *quorum.Node { return quorum.NewNode(c, "#"+strconv.Itoa(i)) }
	}
	return makers
}

// newFamilyLocker is New (one client) and NewRedlock (several) for the
// nodes of another client family than go-redis (see internal/bridge): it
// returns an error wrapping ErrInvalid for no client or a nil one (and no
// Locker), or for an invalid Option, with the Locker, whose every call
// returns that error (as New's).
func newFamilyLocker(clients []node.Client, opts []Option) (*Locker, error) {
	if len(clients) == 0 {
		return nil, invalid("at least one client is needed")
	}
	makers := make([]nodeMaker, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, invalid("client %d of %d is nil", i, len(clients))
		}
		makers[i] = func(i int) *quorum.Node { return quorum.NewNodeOf(c, "#"+strconv.Itoa(i)) }
	}
	l := newLocker(makers, opts)
	return l, l.cfg.err
}

// isNil reports whether c is nil, also a nil pointer of a client type.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func newLocker(nodes []nodeMaker, opts []Option) *Locker {
	cfg := lockerConfig{prefix: DefaultPrefix, fenceRetention: DefaultFenceRetention}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	l := &Locker{
		quorum: quorum.For(len(nodes), 1),
		cfg:    cfg,
		keys:   make(map[waitSlot]*keyState),
		locks:  make(map[*Lock]struct{}),
		done:   make(chan struct{}),
	}
	l.id = newToken()
	l.inboxes = l.inboxPrefix()
	l.inbox = l.inboxes + l.id
	if len(nodes) == 1 {
		l.reserve = reserveFor
	}
	l.reserveArg = strconv.FormatInt(l.reserve.Milliseconds(), 10)
	l.retentionArg = strconv.FormatInt(cfg.fenceRetention.Milliseconds(), 10)
	l.inboxesArg = l.inboxes
	l.defaultTTLArg = strconv.FormatInt(DefaultTTL.Milliseconds(), 10)
	l.nameCache = keys.NewCache(cfg.prefix)
	l.renewCtx, l.renewCancel = context.WithCancel(context.Background())
	l.renewals.fire = l.renewDue
	l.bg, l.bgCancel = context.WithCancel(context.Background())
	l.hook = hookOf(cfg.hooks)
	for _, h := range cfg.hooks {
		if _, ok := h.(*logHook); ok {
			l.logsNodes = true
		}
	}
	for i, mk := range nodes {
		n := mk(i)
		if h := l.hook; h != nil {
			n.OnSuspect = func(suspect bool) {
				kind := EventNodeBack
				if suspect {
					kind = EventNodeSuspect
				}
				h.Event(context.Background(), Event{Kind: kind, Node: n.Addr})
			}
		}
		l.nodes = append(l.nodes, n)
		l.subs = append(l.subs, l.newInbox(i))
		l.cleaners = append(l.cleaners, l.newCleaner(i))
	}
	l.servers = newServerIDs(l.nodes)
	return l
}

// Close ends the Locker. Waiting Acquire calls, and later Acquire,
// TryAcquire and Do calls, return an error wrapping ErrClosed. Renewals stop.
// Every lock the Locker holds is given up so that the rest of the fleet is
// not kept waiting for a TTL: its holder is told first (Lost closes, and the
// context Do passes on is cancelled with a cause wrapping ErrLockLost and
// ErrClosed), then its key is released as by Release (bounded by the node
// timeout, on a context of its own). Release on such a lock afterwards
// returns an error wrapping ErrNotHeld. Close then waits for the waiting
// calls to return (one in an attempt returns when the attempt ends, within
// the node timeout) and for the background clean-up to remove their
// registrations from the waiting queues and to release what is due (keys
// that unanswered commands may have left, with their tombstones), up to
// three node timeouts in all (each at least 100ms), less once a node leaves
// a release unanswered for 200ms; then it unsubscribes, waits for the
// Observe calls to end (their channels close; at most one node timeout
// more), and stops the clean-up. What is left then (on a node that did not
// answer) expires: a key after its TTL, a registration after its lease (3
// minutes), and meanwhile releases pass over a registration whose Locker no
// longer listens (but on a Cluster: see the package documentation,
// Closing). A Campaign that acquired its leadership but had not announced
// it yet returns ErrClosed, and observers are told of no leader.
//
// Close returns the errors of releases that could not be confirmed and of
// the unsubscriptions, joined. It does not close the Redis clients. It is
// idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	locks := make([]*Lock, 0, len(l.locks))
	for k := range l.locks {
		locks = append(locks, k)
	}
	l.mu.Unlock()
	l.renewCancel()
	l.renewals.stop()

	errs := make([]error, len(locks))
	atOnce(len(locks), func(i int) {
		k := locks[i]
		// The holder first, the key after: nobody else may take the
		// lock while its holder still works under it.
		held := k.held()
		k.markLost(fmt.Errorf("%w: %w", ErrLockLost, ErrClosed))
		r := k.release(context.Background())
		switch {
		case r.roundErr != nil && !errors.Is(r.roundErr, ErrNotHeld):
			errs[i] = r.roundErr
		case r.roundErr == nil && held:
			// A leadership given back: observers hear of the vacancy
			// now, not when its TTL would have run out.
			k.resigned()
		}
	})
	l.timers.stop()
	// The waiting calls return ErrClosed at once, and one in an attempt
	// when the attempt ends (within its node timeout); on the way out they
	// leave the waiting queue (see putKeyState). The clean-up then runs
	// what is due (removals of registrations, releases of keys that
	// unanswered commands may have set), for a bounded time, so that the
	// fleet is not kept waiting for Lockers that are gone.
	bound := max(l.nodeTimeout(DefaultTTL), 100*time.Millisecond)
	waitAtMost(l.calls.Wait, bound)
	waitAtMost(func() {
		for _, c := range l.cleaners {
			c.Settle()
		}
	}, 2*bound)
	for _, s := range l.subs {
		errs = append(errs, s.Close())
	}
	l.mu.Lock()
	asked := l.asked.subs
	l.mu.Unlock()
	for _, s := range asked {
		errs = append(errs, s.Close())
	}
	// The observers end on l.done; each closes its subscriptions first.
	waitAtMost(l.observers.Wait, bound)
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.bgCancel()
	l.wg.Wait()
	for _, n := range l.nodes {
		n.Close()
	}
	return errors.Join(errs...)
}

// atOnce runs f(0), …, f(n-1) each on a goroutine of its own (one alone on
// the caller's), and returns when all have returned.
func atOnce(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// waitAtMost waits for wait to return, for at most d.
func waitAtMost(wait func(), d time.Duration) {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// join counts a goroutine's work in wg, which Close waits for: an
// acquisition call in l.calls (Close waits for it to leave the waiting
// queue), a renewal in l.wg, an observer in l.observers. It reports false once the Locker is closed, and
// the work must not start (an acquisition returns ErrClosed); otherwise the
// caller calls wg.Done when done. (Under l.mu, so that no Add comes after
// Close began to wait.)
func (l *Locker) join(wg *sync.WaitGroup) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	wg.Add(1)
	return true
}

// spawn runs fn on a goroutine that Close waits for (once Close has begun
// waiting, on one it does not wait for). Used for clean-up that must not be
// lost: releases of partial acquisitions, leaving the waiting queue.
func (l *Locker) spawn(fn func()) {
	l.mu.Lock()
	tracked := !l.stopped
	if tracked {
		l.wg.Add(1)
	}
	l.mu.Unlock()
	go func() {
		if tracked {
			defer l.wg.Done()
		}
		fn()
	}()
}

// nodeErr is node i's failure, for an error message. A plain client that
// reached a node of a Cluster is told what to use instead: it gets MOVED
// only for the keys of the other nodes' slots, so that some keys work and
// others do not. A client without the password a server requires is told
// so: Redis' own words for it are "NOAUTH Authentication required", or,
// for a command of more than ten arguments (the scripts'), "Protocol
// error: unauthenticated multibulk length".
func (l *Locker) nodeErr(i int, err error) error {
	switch {
	case !l.nodes[i].Cluster && (node.HasErrorPrefix(err, "MOVED") || node.HasErrorPrefix(err, "ASK") || node.HasErrorPrefix(err, "CROSSSLOT")):
		err = fmt.Errorf("%w (the server is a node of a Redis Cluster, which a plain client reaches only for the keys of its own slots: give dlock a *redis.ClusterClient, from redis.NewClusterClient)", err)
	case node.HasErrorPrefix(err, "NOAUTH") || (quorum.IsReply(err) && strings.Contains(err.Error(), "unauthenticated")):
		err = fmt.Errorf("%w (the server requires a password: set Password, and Username for an ACL user, in the client's options)", err)
	}
	return &NodeError{Addr: l.nodes[i].Addr, Err: err}
}

func (l *Locker) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// quorumFor is the number of grants an acquisition with this limit needs
// (see WithLimit and quorum.For).
func (l *Locker) quorumFor(limit int) int { return quorum.For(len(l.nodes), limit) }

// limitArg is the limit as the scripts take it: "0" for a shared hold.
func limitArg(limit int, shared bool) any {
	switch {
	case shared:
		return "0"
	case limit <= 1:
		return "1"
	}
	return strconv.Itoa(limit)
}

// standIn is how long the waiter after a woken one waits before it tries in
// its place.
func (l *Locker) standIn() time.Duration { return l.reserve + standInAfter }

// nodeTimeout is how long a round waits for a node when the TTL is ttl.
func (l *Locker) nodeTimeout(ttl time.Duration) time.Duration {
	d := l.cfg.nodeTimeout
	if d == 0 {
		d = min(ttl/5, maxNodeTimeout)
	}
	return min(d, ttl/3)
}

func (l *Locker) lockConfig(key string, opts []LockOption) (lockConfig, error) {
	if l.cfg.err != nil {
		return lockConfig{}, l.cfg.err
	}
	if key == "" {
		return lockConfig{}, invalid("key must not be empty")
	}
	if len(opts) == 0 {
		return lockConfig{ttl: DefaultTTL, autoRenew: true}, nil
	}
	return applyLockOptions(opts)
}

// applyLockOptions is the configuration opts give. (A function of its own:
// the configuration escapes to the heap only when there are options.)
func applyLockOptions(opts []LockOption) (lockConfig, error) {
	c := lockConfig{ttl: DefaultTTL, autoRenew: true}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err == nil && c.shared && c.limit > 0 {
		c.err = invalid("WithShared and WithLimit(%d) do not combine: shared holds have no limit", c.limit)
	}
	return c, c.err
}

// inboxPrefix is the prefix of every Locker's inbox channel.
func (l *Locker) inboxPrefix() string { return l.cfg.prefix + "inbox:" }

// buryFor is how long a tombstone refuses the commands of a dead token (see
// cleaner): far longer than a command can be held up in the network (TCP
// gives up retransmitting after about 15 minutes), while it costs a few
// bytes in Redis for the rare commands whose answer was missed.
const buryFor = time.Hour

// buryForArg is buryFor in milliseconds, as the scripts take it.
var buryForArg = strconv.FormatInt(buryFor.Milliseconds(), 10)

// waiterLeaseArg is waiterLease in milliseconds, as the scripts take it.
var waiterLeaseArg = strconv.FormatInt(waiterLease.Milliseconds(), 10)

func init() { bridge.NewLocker = newFamilyLocker }
