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
