package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
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
	// reserve is how long a release keeps the lock for the woken waiter:
	// reserveFor on one Redis, 0 on a quorum (where each node would pick
	// its own next waiter and could split the votes).
	reserve time.Duration

	// id names this Locker in waiter registrations; a waiter is told of
	// releases on the channel inbox (prefix + "inbox:" + id).
	id      string
	inbox   string
	inboxes string // the prefix of every inbox channel
	// reserveArg is reserve in milliseconds, as release.lua takes it.
	reserveArg string
	seq        atomic.Uint64
	subs       []*subscriber

	mu     sync.Mutex
	keys   map[string]*keyState
	locks  map[*Lock]struct{}
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
}

// New returns a Locker on one Redis deployment: a standalone server, a
// Sentinel-managed master or a Cluster, through any go-redis v9 client. It is
// a Redlock quorum of one. New panics if client is nil; an invalid Option is
// reported by the Locker's methods. Close the Locker when done; it does not
// close client.
//
// Every call to Redis is bounded by the node timeout whatever the client's
// settings. A client built with ContextTimeoutEnabled applies context
// deadlines to its reads, and dlock calls it directly; with any other client
// (go-redis' default) each call runs on a helper goroutine that dlock stops
// waiting for at the deadline, which costs a goroutine hand-off per call.
// For the lowest latency, set ContextTimeoutEnabled in the client's options.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	if client == nil {
		panic("dlock: New called with a nil client")
	}
	return newLocker([]redis.UniversalClient{client}, opts)
}

// NewRedlock returns a Locker over N independent Redis masters (the Redlock
// algorithm): a lock is held when a majority, N/2+1, granted it within its
// validity, so the loss of a minority of nodes is survived. The clients must
// reach distinct deployments that do not replicate to each other. It
// returns an error wrapping ErrInvalid for an empty list, a nil client, the
// same client twice, or an invalid Option. Close the Locker when done; it
// does not close the clients.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(clients) == 0 {
		return nil, invalid("NewRedlock needs at least one client")
	}
	seen := make(map[redis.UniversalClient]int, len(clients))
	for i, c := range clients {
		if c == nil {
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

func newLocker(clients []redis.UniversalClient, opts []Option) *Locker {
	cfg := lockerConfig{prefix: DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
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
	for i, c := range clients {
		l.nodes = append(l.nodes, quorum.NewNode(c, "node "+strconv.Itoa(i)))
		l.subs = append(l.subs, &subscriber{l: l, node: i})
	}
	return l
}

// Close ends the Locker: it unsubscribes, stops the renewal of every lock it
// holds (each stays held until its current validity runs out, then its Lost
// channel closes; the keys expire in Redis after their TTL unless
// released), and makes waiting and future Acquire calls return an
// error wrapping ErrNotAcquired and ErrClosed. Release still works on locks
// of a closed Locker. Close does not close the Redis clients. It is
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

	for _, k := range locks {
		k.stopRenewal()
	}
	var errs []error
	for _, s := range l.subs {
		errs = append(errs, s.close())
	}
	l.wg.Wait()
	for _, n := range l.nodes {
		n.Close()
	}
	return errors.Join(errs...)
}

// spawn runs fn on a goroutine that Close waits for (once Close has begun,
// on one it does not wait for). Used for clean-up that must not be lost:
// releases of partial acquisitions, leaving the waiting queue.
func (l *Locker) spawn(fn func()) {
	l.mu.Lock()
	tracked := !l.closed
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

func (l *Locker) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// names are the Redis keys of one lock (DESIGN §3). They share the hash tag
// {key}, so that every script touches one Cluster slot.
type names struct {
	lock, fence, waiters, leases string
	// The KEYS of acquire.lua, release.lua and extend.lua.
	acquireKeys, releaseKeys, extendKeys []string
}

func (l *Locker) names(key string) *names {
	// One string holds all four names, which are slices of it: a lock's
	// names cost one allocation, not four.
	lock := l.cfg.prefix + "{" + key + "}"
	all := lock + ":fence" + lock + ":waiters" + lock + ":wexp"
	w := len(lock) + len(":fence")       // where the waiters' name starts
	e := w + len(lock) + len(":waiters") // where the leases' name starts
	n := &names{
		lock:    all[:len(lock)],
		fence:   all[:w],
		waiters: all[w:e],
		leases:  all[e:],
	}
	n.acquireKeys = []string{n.lock, n.fence, n.waiters, n.leases}
	n.releaseKeys = []string{n.lock, n.waiters, n.leases}
	n.extendKeys = n.acquireKeys[:1]
	return n
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
// Lost fires. When the lock is held by someone else it returns an error
// wrapping ErrNotAcquired; when a quorum of nodes could not be reached the
// error also wraps each node's failure as *NodeError. Bad arguments return an
// error wrapping ErrInvalid.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := l.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ErrClosed)
	}
	k, res := l.attempt(ctx, key, cfg, nil, nil)
	if k != nil {
		return k, nil
	}
	return nil, res.err(key, ctx)
}

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
// When ctx ends first it returns an error wrapping both ErrNotAcquired and
// ctx.Err(), and leaves nothing behind in Redis. Bad arguments return an error
// wrapping ErrInvalid.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := l.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ErrClosed)
	}
	ks := l.keyState(key)
	defer l.putKeyState(ks)
	select {
	case ks.head <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctx.Err())
	case <-l.done:
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ErrClosed)
	}
	acquired := false
	defer func() {
		<-ks.head
		if !acquired {
			l.leaveQueue(ks)
		}
	}()

	timerWakes, splits := 0, 0
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if l.isClosed() {
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ErrClosed)
		}
		// A wake-up that arrived before this attempt is answered by it.
		select {
		case <-ks.wake:
		default:
		}
		ready := l.inboxReady()
		k, res := l.attempt(ctx, key, cfg, ks, ready)
		if k != nil {
			acquired = true
			return k, nil
		}
		if ctx.Err() != nil {
			return nil, res.err(key, ctx)
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
		if res.granted > 0 && splits < maxSplitRetries {
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
		case <-timer.C:
			timerWakes++
		case <-ctx.Done():
			return nil, res.err(key, ctx)
		case <-l.done:
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ErrClosed)
		}
	}
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
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

// Do acquires the lock named key (waiting, as Acquire), runs fn while holding
// it and releases it, even if fn panics. The context passed to fn is
// cancelled, with cause ErrLockLost, as soon as the lock is lost, and when
// ctx ends. Do returns the Acquire error if the lock was not acquired (fn did
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
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	k.onLost(func() { cancel(ErrLockLost) })

	defer func() {
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
		return acquireReply{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	flag, _ := arr[0].(int64)
	n, _ := arr[1].(int64)
	if flag == 1 {
		return acquireReply{ok: true, fence: uint64(n)}, nil
	}
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

// attemptResult says why an attempt failed.
type attemptResult struct {
	granted  int
	refused  int
	pttl     time.Duration // shortest positive remaining TTL of the holder, or 0
	nodeErrs []error
	late     bool // quorum reached but no validity left, or the fence raise failed
	// notWaited counts suspect nodes the round decided without: their
	// answers, arriving after it, may show they are back.
	notWaited int
	quorum    int
	nodes     int
}

func (r attemptResult) err(key string, ctx context.Context) error {
	if ctx.Err() != nil {
		if len(r.nodeErrs) > 0 {
			// Say why the last attempt failed, too: a wait that ends on
			// unreachable nodes should not look like a busy lock.
			return fmt.Errorf("%w: %q: %w (last attempt: %w)", ErrNotAcquired, key, ctx.Err(), errors.Join(r.nodeErrs...))
		}
		return fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctx.Err())
	}
	if r.late {
		return fmt.Errorf("%w: %q: quorum reached too late, no validity left", ErrNotAcquired, key)
	}
	if len(r.nodeErrs) == 0 {
		if r.nodes == 1 {
			return fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, key)
		}
		return fmt.Errorf("%w: %q is held by another owner (%d of %d nodes granted, %d needed)",
			ErrNotAcquired, key, r.granted, r.nodes, r.quorum)
	}
	return fmt.Errorf("%w: %q: quorum not reached (%d of %d nodes granted, %d needed): %w",
		ErrNotAcquired, key, r.granted, r.nodes, r.quorum, errors.Join(r.nodeErrs...))
}

// attempt runs one acquisition round on every node. ks is nil for an attempt
// that must not register as a waiter; otherwise it registers on the nodes
// where ready says the Locker's inbox is subscribed.
func (l *Locker) attempt(ctx context.Context, key string, cfg lockConfig, ks *keyState, ready []bool) (*Lock, attemptResult) {
	token := newToken()
	ttlMS := cfg.ttl.Milliseconds()
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
	none := nodeReg{pos: "0", queued: "0", refresh: "0"}
	res := attemptResult{quorum: l.quorum, nodes: n}

	// decided is closed once the attempt's outcome is known (k is set if it
	// succeeded). A node that answers after the round may have set the key
	// after all: release it there if the attempt failed, or if the lock was
	// released meanwhile (Release reaches every node, but a node that was
	// frozen may run this late command after the release).
	decided := make(chan struct{})
	var k *Lock
	late := func(r quorum.Result[acquireReply]) {
		<-decided
		if (r.Err != nil || r.Val.ok) && (k == nil || k.needsLateRelease(r.Node)) {
			l.releaseNodes(nm, token, []int{r.Node}, cfg.ttl)
		}
	}

	start := time.Now()
	results, missing := quorum.Fanout(ctx, l.nodes, timeout,
		func(ctx context.Context, i int) (acquireReply, error) {
			reg := none
			if regs != nil {
				reg = regs[i]
			}
			v, err := acquireScript.Run(ctx, l.nodes[i].Client, nm.acquireKeys,
				token, ttlMS, reg.member, waiterLeaseArg, reg.pos, reg.queued, reg.refresh).Result()
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
			return g >= l.quorum || f+suspects > n-l.quorum
		},
		late)

	var fence uint64
	var grantedNodes []int
	for _, r := range results {
		switch {
		case r.Err != nil:
			res.nodeErrs = append(res.nodeErrs, &NodeError{Addr: l.nodes[r.Node].Addr, Err: r.Err})
		case r.Val.ok:
			res.granted++
			grantedNodes = append(grantedNodes, r.Node)
			fence = max(fence, r.Val.fence)
		default:
			res.refused++
			// A reservation for a woken waiter (pttl -3) or a key without
			// expiry (-1) does not time the wait.
			if p := time.Duration(r.Val.pttl) * time.Millisecond; p > 0 && (res.pttl == 0 || p < res.pttl) {
				res.pttl = p
			}
			if ks != nil {
				ks.registered(r.Node, regs[r.Node], r.Val.pos)
			}
		}
	}
	for _, m := range missing {
		res.nodeErrs = append(res.nodeErrs, &NodeError{Addr: l.nodes[m.Node].Addr, Err: m.Err})
		if errors.Is(m.Err, quorum.ErrNotWaited) {
			res.notWaited++
		}
	}

	if res.granted >= l.quorum {
		ok := true
		if n > 1 {
			ok = l.raiseFences(ctx, nm, fence, results, timeout)
		}
		// Validity left, beyond the margin before which Lost fires.
		validUntil := start.Add(cfg.ttl - drift(cfg.ttl))
		if ok && time.Now().Before(validUntil.Add(-lostMargin(cfg.ttl))) {
			k = l.newLock(key, nm, token, fence, cfg, start)
		} else {
			res.late = true
		}
	}
	if k == nil {
		// Release wherever the key may have been set: granted nodes, and
		// nodes whose answer was lost or late.
		answered := make([]bool, n)
		var cleanup []int
		for _, r := range results {
			answered[r.Node] = true
			if r.Err != nil || r.Val.ok {
				cleanup = append(cleanup, r.Node)
			}
		}
		for i, a := range answered {
			if !a {
				cleanup = append(cleanup, i)
			}
		}
		if len(cleanup) > 0 {
			l.releaseNodes(nm, token, cleanup, cfg.ttl)
		}
	} else if ks != nil {
		if member, stale := ks.acquired(grantedNodes); len(stale) > 0 {
			l.leaveNodes(nm, member, stale)
		}
	}
	close(decided)
	return k, res
}

// raiseFences makes sure that at least a quorum of nodes holds a fence
// counter ≥ fence: nodes of the granting quorum that returned less are raised
// (compare-and-raise). It reports whether a quorum is confirmed.
func (l *Locker) raiseFences(ctx context.Context, nm *names, fence uint64, results []quorum.Result[acquireReply], timeout time.Duration) bool {
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
	if confirmed >= l.quorum {
		return true
	}
	need := l.quorum - confirmed
	fenceKey := []string{nm.fence}
	rs, _ := quorum.Fanout(ctx, l.subset(low), timeout,
		func(ctx context.Context, i int) (int64, error) {
			return raiseScript.Run(ctx, l.nodes[low[i]].Client, fenceKey, strconv.FormatUint(fence, 10)).Int64()
		},
		func(rs []quorum.Result[int64], _ int) bool {
			ok := 0
			for _, r := range rs {
				if r.Err == nil && r.Val >= int64(min(fence, math.MaxInt64)) {
					ok++
				}
			}
			return ok >= need || len(rs)-ok > len(low)-need
		}, nil)
	for _, r := range rs {
		if r.Err == nil && uint64(r.Val) >= fence {
			confirmed++
		}
	}
	return confirmed >= l.quorum
}

func (l *Locker) subset(idx []int) []*quorum.Node {
	ns := make([]*quorum.Node, len(idx))
	for i, j := range idx {
		ns[i] = l.nodes[j]
	}
	return ns
}

// releaseNodes releases the lock held with token on the given nodes, in the
// background, on a context of its own: used to clean up after a failed or
// cancelled attempt, which must not leave keys behind because the caller's
// context ended.
func (l *Locker) releaseNodes(nm *names, token string, nodes []int, ttl time.Duration) {
	l.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(l.nodeTimeout(ttl), 100*time.Millisecond))
		defer cancel()
		var wg sync.WaitGroup
		for _, i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = callNode(ctx, l, i, func(ctx context.Context) (int64, error) {
					// On one Redis a failed attempt only ever holds the
					// key when its answer was lost: waiters may be
					// sleeping on its TTL, so wake one.
					return l.runRelease(ctx, i, nm, token, "", len(l.nodes) == 1)
				})
			}()
		}
		wg.Wait()
	})
}

// callNode runs fn on node i, bounded by ctx alone.
func callNode[T any](ctx context.Context, l *Locker, i int, fn func(ctx context.Context) (T, error)) (T, error, bool) {
	return quorum.Call(ctx, l.nodes[i], time.Hour, fn, nil)
}

// runRelease runs release.lua on node i: expected is the owner token or a
// reservation "~ID"; leaving is a waiter id to remove from the queue, or "";
// wake says whether to wake the next waiter.
func (l *Locker) runRelease(ctx context.Context, i int, nm *names, expected, leaving string, wake bool) (int64, error) {
	w := "0"
	if wake {
		w = "1"
	}
	return releaseScript.Run(ctx, l.nodes[i].Client, nm.releaseKeys,
		expected, l.inboxes, l.reserveArg, leaving, w).Int64()
}

// inboxPrefix is the prefix of every Locker's inbox channel.
func (l *Locker) inboxPrefix() string { return l.cfg.prefix + "inbox:" }

// waiterLeaseArg is waiterLease in milliseconds, as the scripts take it.
var waiterLeaseArg = strconv.FormatInt(waiterLease.Milliseconds(), 10)
