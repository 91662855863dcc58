package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// A Lock is one acquisition of a named lock. Its methods are safe for
// concurrent use. Ownership can end without the owner's doing (a process
// pause, a partition, an administrator's force release): Lost is closed when
// it can no longer be guaranteed, and storage that checks the Fence can
// reject a stale owner's writes.
type Lock struct {
	l         *Locker
	key       string
	names     *names
	token     string
	fence     uint64
	autoRenew bool

	// opMu serialises the rounds that set the TTL (renewal and Extend), so
	// that the validity always reflects the round that ran last.
	opMu sync.Mutex

	mu          sync.Mutex
	ttl         time.Duration
	validUntil  time.Time
	lostCh      chan struct{}
	lost        bool // ownership ended while held
	released    bool
	releaseErr  error
	deletedOn   []bool // per node: Release's call deleted the key there
	renewTimer  *time.Timer
	expiryTimer *time.Timer
	onLostFns   []func()
}

func (l *Locker) newLock(key string, nm *names, token string, fence uint64, cfg lockConfig, start time.Time) *Lock {
	k := &Lock{
		l: l, key: key, names: nm, token: token, fence: fence, autoRenew: cfg.autoRenew,
		ttl:        cfg.ttl,
		validUntil: start.Add(cfg.ttl - drift(cfg.ttl)),
		lostCh:     make(chan struct{}),
	}
	k.mu.Lock()
	k.expiryTimer = time.AfterFunc(k.untilLost(), k.checkExpiry)
	l.mu.Lock()
	if !l.closed {
		l.locks[k] = struct{}{}
		if k.autoRenew {
			k.renewTimer = time.AfterFunc(time.Until(start.Add(cfg.ttl/3)), k.renew)
		}
	}
	l.mu.Unlock()
	k.mu.Unlock()
	return k
}

// Key returns the name of the lock, as passed to Acquire.
func (k *Lock) Key() string { return k.key }

// Token returns the owner token: 128 random bits, hex-encoded, stored as the
// lock's value in Redis.
func (k *Lock) Token() string { return k.token }

// Fence returns the fencing token of this acquisition: a number that is
// larger than the fence of every earlier acquisition of the same key (on one
// Redis, and across a Redlock quorum as long as the nodes keep their data).
// Pass it to storage that can reject writes carrying a smaller fence than
// one it has already seen.
func (k *Lock) Fence() uint64 { return k.fence }

// Lost returns a channel that is closed once ownership can no longer be
// guaranteed: a quorum of nodes said the lock is no longer ours, or the
// validity of the last confirmed acquisition or renewal ran out without a new
// confirmation. It closes before the key can have expired in Redis (the
// validity subtracts a clock-drift margin), never after. It is also closed by
// Release.
func (k *Lock) Lost() <-chan struct{} { return k.lostCh }

// ValidUntil returns the time until which ownership is guaranteed by the last
// confirmed acquisition or renewal (on the monotonic clock). Lost closes
// shortly before it (by TTL/20, at most 50ms, a margin for scheduling delays)
// unless a renewal is confirmed first.
func (k *Lock) ValidUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validUntil
}

// Extend sets the lock's TTL to ttl from now, on every node, if the caller
// still owns it; later auto-renewals use the new TTL too. It returns an error
// wrapping ErrNotHeld (and Lost closes) if the lock is no longer ours, or was
// released. Another error (a node that did not answer, for example) leaves
// the lock as it was: held until its current validity runs out.
func (k *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	k.opMu.Lock()
	defer k.opMu.Unlock()
	if !k.held() {
		return fmt.Errorf("%w: %q", ErrNotHeld, k.key)
	}
	start := time.Now()
	err := k.extendRound(ctx, ttl, start, k.l.nodeTimeout(ttl))
	if errors.Is(err, ErrNotHeld) {
		k.markLost()
	}
	return err
}

func (k *Lock) held() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.lost && !k.released
}

// extendRound runs extend.lua on every node, waiting at most timeout, and,
// when a quorum confirms within the new validity, records it and schedules
// the next renewal.
func (k *Lock) extendRound(ctx context.Context, ttl time.Duration, start time.Time, timeout time.Duration) error {
	l := k.l
	n := len(l.nodes)
	ttlMS := ttl.Milliseconds()
	results, missing := quorum.Fanout(ctx, l.nodes, timeout,
		func(ctx context.Context, i int) (int64, error) {
			return extendScript.Run(ctx, l.nodes[i].Client, k.names.extendKeys, k.token, ttlMS).Int64()
		},
		func(rs []quorum.Result[int64], suspects int) bool {
			ok, bad := countOK(rs)
			return ok >= l.quorum || bad+suspects > n-l.quorum
		}, k.lateExtend)
	ok, refused, errs := k.tally(results, missing)
	validUntil := start.Add(ttl - drift(ttl))
	switch {
	case ok >= l.quorum && time.Now().Before(validUntil):
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.lost || k.released {
			// Confirmed after the holder was told it lost the lock, or
			// after it released it: undo the extension.
			for _, r := range results {
				go k.lateExtend(r) // it takes k.mu
			}
			return fmt.Errorf("%w: %q", ErrNotHeld, k.key)
		}
		k.ttl, k.validUntil = ttl, validUntil
		k.expiryTimer.Reset(k.untilLost())
		if k.autoRenew {
			k.scheduleRenew(time.Until(start.Add(ttl / 3)))
		}
		return nil
	case refused > n-l.quorum:
		return fmt.Errorf("%w: %q (%d of %d nodes no longer hold it)", ErrNotHeld, k.key, refused, n)
	case ok >= l.quorum:
		return fmt.Errorf("dlock: extend %q: quorum confirmed too late, no validity left", k.key)
	default:
		return fmt.Errorf("dlock: extend %q: quorum not confirmed (%d of %d nodes, %d needed): %w",
			k.key, ok, n, l.quorum, errors.Join(errs...))
	}
}

func countOK(rs []quorum.Result[int64]) (ok, bad int) {
	for _, r := range rs {
		if r.Err == nil && r.Val == 1 {
			ok++
		} else {
			bad++
		}
	}
	return ok, bad
}

// tally counts a round's answers: ok (1), refused (0) and per-node errors,
// including those of the nodes whose missing answer counted.
func (k *Lock) tally(results []quorum.Result[int64], missing []quorum.Missing) (ok, refused int, errs []error) {
	for _, r := range results {
		switch {
		case r.Err != nil:
			errs = append(errs, &NodeError{Addr: k.l.nodes[r.Node].Addr, Err: r.Err})
		case r.Val == 1:
			ok++
		default:
			refused++
		}
	}
	for _, m := range missing {
		errs = append(errs, &NodeError{Addr: k.l.nodes[m.Node].Addr, Err: m.Err})
	}
	return ok, refused, errs
}

// lateExtend handles a renewal or Extend that a node confirmed after the
// lock was lost or released: that command has extended a key that nobody
// will renew or release, which would keep the next owner waiting a whole
// TTL. The key (still holding this lock's token) is deleted once it would
// have expired but for that extension: not earlier, so that the holder keeps
// the time between Lost and the expiry to stop its work.
func (k *Lock) lateExtend(r quorum.Result[int64]) {
	if r.Err != nil || r.Val != 1 {
		return
	}
	k.mu.Lock()
	lost, released, ttl := k.lost, k.released, k.ttl
	at := time.Now() // released: the holder is done
	if lost {
		at = k.validUntil.Add(2 * drift(ttl))
	}
	k.mu.Unlock()
	if lost || released {
		time.AfterFunc(max(time.Until(at), 0), func() {
			k.l.releaseNodes(k.names, k.token, []int{r.Node}, ttl)
		})
	}
}

// scheduleRenew sets the renewal timer; k.mu is held.
func (k *Lock) scheduleRenew(d time.Duration) {
	if k.l.isClosed() {
		return
	}
	if k.renewTimer == nil {
		k.renewTimer = time.AfterFunc(d, k.renew)
	} else {
		k.renewTimer.Reset(d)
	}
}

// renew is the auto-renewal, run by the renewal timer.
func (k *Lock) renew() {
	l := k.l
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	defer l.wg.Done()

	k.opMu.Lock()
	defer k.opMu.Unlock()
	k.mu.Lock()
	if k.lost || k.released {
		k.mu.Unlock()
		return
	}
	ttl, validUntil := k.ttl, k.validUntil
	k.mu.Unlock()

	// A renewal is worth waiting for until the current validity runs out (a
	// slow but confirmed renewal still keeps the lock); the round decides as
	// soon as a quorum confirms, so a frozen minority does not slow it.
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), validUntil)
	defer cancel()
	err := k.extendRound(ctx, ttl, start, time.Until(validUntil))
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld):
		k.markLost()
	default:
		// Transient: try again soon, until the validity runs out (then the
		// expiry timer reports the loss).
		k.mu.Lock()
		if !k.lost && !k.released {
			k.scheduleRenew(min(max(time.Until(k.validUntil)/4, time.Millisecond), l.nodeTimeout(ttl)))
		}
		k.mu.Unlock()
	}
}

// untilLost is how long until the lost-lock signal is due: the end of the
// validity, less a margin for the scheduling delay of the timer and of the
// goroutine that receives from Lost, which the drift does not cover; k.mu is
// held. A healthy lock never comes near it: it is renewed every TTL/3.
func (k *Lock) untilLost() time.Duration {
	return time.Until(k.validUntil) - lostMargin(k.ttl)
}

// lostMargin is how long before the end of its validity a lock is reported
// lost (see untilLost).
func lostMargin(ttl time.Duration) time.Duration { return min(ttl/20, 50*time.Millisecond) }

// checkExpiry runs when the validity should have run out.
func (k *Lock) checkExpiry() {
	k.mu.Lock()
	if k.lost || k.released {
		k.mu.Unlock()
		return
	}
	if left := k.untilLost(); left > 0 {
		// Renewed meanwhile.
		k.expiryTimer.Reset(left)
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.markLost()
}

// markLost records that ownership ended while held and tells the holder.
func (k *Lock) markLost() {
	k.mu.Lock()
	if k.lost || k.released {
		k.mu.Unlock()
		return
	}
	k.lost = true
	close(k.lostCh)
	k.stopTimers()
	fns := k.onLostFns
	k.onLostFns = nil
	k.mu.Unlock()
	k.forget()
	for _, f := range fns {
		f()
	}
}

// stopRenewal stops auto-renewal (Locker.Close): the lock stays held until its
// validity runs out.
func (k *Lock) stopRenewal() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.renewTimer != nil {
		k.renewTimer.Stop()
	}
}

func (k *Lock) stopTimers() {
	if k.renewTimer != nil {
		k.renewTimer.Stop()
	}
	k.expiryTimer.Stop()
}

func (k *Lock) forget() {
	k.l.mu.Lock()
	delete(k.l.locks, k)
	k.l.mu.Unlock()
}

// onLost registers f to run when the lock is lost (not when it is released).
func (k *Lock) onLost(f func()) {
	k.mu.Lock()
	if k.lost {
		k.mu.Unlock()
		f()
		return
	}
	if !k.released {
		k.onLostFns = append(k.onLostFns, f)
	}
	k.mu.Unlock()
}

// needsLateRelease reports whether an acquisition that node i confirmed
// after the round must be released there: yes once the lock was released,
// unless Release's own call to that node deleted the key (then the late
// acquisition ran before it).
func (k *Lock) needsLateRelease(i int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.released && !(i < len(k.deletedOn) && k.deletedOn[i])
}

func (k *Lock) wasLost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Release gives the lock up: it stops the renewal, closes Lost, and deletes
// the key on every node (only where it still holds this lock's token),
// waking the next waiter. It runs on a context detached from ctx's
// cancellation, with its own timeout, so that a cancelled caller does not
// leave the lock behind.
//
// It returns nil when a quorum confirmed the release, and an error wrapping
// ErrNotHeld if the lock had been lost (Lost had fired) or a quorum said it
// no longer held it: work done under the lock may then have overlapped
// another owner's. Any other error means the release could not be confirmed;
// the key then expires after its TTL, and Release may be called again.
// Release after a successful Release returns nil.
func (k *Lock) Release(ctx context.Context) error {
	k.mu.Lock()
	if k.released && (k.releaseErr == nil || errors.Is(k.releaseErr, ErrNotHeld)) {
		err := k.releaseErr
		k.mu.Unlock()
		return err
	}
	wasLost := k.lost
	if !k.released {
		k.released = true
		if !k.lost {
			close(k.lostCh)
		}
		k.stopTimers()
		k.onLostFns = nil
	}
	ttl := k.ttl
	k.mu.Unlock()
	k.forget()

	l := k.l
	n := len(l.nodes)
	// Decide as soon as the outcome is known: a node that has not answered
	// by then still gets the release, on a context that is not cancelled
	// when Release returns (only by the round's own timeout), so that a
	// slow node is not left holding the key.
	results, missing := quorum.Fanout(context.WithoutCancel(ctx), l.nodes, max(l.nodeTimeout(ttl), 100*time.Millisecond),
		func(ctx context.Context, i int) (int64, error) {
			return l.runRelease(ctx, i, k.names, k.token, "", true)
		},
		func(rs []quorum.Result[int64], suspects int) bool {
			ok, bad := countOK(rs)
			return ok >= l.quorum || bad+suspects > n-l.quorum
		}, nil)
	ok, refused, errs := k.tally(results, missing)
	var err error
	switch {
	case wasLost:
		err = fmt.Errorf("%w: %q was lost before it was released", ErrNotHeld, k.key)
	case ok >= l.quorum:
	case refused > n-l.quorum:
		err = fmt.Errorf("%w: %q had expired or been taken (%d of %d nodes no longer held it)", ErrNotHeld, k.key, refused, n)
	default:
		err = fmt.Errorf("dlock: release %q: not confirmed by a quorum (%d of %d nodes, %d needed), the key expires after its TTL: %w",
			k.key, ok, n, l.quorum, errors.Join(errs...))
	}
	k.mu.Lock()
	k.releaseErr = err
	if k.deletedOn == nil {
		k.deletedOn = make([]bool, n)
	}
	for _, r := range results {
		if r.Err == nil && r.Val == 1 {
			k.deletedOn[r.Node] = true
		}
	}
	k.mu.Unlock()
	return err
}
