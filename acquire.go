package dlock

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

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
	var lim limitRetry // the limit was changed (SetLimit): see limitRetry
	for lim.again(ctx, l, key, &cfg, err) {
		k, err = l.tryAcquire(ctx, key, cfg, &a)
	}
	err = l.nameCauses(lim.settle(ctx, err), cfg.ttl)
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
//
// With a ctx that has no deadline, Acquire waits for as long as too few
// nodes answer: against a wrong address, for ever. So that such a wait is
// not silent, the first one of a Locker is logged at Warn through
// slog.Default, unless WithLogger logs the nodes' failures already, naming
// the node, its error and what to check (nothing listens at the address,
// no answer in time, a TLS mismatch); once, until a round of an Acquire
// hears from every node again. Give ctx a deadline to get the
// ErrUnavailable error instead.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := l.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	var a acquisition
	a.start(l, ctx, key, cfg)
	k, err := l.acquire(ctx, key, cfg, &a)
	var lim limitRetry // the limit was changed (SetLimit): see limitRetry
	for lim.again(ctx, l, key, &cfg, err) || lim.wait(ctx, l, cfg, err) {
		k, err = l.acquire(ctx, key, cfg, &a)
	}
	err = l.nameCauses(lim.settle(ctx, err), cfg.ttl)
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
	if k, err, done := l.uncontended(ctx, key, cfg, a); done {
		return k, err
	}
	ks := l.keyState(key, cfg.shared)
	defer l.putKeyState(ks)
	if err := ks.enter(ctx, l.done); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil, closedErr(key)
		}
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, err)
	}
	defer ks.exit()

	// The loop: attempt; on a grant, return it; on an answer that waiting
	// cannot change (ctx ended, misconfigured, closed, another limit),
	// return its error; else wait for a wake-up (a release heard on the
	// inbox) or for as long as nextWait says, whichever comes first, and
	// try again. Close and ctx end the wait.
	var counters waitCounters
	var lim limitRetry
	// last is the last attempt that ctx did not cut short: when ctx ends,
	// it says whether the wait was for a busy lock or for nodes.
	var last *attemptResult
	var timer waitTimer
	defer timer.stop()
	for {
		if l.isClosed() {
			return nil, closedErr(key)
		}
		// A wake-up that arrived before this attempt is answered by it.
		select {
		case <-ks.wake:
		default:
		}
		ready := l.inboxReady(ks)
		k, res := l.attempt(ctx, key, cfg, ks, ready)
		a.attempted(k, res.class())
		l.noteNodes(ctx, key, k, &res)
		if k != nil {
			return k, nil
		}
		if ctx.Err() != nil && res.cutShort(false) && last != nil {
			res = *last
		}
		if res.final(ctx) && lim.again(ctx, l, key, &cfg, res.limitErr) {
			continue // the limit was changed (SetLimit): ask with the new one, or once the nodes agree
		}
		if res.final(ctx) {
			return nil, res.err(key, ctx)
		}
		last = &res
		if again, err := l.canWait(ctx, ks, ready, cfg.ttl); err != nil {
			return nil, err
		} else if again {
			continue
		}
		switch timer.sleep(ctx, ks.wake, l.done, nextWait(&res, &counters, l.nodeTimeout(cfg.ttl), jitter)) {
		case sleepWoken:
			counters.splits = 0
			a.woken()
		case sleepTimedOut:
			counters.timerWakes++
		case sleepCtxEnded:
			return nil, res.err(key, ctx)
		case sleepClosed:
			return nil, closedErr(key)
		}
	}
}

// uncontended is the uncontended path: in a Locker that has never had to
// wait, with no goroutine of it waiting for the key, a first attempt needs
// none of the waiting machinery (it could not register as a waiter anyway:
// the inbox is not subscribed yet). It reports done with the lock, or with
// an error that waiting cannot change. Otherwise the wait starts afresh, in
// the local queue (its answer may be stale by the time this goroutine is
// at the head of it): one more round trip, the first time a Locker waits.
func (l *Locker) uncontended(ctx context.Context, key string, cfg lockConfig, a *acquisition) (k *Lock, err error, done bool) {
	if !l.neverWaited(key) {
		return nil, nil, false
	}
	k, res := l.attempt(ctx, key, cfg, nil, nil)
	a.attempted(k, res.class())
	l.noteNodes(ctx, key, k, &res)
	switch {
	case k != nil:
		return k, nil, true
	case res.final(ctx):
		return nil, res.err(key, ctx), true
	}
	return nil, nil, false
}

// canWait checks, after an attempt that did not get the lock, that its
// waiter can be woken: it fails if the inbox's subscription was refused
// (releases would never be heard), and reports again when it subscribed
// the inbox on nodes where it was not ready, so that the waiter tries again
// at once, registering (a release between the failed attempt and the
// subscription would otherwise go unheard).
func (l *Locker) canWait(ctx context.Context, ks *keyState, ready []bool, ttl time.Duration) (again bool, err error) {
	if err := l.inboxRefused(ks); err != nil {
		return false, fmt.Errorf("%w: %q: cannot wait: the subscription to the waiters' channel %s was refused: %w",
			ErrMisconfigured, ks.key, l.inboxOf(ks.hashSlot), err)
	}
	return !allTrue(ready) && l.subscribe(ctx, ks, l.nodeTimeout(ttl)), nil
}

// waitTimer is the one timer of a wait loop, made at its first sleep.
type waitTimer struct{ t *time.Timer }

// How a sleep of the wait loop ended.
const (
	sleepWoken    = iota // a release woke the waiter
	sleepTimedOut        // the wait that nextWait gave ran out
	sleepCtxEnded        // the caller's context ended
	sleepClosed          // the Locker was closed
)

// sleep waits for d, a wake-up on wake, the end of ctx or the closing of
// done, whichever comes first (at random among those ready at once).
func (w *waitTimer) sleep(ctx context.Context, wake, done <-chan struct{}, d time.Duration) int {
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d)
	}
	select {
	case <-wake:
		w.t.Stop()
		return sleepWoken
	case <-w.t.C:
		return sleepTimedOut
	case <-ctx.Done():
		return sleepCtxEnded
	case <-done:
		return sleepClosed
	}
}

func (w *waitTimer) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// waitCounters is what the wait loop of one acquisition counts across its
// attempts, for nextWait: the wake-ups by its timer, the retries after a
// split vote since the last wake-up by a release, and the attempts in a row
// that nodes failed.
type waitCounters struct {
	timerWakes, splits, errWakes int
}

// nextWait is the wait policy: how long a waiter whose attempt got res
// waits for a release to wake it before it tries again anyway. It counts
// the split votes and the failed attempts in c. nodeTimeout is the round's
// node timeout; jitter(n) is a random duration in [0, n).
//
// In order, each rule overriding the ones before where it says "at once"
// or "shortly", and only shortening the wait otherwise:
//   - the fallback, long (nothing else wakes the waiter but a release);
//   - until the holder's TTL runs out, with a tenth of it as jitter, so
//     that waiting processes do not all arrive at once;
//   - at most a node timeout when the round did not wait for suspect
//     nodes, in case they are back;
//   - a backoff from the node timeout, doubling, when nodes failed or did
//     not answer (nothing wakes the waiter when they are back);
//   - at once (under a millisecond) when the lock was free but the round
//     left no validity (a slow node, a short TTL);
//   - shortly, with jitter that breaks the tie, a few times in a row, when
//     some nodes of a quorum granted but not enough (contenders split the
//     votes; their clean-up wakes nobody).
func nextWait(res *attemptResult, c *waitCounters, nodeTimeout time.Duration, jitter func(time.Duration) time.Duration) time.Duration {
	wait := fallback(c.timerWakes)
	if p := res.pttl; p > 0 && p < wait {
		wait = p + jitter(p/10+time.Millisecond)
	}
	if res.notWaited > 0 {
		wait = min(wait, nodeTimeout)
	}
	if len(res.errs) > res.notWaited {
		wait = min(wait, errorRetry(nodeTimeout, c.errWakes))
		c.errWakes++
	} else {
		c.errWakes = 0
	}
	if res.late {
		wait = jitter(time.Millisecond)
	}
	if res.ok > 0 && !res.late && c.splits < maxSplitRetries {
		c.splits++
		wait = time.Millisecond + jitter(splitJitter)
	}
	return wait
}

// jitter is a random duration in [0, n), n > 0.
func jitter(n time.Duration) time.Duration { return time.Duration(mrand.Int64N(int64(n))) }

// neverWaited reports whether no goroutine of the Locker waits for key and
// the Locker's inbox has not been subscribed on any node.
func (l *Locker) neverWaited(key string) bool {
	l.mu.Lock()
	_, waiting := l.keys[waitSlot{key: key}]
	l.mu.Unlock()
	return !waiting && !l.waitedBefore()
}

// waitedBefore reports whether the Locker's inbox was subscribed on a node:
// the Locker has waited for a key.
func (l *Locker) waitedBefore() bool {
	for _, s := range l.subs {
		if s.Started() {
			return true
		}
	}
	return false
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
