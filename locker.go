package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	mrand "math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// A Locker acquires locks on one Redis deployment ([New]) or on a quorum of
// independent Redis masters ([NewRedlock]). It is safe for concurrent use by
// many goroutines; one Locker per process is the intended use, since waiters
// for the same key in one Locker queue locally and share one subscription.
type Locker struct {
	nodes  []*quorum.Node
	quorum int
	cfg    lockerConfig
	hook   Hook // nil: no hook (see WithHook)
	// reserve is how long a release keeps the lock for the woken waiter:
	// reserveFor on one Redis, 0 on a quorum (where each node would pick
	// its own next waiter and could split the votes).
	reserve time.Duration

	// id names this Locker in waiter registrations; a waiter is told of
	// releases on the channel inbox (prefix + "inbox:" + id).
	id      string
	inbox   string
	inboxes string // the prefix of every inbox channel
	// Script arguments, boxed once: reserve in milliseconds (release.lua),
	// the fence retention in milliseconds, the inbox prefix, DefaultTTL in
	// milliseconds.
	reserveArg, retentionArg, inboxesArg, defaultTTLArg any
	seq                                                 atomic.Uint64
	subs                                                []*subscriber
	cleaners                                            []*cleaner // per node
	// recent caches the names of recently used keys (see names).
	recent [namesCacheSize]atomic.Pointer[names]
	seed   maphash.Seed

	// renewCtx is cancelled when Close begins: renewals under way stop.
	renewCtx    context.Context
	renewCancel context.CancelFunc
	// bg is cancelled when Close ends: background clean-up stops.
	bg       context.Context
	bgCancel context.CancelFunc

	mu      sync.Mutex
	keys    map[string]*keyState
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
// hooks see every command. Commands that several goroutines send to the
// Redis at the same time go out as one pipeline, through the client's
// pipeline hooks.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	if isNil(client) {
		panic("dlock: New called with a nil client")
	}
	return newLocker([]redis.UniversalClient{client}, opts)
}

// NewRedlock returns a Locker over N independent Redis masters (the Redlock
// algorithm): a lock is held when a majority, N/2+1, granted it within its
// validity, so the loss of a minority of nodes is survived. The clients must
// reach distinct deployments that do not replicate to each other. It
// returns an error wrapping ErrInvalid for an empty list, a nil client, the
// same client twice, a *redis.Ring (see New), or an invalid Option. Close the Locker when done; it
// does not close the clients.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(clients) == 0 {
		return nil, invalid("NewRedlock needs at least one client")
	}
	seen := make(map[redis.UniversalClient]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, invalid("client %d of %d is nil", i, len(clients))
		}
		if j, dup := seen[c]; dup {
			return nil, invalid("clients %d and %d are the same client", j, i)
		}
		seen[c] = i
	}
	l := newLocker(clients, opts)
	if l.cfg.err != nil {
		return nil, l.cfg.err
	}
	return l, nil
}

// isNil reports whether c is nil, also a nil pointer of a client type.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func newLocker(clients []redis.UniversalClient, opts []Option) *Locker {
	cfg := lockerConfig{prefix: DefaultPrefix, fenceRetention: DefaultFenceRetention}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for i, c := range clients {
		if _, ring := c.(*redis.Ring); ring && cfg.err == nil {
			cfg.err = invalid("client %d is a *redis.Ring, which moves keys between shards when one fails, so a lock could be held twice: use NewRedlock with one client per shard, or a Cluster", i)
		}
	}
	l := &Locker{
		quorum: len(clients)/2 + 1,
		cfg:    cfg,
		keys:   make(map[string]*keyState),
		locks:  make(map[*Lock]struct{}),
		done:   make(chan struct{}),
	}
	l.id = newToken()
	l.inboxes = l.inboxPrefix()
	l.inbox = l.inboxes + l.id
	if len(clients) == 1 {
		l.reserve = reserveFor
	}
	l.reserveArg = strconv.FormatInt(l.reserve.Milliseconds(), 10)
	l.retentionArg = strconv.FormatInt(cfg.fenceRetention.Milliseconds(), 10)
	l.inboxesArg = l.inboxes
	l.defaultTTLArg = strconv.FormatInt(DefaultTTL.Milliseconds(), 10)
	l.seed = maphash.MakeSeed()
	l.renewCtx, l.renewCancel = context.WithCancel(context.Background())
	l.bg, l.bgCancel = context.WithCancel(context.Background())
	l.hook = hookOf(cfg.hooks)
	for i, c := range clients {
		node := quorum.NewNode(c, "#"+strconv.Itoa(i))
		if h := l.hook; h != nil {
			node.OnSuspect = func(suspect bool) {
				kind := EventNodeBack
				if suspect {
					kind = EventNodeSuspect
				}
				h.Event(context.Background(), Event{Kind: kind, Node: node.Addr})
			}
		}
		l.nodes = append(l.nodes, node)
		l.subs = append(l.subs, &subscriber{l: l, node: i})
		l.cleaners = append(l.cleaners, &cleaner{l: l, node: i, jobs: make(map[string]*cleanup), kick: make(chan struct{}, 1)})
	}
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

	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, k := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The holder first, the key after: nobody else may take the
			// lock while its holder still works under it.
			k.mu.Lock()
			held := !k.lost && !k.released
			k.mu.Unlock()
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
		}()
	}
	wg.Wait()
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
			c.settle()
		}
	}, 2*bound)
	for _, s := range l.subs {
		errs = append(errs, s.close())
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
// others do not.
func (l *Locker) nodeErr(i int, err error) error {
	if !l.nodes[i].Cluster && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "CROSSSLOT")) {
		err = fmt.Errorf("%w (the server is a node of a Redis Cluster, which a plain client reaches only for the keys of its own slots: give dlock a *redis.ClusterClient, from redis.NewClusterClient)", err)
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

// names are the Redis keys of one lock (DESIGN §3). They share a hash tag,
// so that every script touches one Cluster slot. A names is never modified
// once made: locks, waiters and the cache share it.
type names struct {
	key                                             string // the lock's name, as passed to Acquire
	lock, fence, waiters, leases, meta, limit, dead string
	// The KEYS of acquire.lua, release.lua, extend.lua and raise.lua, boxed
	// once (see script).
	acquireKeys [7]any
	releaseKeys [7]any
	extendKeys  [5]any
	raiseKeys   [2]any
}

// tagEscape starts the hash tag of a key that begins with '}' or with
// tagEscape itself. Redis hashes the text between the first '{' and the
// first '}' after it, and hashes the whole name when that text is empty: the
// lock "}x" as "dlock:{}x}" would put each of its keys in a different slot.
// "dlock:{\x00}x}" has the tag "\x00". Escaping the keys that begin with the
// escape too keeps names distinct; every other key keeps the plain name
// "dlock:{K}". (The prefix cannot contain braces: see WithPrefix.)
const tagEscape = "\x00"

// namesCacheSize is the number of slots of a Locker's cache of names: a key
// locked again soon (a job's lock, taken every run) is not named again.
const namesCacheSize = 64

// names returns the names of key's Redis keys, from the cache if key was
// used recently.
func (l *Locker) names(key string) *names {
	slot := &l.recent[maphash.String(l.seed, key)%namesCacheSize]
	if n := slot.Load(); n != nil && n.key == key {
		return n
	}
	n := l.makeNames(key)
	slot.Store(n)
	return n
}

func (l *Locker) makeNames(key string) *names {
	tag := key
	if key[0] == '}' || key[0] == tagEscape[0] {
		tag = tagEscape + key
	}
	// One string holds all the names, which are slices of it: a lock's
	// names cost one allocation (a concatenation of many strings is one).
	p := l.cfg.prefix
	all := p + "{" + tag + "}:fence" + p + "{" + tag + "}:waiters" + p + "{" + tag + "}:wexp" + p + "{" + tag + "}:meta" + p + "{" + tag + "}:limit" + p + "{" + tag + "}:dead"
	lock := len(p) + len(tag) + 2   // the lock's name: prefix{tag}
	w := lock + len(":fence")       // where the waiters' name starts
	e := w + lock + len(":waiters") // where the leases' name starts
	m := e + lock + len(":wexp")    // where the metadata's name starts
	li := m + lock + len(":meta")   // where the limit's name starts
	d := li + lock + len(":limit")  // where the tombstones' name starts
	n := &names{
		key:     key,
		lock:    all[:lock],
		fence:   all[:w],
		waiters: all[w:e],
		leases:  all[e:m],
		meta:    all[m:li],
		limit:   all[li:d],
		dead:    all[d:],
	}
	lk, fk, wk, ek, mk, lik, dk := any(n.lock), any(n.fence), any(n.waiters), any(n.leases), any(n.meta), any(n.limit), any(n.dead)
	n.acquireKeys = [7]any{lk, fk, wk, ek, mk, lik, dk}
	n.releaseKeys = [7]any{lk, wk, ek, mk, lik, dk, fk}
	n.extendKeys = [5]any{lk, mk, lik, fk, dk}
	n.raiseKeys = [2]any{fk, mk}
	return n
}

// quorumFor is the number of grants an acquisition with this limit needs
// (see WithLimit): a majority for a lock, ⌊N·n/(n+1)⌋+1 for n permits.
func (l *Locker) quorumFor(limit int) int {
	if limit <= 1 {
		return l.quorum
	}
	n := len(l.nodes)
	return n*limit/(limit+1) + 1
}

// limitArg is the limit as the scripts take it.
func limitArg(limit int) any {
	if limit <= 1 {
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
	return c, c.err
}

// TryAcquire makes one attempt to acquire the lock named key and does not
// wait. On success the caller owns the lock until it calls Release, or until
// Lost fires. Otherwise the error wraps ErrNotAcquired when the lock is held
// by someone else, ErrUnavailable when too few nodes answered, or
// ErrMisconfigured when they refused the command for good, with each node's
// failure as *NodeError; ErrClosed on a closed Locker; ErrInvalid for bad
// arguments. A failed attempt leaves nothing behind in Redis: what it set on
// some nodes, or what a node that did not answer may set when it resumes,
// is cleaned up in the background.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := l.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	var a acquisition
	a.start(l, ctx, key, cfg)
	k, err := l.tryAcquire(ctx, key, cfg, &a)
	a.end(k, err)
	return k, err
}

func (l *Locker) tryAcquire(ctx context.Context, key string, cfg lockConfig, a *acquisition) (*Lock, error) {
	if !l.join(&l.calls) {
		return nil, closedErr(key)
	}
	defer l.calls.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, err)
	}
	k, res := l.attempt(ctx, key, cfg, nil, nil)
	a.attempted(k, res.class())
	if k != nil {
		return k, nil
	}
	return nil, res.err(key, ctx)
}

func closedErr(key string) error { return fmt.Errorf("%w: acquire %q", ErrClosed, key) }

// Acquire acquires the lock named key, waiting until it is free or ctx ends.
// On success the caller owns the lock until it calls Release, or until Lost
// fires; a held lock can be lost at any moment (a paused process, a
// partition), so work done under it should watch Lost or use Do, and storage
// that can check the Fence should.
//
// While waiting it costs next to nothing: it is woken by the holder's release
// (one waiting process per release, in order of arrival), by the holder's TTL
// running out, or by a slow fallback timer; goroutines of one Locker waiting
// for the same key queue locally and only the first one talks to Redis.
//
// When ctx ends first it returns an error wrapping ctx.Err() and
// ErrNotAcquired if the lock was held, or ErrUnavailable if too few nodes
// answered (Acquire tries again on a short backoff, from the node timeout to
// 1s, while they do not), and leaves nothing behind in Redis. It returns at
// once an error wrapping ErrMisconfigured when the nodes refuse the command
// for good (see ErrMisconfigured), including a refused subscription to the
// waiters' channel; ErrClosed when the Locker is closed; ErrInvalid for bad
// arguments.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := l.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	var a acquisition
	a.start(l, ctx, key, cfg)
	k, err := l.acquire(ctx, key, cfg, &a)
	a.end(k, err)
	return k, err
}

// acquire is Acquire once the options are checked; a follows it for the
// hook.
func (l *Locker) acquire(ctx context.Context, key string, cfg lockConfig, a *acquisition) (*Lock, error) {
	if !l.join(&l.calls) {
		return nil, closedErr(key)
	}
	defer l.calls.Done()
	// The uncontended path: in a Locker that has never had to wait, with
	// no goroutine of it waiting for the key, a first attempt needs none of
	// the waiting machinery (it could not register as a waiter anyway: the
	// inbox is not subscribed yet). If it fails, the wait below starts
	// afresh, in the local queue (its answer may be stale by the time this
	// goroutine is at the head of it): one more round trip, the first time
	// a Locker waits.
	if l.neverWaited(key) {
		k, res := l.attempt(ctx, key, cfg, nil, nil)
		a.attempted(k, res.class())
		if k != nil {
			return k, nil
		}
		if ctx.Err() != nil || res.class() == ErrMisconfigured || res.closed || res.limitErr != nil {
			return nil, res.err(key, ctx)
		}
	}
	ks := l.keyState(key)
	defer l.putKeyState(ks)
	if err := ks.enter(ctx, l.done); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil, closedErr(key)
		}
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, err)
	}
	defer ks.exit()

	timerWakes, splits, errWakes := 0, 0, 0
	// last is the last attempt that ctx did not cut short: when ctx ends,
	// it says whether the wait was for a busy lock or for nodes.
	var last *attemptResult
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if l.isClosed() {
			return nil, closedErr(key)
		}
		// A wake-up that arrived before this attempt is answered by it.
		select {
		case <-ks.wake:
		default:
		}
		ready := l.inboxReady()
		k, res := l.attempt(ctx, key, cfg, ks, ready)
		a.attempted(k, res.class())
		if k != nil {
			return k, nil
		}
		if ctx.Err() != nil && res.cutShort(false) && last != nil {
			res = *last
		}
		if ctx.Err() != nil || res.class() == ErrMisconfigured || res.closed || res.limitErr != nil {
			return nil, res.err(key, ctx)
		}
		last = &res
		if err := l.inboxRefused(); err != nil {
			// Waiting cannot work: releases would never be heard.
			return nil, fmt.Errorf("%w: %q: cannot wait: the subscription to the waiters' channel %s was refused: %w",
				ErrMisconfigured, key, l.inbox, err)
		}
		if !allTrue(ready) && l.subscribe(ctx, l.nodeTimeout(cfg.ttl)) {
			// Subscribed before registering as a waiter; try again at
			// once, registering. (A release between the failed attempt
			// and the subscription would otherwise go unheard.)
			continue
		}
		wait := fallback(timerWakes)
		if p := res.pttl; p > 0 && p < wait {
			// The holder's TTL runs out first: try then, with a little
			// jitter so that waiting processes do not all arrive at once.
			wait = p + time.Duration(mrand.Int64N(int64(p/10+time.Millisecond)))
		}
		if res.notWaited > 0 {
			// The round did not wait for nodes that recently did not
			// answer; try again as soon as a round that waited for them
			// would have ended, in case they are back.
			wait = min(wait, l.nodeTimeout(cfg.ttl))
		}
		if len(res.errs) > res.notWaited {
			// Nodes failed or did not answer in time: nothing will wake
			// this waiter when they are back, so try again on a short
			// backoff (the node timeout, doubling, at most errorRetryCap).
			wait = min(wait, errorRetry(l.nodeTimeout(cfg.ttl), errWakes))
			errWakes++
		} else {
			errWakes = 0
		}
		if res.late {
			// The lock was free, but the round took too long to leave any
			// validity (a slow node, a short TTL): try again at once.
			wait = time.Duration(mrand.Int64N(int64(time.Millisecond)))
		}
		if res.ok > 0 && !res.late && splits < maxSplitRetries {
			// Some nodes of a quorum granted the lock but not enough: it
			// was free, or changing hands, and contenders split the
			// votes. Their clean-up wakes nobody, so try again shortly,
			// after a random delay that breaks the tie, a few times.
			splits++
			wait = time.Millisecond + time.Duration(mrand.Int64N(int64(splitJitter)))
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ks.wake:
			timer.Stop()
			splits = 0
			a.woken()
		case <-timer.C:
			timerWakes++
		case <-ctx.Done():
			return nil, res.err(key, ctx)
		case <-l.done:
			return nil, closedErr(key)
		}
	}
}

// neverWaited reports whether no goroutine of the Locker waits for key and
// the Locker's inbox has not been subscribed on any node.
func (l *Locker) neverWaited(key string) bool {
	l.mu.Lock()
	_, waiting := l.keys[key]
	l.mu.Unlock()
	if waiting {
		return false
	}
	for _, s := range l.subs {
		s.mu.Lock()
		started := s.ps != nil
		s.mu.Unlock()
		if started {
			return false
		}
	}
	return true
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}

// errorRetry is the n-th wait after an attempt that failed on node errors:
// base·2ⁿ capped at errorRetryCap, scaled by a random factor in [0.75, 1).
func errorRetry(base time.Duration, n int) time.Duration {
	d := errorRetryCap
	if n < 20 {
		d = min(base<<n, errorRetryCap)
	}
	return d - time.Duration(mrand.Int64N(int64(d/4)+1))
}

// fallback is the n-th fallback sleep: fallbackBase·2ⁿ capped at fallbackCap,
// scaled by a random factor in [0.75, 1).
func fallback(n int) time.Duration {
	d := fallbackCap
	if n < 10 {
		d = min(fallbackBase<<n, fallbackCap)
	}
	return d - time.Duration(mrand.Int64N(int64(d/4)))
}

type lockCtxKey struct{}

// LockFromContext returns the lock that Do holds while it runs fn, from the
// context Do passes to fn (or one derived from it), so that fn can pass
// its Fence to storage that checks it; ok is false for any other context.
func LockFromContext(ctx context.Context) (k *Lock, ok bool) {
	k, ok = ctx.Value(lockCtxKey{}).(*Lock)
	return k, ok
}

// Do acquires the lock named key (waiting, as Acquire), runs fn while holding
// it and releases it, even if fn panics. The context passed to fn is
// cancelled, with a cause wrapping ErrLockLost, as soon as the lock is lost
// (also when the Locker is closed), when ctx ends, and when fn returns,
// before the lock is released, so that goroutines fn started cannot outlive
// the lock unnoticed; LockFromContext returns the lock from it (for its
// Fence). Do returns the Acquire error if the lock was not acquired (fn did
// not run); otherwise fn's error, joined with ErrLockLost if the lock was lost
// before fn returned, or with the Release error if the release could not be
// confirmed (fn ran; the lock then expires after its TTL).
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) (err error) {
	if fn == nil {
		return invalid("Do needs a function, got nil")
	}
	k, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockCtxKey{}, k))
	k.onLost(func(cause error) { cancel(cause) })

	defer func() {
		// fn's context ends before the lock is released: goroutines fn
		// left behind must not go on as if they held it.
		cancel(errDoReturned)
		lost := k.wasLost()
		rerr := k.Release(context.WithoutCancel(ctx))
		switch {
		case lost || errors.Is(rerr, ErrNotHeld):
			err = errors.Join(err, fmt.Errorf("%w: %q", ErrLockLost, key))
		case rerr != nil:
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx)
}

// newToken returns 128 random bits from crypto/rand, hex-encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// acquireReply is one node's answer to acquire.lua.
type acquireReply struct {
	ok    bool
	fence uint64
	pttl  int64
	pos   string
}

func parseAcquire(v any) (acquireReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return acquireReply{}, badReply("unexpected acquire reply %v", v)
	}
	flag, _ := arr[0].(int64)
	if flag == 1 {
		// The fence comes as a decimal string: exact for any 64-bit value.
		f, err := parseUint(arr[1])
		if err != nil {
			return acquireReply{}, badReply("unexpected fence in acquire reply %v: %v", v, err)
		}
		return acquireReply{ok: true, fence: f}, nil
	}
	n, _ := arr[1].(int64)
	r := acquireReply{pttl: n}
	if len(arr) > 2 {
		switch p := arr[2].(type) {
		case string:
			r.pos = p
		case int64:
			r.pos = strconv.FormatInt(p, 10)
		}
	}
	return r, nil
}

// parseUint reads a counter that a script returned as a string (or, from an
// older script, an integer).
func parseUint(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseUint(x, 10, 64)
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("negative counter %d", x)
		}
		return uint64(x), nil
	}
	return 0, fmt.Errorf("counter of type %T", v)
}

// attemptResult says why an attempt failed.
type attemptResult struct {
	outcome
	// pttl is how long until the lock may be free: the shortest remaining
	// TTL of the holder (at least 1ms: a key that expires within the
	// millisecond is timed as 1ms), or the stand-in delay for a lock
	// reserved for a woken waiter; 0 when nothing times the wait.
	pttl   time.Duration
	late   bool // quorum reached but no validity left, or the fence raise failed
	closed bool // acquired while the Locker was closed, and given back
	// notWaited counts suspect nodes the round decided without: their
	// answers, arriving after it, may show they are back.
	notWaited int
	// limitErr is set when a node holds the key with another limit (see
	// WithLimit): an error wrapping ErrInvalid, returned at once.
	limitErr error
}

// class is the attempt's error class (see outcome.class): a quorum reached
// too late is ErrUnavailable (the nodes were too slow), and an acquisition
// made while the Locker was closing is ErrClosed.
func (r *attemptResult) class() error {
	switch {
	case r.closed:
		return ErrClosed
	case r.late:
		return ErrUnavailable
	}
	return r.outcome.class(ErrNotAcquired)
}

// cutShort reports whether every failure of the attempt is a context's end
// (with cancelledOnly, a cancellation: a deadline gave the nodes all the
// time the caller had): when the caller's ctx has ended, such an attempt
// says nothing of the nodes.
func (r *attemptResult) cutShort(cancelledOnly bool) bool {
	for _, err := range r.errs {
		if !errors.Is(err, context.Canceled) && (cancelledOnly || !errors.Is(err, context.DeadlineExceeded)) {
			return false
		}
	}
	return r.ok == 0 && r.refused == 0
}

// err is the error of a failed attempt, or of a wait that ended after it
// because ctx ended (ctx's error is wrapped too, except for a permanent
// error, which did not depend on it). An attempt that ctx cut short says
// nothing of the nodes: the caller gave up, and the error is ErrNotAcquired.
func (r *attemptResult) err(key string, ctx context.Context) error {
	if r.limitErr != nil {
		return r.limitErr
	}
	class := r.class()
	if ctx.Err() != nil && r.cutShort(true) && !r.closed {
		return fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctx.Err())
	}
	var what string
	switch {
	case class == ErrClosed:
		return closedErr(key)
	case r.late:
		what = fmt.Sprintf("%q: quorum reached too late, no validity left", key)
	case class == ErrNotAcquired:
		what = fmt.Sprintf("%q is held by another owner%s", key, r.counts("granted"))
	default:
		what = fmt.Sprintf("%q%s", key, r.counts("granted"))
	}
	if ctx.Err() != nil && class != ErrMisconfigured {
		return r.wrap(class, what, ctx.Err())
	}
	return r.wrap(class, what)
}

// attempt runs one acquisition round on every node. ks is nil for an attempt
// that must not register as a waiter; otherwise it registers on the nodes
// where ready says the Locker's inbox is subscribed.
//
// Whatever the outcome, no key is left behind by it: on failure the nodes
// that granted, and those that did not answer (they may run the command when
// they resume), are cleaned up in the background (see cleaner); on success
// the lock records the nodes that did not answer, and cleans them up when it
// dies.
func (l *Locker) attempt(ctx context.Context, key string, cfg lockConfig, ks *keyState, ready []bool) (*Lock, attemptResult) {
	token := newToken()
	tokenArg, ttlArg := any(token), l.ttlArg(cfg.ttl)
	timeout := l.nodeTimeout(cfg.ttl)
	var nm *names
	if ks != nil {
		nm = ks.names
	} else {
		nm = l.names(key)
	}

	n := len(l.nodes)
	var regs []nodeReg
	if ks != nil {
		regs = ks.registration(ready)
	}
	q := l.quorumFor(cfg.limit)
	lim := limitArg(cfg.limit)
	res := attemptResult{outcome: l.newOutcome(key)}
	res.q = q
	var args []any // the same command for every node when not registering
	if regs == nil {
		args = acquireScript.args(nm.acquireKeys[:], tokenArg, ttlArg, l.retentionArg, cfg.metadata, lim)
	}

	late := &lateAcquire{l: l, ks: ks, regs: regs, nm: nm, token: token, ttl: cfg.ttl}
	late.decided.Add(1)
	var k *Lock

	start := time.Now()
	results, missing := quorum.Fanout(ctx, l.nodes, timeout,
		func(ctx context.Context, i int, c redis.UniversalClient) (acquireReply, error) {
			a := args
			if regs != nil {
				reg := regs[i]
				a = acquireScript.args(nm.acquireKeys[:], tokenArg, ttlArg, l.retentionArg, cfg.metadata, lim,
					reg.member, waiterLeaseArg, reg.pos, reg.queued, reg.refresh)
			}
			v, err := l.runScript(ctx, c, timeout, acquireScript, a)
			if err != nil {
				return acquireReply{}, err
			}
			return parseAcquire(v)
		},
		func(rs []quorum.Result[acquireReply], suspects int) bool {
			g, f := 0, 0
			for _, r := range rs {
				if r.Err == nil && r.Val.ok {
					g++
				} else {
					f++
				}
			}
			// Nodes that recently did not answer in time are not waited
			// for: with them counted as failed, the quorum is out of reach.
			return g >= q || f+suspects > n-q
		},
		late)

	res.callerDone = ctx.Err() != nil
	var fence uint64
	var grantedNodes []int
	// effects: what each node's answer (or its absence) shows.
	// On the stack for up to 8 nodes.
	var effBuf [8]effect
	var ansBuf [8]bool
	effects, answered := perNode(effBuf[:], n), perNode(ansBuf[:], n)
	for i := range effects {
		effects[i] = effUnknown
	}
	for _, r := range results {
		effects[r.Node] = l.effectOf(r.Node, r.Err, r.Val.ok)
		answered[r.Node] = true
		switch {
		case r.Err != nil:
			if held, ok := limitMismatch(r.Err); ok && res.limitErr == nil {
				res.limitErr = limitError(key, held, max(cfg.limit, 1))
			}
			res.failed(l, r.Node, r.Err)
		case r.Val.ok:
			res.ok++
			grantedNodes = append(grantedNodes, r.Node)
			fence = max(fence, r.Val.fence)
		case r.Val.pttl == -1:
			// A value without expiry: not written by dlock, which always
			// sets one. Another program uses the key: waiting will not
			// free it.
			res.failed(l, r.Node, badReply("the lock key %s holds a value without expiry, which dlock did not write", nm.lock))
			if ks != nil {
				ks.registered(r.Node, regs[r.Node], r.Val.pos) // to remove it when leaving
			}
		default:
			res.refused++
			// The holder's remaining TTL times the wait (0: it expires
			// within the millisecond). A reservation for a woken waiter
			// (-3) is timed by the stand-in delay: by then the woken
			// waiter holds the lock, with a TTL that times the next try,
			// or is gone. A key without expiry (-1) times nothing.
			var p time.Duration
			switch {
			case r.Val.pttl >= 0:
				p = max(time.Duration(r.Val.pttl)*time.Millisecond, time.Millisecond)
			case r.Val.pttl == -3:
				p = l.standIn()
			}
			if p > 0 && (res.pttl == 0 || p < res.pttl) {
				res.pttl = p
			}
			if ks != nil {
				ks.registered(r.Node, regs[r.Node], r.Val.pos)
			}
		}
	}
	res.missed(l, missing)
	for _, m := range missing {
		if errors.Is(m.Err, quorum.ErrNotWaited) {
			res.notWaited++
		}
	}
	// A node that did not answer in the round answers late (the late
	// handler then settles what it did), except one called inline (one
	// Redis, see quorum.Call), whose command may run at any time.
	lateComes := n > 1 || len(missing) == 0 || !missing[0].Inline
	if ks != nil {
		for i, e := range effects {
			if e == effUnknown && (answered[i] || !lateComes) {
				ks.unanswered(i, regs[i])
			}
		}
	}

	if res.ok >= q {
		ok := true
		if n > 1 {
			ok = l.raiseFences(ctx, nm, token, cfg.ttl, fence, results, timeout, q)
		}
		// Validity left, beyond the margin before which Lost fires.
		validUntil := start.Add(cfg.ttl - drift(cfg.ttl))
		if ok && time.Now().Before(validUntil.Add(-lostMargin(cfg.ttl))) {
			var leaseBuf [8]nodeLease
			leases := perNode(leaseBuf[:], n)
			for i, e := range effects {
				switch e {
				case effSet:
					leases[i].until = validUntil
				case effUnknown:
					leases[i].unknown = 1
				}
			}
			k = l.newLock(key, nm, token, tokenArg, fence, cfg, leases)
			if !k.start(start) {
				// Closed meanwhile: give it back.
				k.release(context.Background())
				k = nil
				res.closed = true
			}
		} else {
			res.late = true
		}
	}
	if k == nil {
		// Release wherever the key may have been set: granted nodes, and
		// nodes whose answer was lost or late (at once, burying the token,
		// also where a late answer will come: the Locker may be closed
		// before it does).
		now := time.Now()
		for i, e := range effects {
			if clean, bury := e.cleans(); clean && !res.closed {
				// A grant of a split vote wakes nobody: the release that
				// freed the lock woke a waiter already.
				l.clean(i, nm, token, cfg.ttl, bury, now, e == effUnknown)
			}
		}
	} else if ks != nil {
		ks.acquired(grantedNodes)
	}
	late.k = k
	late.decided.Done()
	return k, res
}

// lateAcquire handles the answers to an attempt that arrive after its round:
// once the attempt's outcome is known (decided), such an answer goes to the
// lock (k) if it succeeded, or has the node cleaned up if it failed.
type lateAcquire struct {
	l       *Locker
	ks      *keyState
	regs    []nodeReg
	nm      *names
	token   string
	ttl     time.Duration
	decided sync.WaitGroup
	k       *Lock // set before decided is done
}

func (a *lateAcquire) Late(r quorum.Result[acquireReply]) {
	a.decided.Wait()
	e := a.l.effectOf(r.Node, r.Err, r.Val.ok)
	if a.ks != nil {
		a.ks.lateAnswer(r.Node, a.regs[r.Node], e, r.Val.pos)
	}
	if a.k != nil {
		a.k.lateAnswer(r.Node, e)
	} else if clean, bury := e.cleans(); clean {
		a.l.clean(r.Node, a.nm, a.token, a.ttl, bury, time.Now(), true)
	}
}

// raiseFences makes sure that at least a quorum of nodes holds a fence
// counter ≥ fence: nodes of the granting quorum that returned less are raised
// (compare-and-raise). It reports whether a quorum is confirmed.
func (l *Locker) raiseFences(ctx context.Context, nm *names, token string, ttl time.Duration, fence uint64, results []quorum.Result[acquireReply], timeout time.Duration, q int) bool {
	confirmed := 0
	var low []int
	for _, r := range results {
		if r.Err == nil && r.Val.ok {
			if r.Val.fence >= fence {
				confirmed++
			} else {
				low = append(low, r.Node)
			}
		}
	}
	if confirmed >= q {
		return true
	}
	need := q - confirmed
	args := raiseScript.args(nm.raiseKeys[:], strconv.FormatUint(fence, 10), l.counterLife(ttl), token)
	raised := func(r quorum.Result[uint64]) bool { return r.Err == nil && r.Val >= fence }
	rs, _ := quorum.Fanout(ctx, l.subset(low), timeout,
		func(ctx context.Context, _ int, c redis.UniversalClient) (uint64, error) {
			v, err := raiseScript.run(ctx, c, args)
			if err != nil {
				return 0, err
			}
			return parseUint(v)
		},
		func(rs []quorum.Result[uint64], _ int) bool {
			ok := 0
			for _, r := range rs {
				if raised(r) {
					ok++
				}
			}
			return ok >= need || len(rs)-ok > len(low)-need
		}, nil)
	for _, r := range rs {
		if raised(r) {
			confirmed++
		}
	}
	return confirmed >= q
}

func (l *Locker) subset(idx []int) []*quorum.Node {
	ns := make([]*quorum.Node, len(idx))
	for i, j := range idx {
		ns[i] = l.nodes[j]
	}
	return ns
}

// runRelease runs release.lua with c, node i's client: expected is the
// owner token or a reservation "~ID"; leaving is a waiter id to remove from
// the queue, or ""; wake says whether to wake the next waiter; meta whether
// the owner may have stored metadata; bury whether
// to leave a tombstone for expected, a dead token of which a command may
// still run (see cleaner).
func (l *Locker) runRelease(ctx context.Context, i int, c redis.UniversalClient, nm *names, expected any, leaving string, wake, meta, bury bool) (int64, error) {
	var w, m, listeners, tomb any = "0", "0", "1", "0"
	if wake {
		w = "1"
	}
	if meta {
		m = "1"
	}
	if bury {
		tomb = buryForArg
	}
	if l.nodes[i].Cluster {
		// An inbox's subscription may sit on another node of the Cluster:
		// PUBLISH does not count its receivers there.
		listeners = "0"
	}
	v, err := releaseScript.run(ctx, c, releaseScript.args(nm.releaseKeys[:], expected, l.inboxesArg, l.reserveArg, leaving, w, m, listeners, tomb, l.retentionArg))
	return intReply("release", v, err)
}

// intReply is a script's integer reply (of release.lua, extend.lua).
func intReply(script string, v any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, badReply("unexpected %s reply %v", script, v)
	}
	return n, nil
}

// counterLife is how long a fence counter lives at least after a use by a
// lock with this TTL, in milliseconds, as the scripts take it: the
// retention, and at least the TTL.
func (l *Locker) counterLife(ttl time.Duration) any {
	if ttl <= l.cfg.fenceRetention {
		return l.retentionArg
	}
	return strconv.FormatInt(ttl.Milliseconds(), 10)
}

// ttlArg is ttl in milliseconds, as the scripts take it.
func (l *Locker) ttlArg(ttl time.Duration) any {
	if ttl == DefaultTTL {
		return l.defaultTTLArg
	}
	return strconv.FormatInt(ttl.Milliseconds(), 10)
}

// perNode returns n elements: buf's when n fits (an array on the caller's
// stack, so that rounds on up to len(buf) nodes allocate nothing), else new
// ones.
func perNode[T any](buf []T, n int) []T {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

// limitMismatch reports whether err is acquire.lua's refusal of a key held
// with another limit, and that limit.
func limitMismatch(err error) (held string, ok bool) {
	if !quorum.IsReply(err) {
		return "", false
	}
	rest, ok := strings.CutPrefix(err.Error(), "DLOCKLIMIT ")
	if !ok {
		return "", false
	}
	held, _, _ = strings.Cut(rest, " ")
	if held == "?" {
		held = "above 1" // a semaphore whose limit key was lost
	}
	return held, true
}

// limitError is the error of an acquisition of key with limit asked while
// its holders use limit held. The copies of a fleet disagree: it is
// ErrMisconfigured (waiting cannot fix it), and also wraps ErrInvalid (the
// caller's WithLimit is the one that differs from the holders').
func limitError(key, held string, asked int) error {
	return &limitMismatchError{fmt.Sprintf("%s: %q is held with limit %s, asked with limit %d: every holder of a key must give the same limit",
		ErrMisconfigured.Error(), key, held, asked)}
}

type limitMismatchError struct{ msg string }

func (e *limitMismatchError) Error() string { return e.msg }

// Is matches ErrMisconfigured and ErrInvalid.
func (e *limitMismatchError) Is(target error) bool {
	return target == ErrMisconfigured || target == ErrInvalid
}

// errNotAcked fails a node's grant or renewal that too few replicas
// acknowledged in time (WithReplicaAck). It is transient.
var errNotAcked = errors.New("not acknowledged by enough replicas in time (WAIT)")

// runScript runs a script that writes the lock with c (args from s.args).
// With WithReplicaAck, it also waits, on the same connection (WAIT counts the
// writes of its own connection), until enough replicas have the write, and
// fails with errNotAcked if they do not within most of timeout.
func (l *Locker) runScript(ctx context.Context, c redis.UniversalClient, timeout time.Duration, s *script, args []any) (any, error) {
	if l.cfg.replicaAck == 0 {
		return s.run(ctx, c, args)
	}
	var node redis.Cmdable = c
	if cc, ok := c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, args[3].(string))
		if err != nil {
			return nil, err
		}
		node = m
	}
	waitMS := max(timeout.Milliseconds()*3/4, 1) // 0 would wait forever
	run := func(args []any) (*redis.Cmd, *redis.Cmd) {
		pipe := node.Pipeline()
		cmd := s.cmd(ctx, args)
		_ = pipe.Process(ctx, cmd)
		wait := pipe.Do(ctx, "WAIT", l.cfg.replicaAck, waitMS)
		_, _ = pipe.Exec(ctx)
		return cmd, wait
	}
	cmd, wait := run(args)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run(s.eval(args))
	}
	v, err := cmd.Result()
	if err != nil {
		return nil, movedIsTransient(c, err)
	}
	n, err := wait.Int64()
	switch {
	case err != nil && quorum.IsReply(err):
		// WAIT refused (an ACL without +wait): permanent, not a lag. The
		// script did write: the error must not pass for a reply that
		// wrote nothing, so that the grant is cleaned up.
		return nil, badReply("WAIT refused after the script ran: %s", err.Error())
	case err != nil || n < int64(l.cfg.replicaAck):
		return nil, fmt.Errorf("%w: %d of %d replicas", errNotAcked, n, l.cfg.replicaAck)
	}
	return v, nil
}

// movedIsTransient turns a MOVED or ASK that a Cluster node answered to a
// command sent straight to it (WithReplicaAck pipelines on the key's master
// as go-redis last knew it) into a transient error, and has the client
// reload its slots: the slot moved (a failover), and the next attempt goes
// to the new master.
func movedIsTransient(c redis.UniversalClient, err error) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || !(redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
		return err
	}
	cc.ReloadState(context.Background())
	return fmt.Errorf("the slot moved (%s); the cluster's slots are being reloaded", err.Error())
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
