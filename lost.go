package dlock

import (
	"context"
	"fmt"
	"time"
)

// errExpired is the cause of a loss by expiry (see tick).
var errExpired = fmt.Errorf("%w: its validity ran out without a confirmed renewal", ErrLockLost)

// lostMargin is how long before the end of its validity a lock is reported
// lost (see untilLost).
func lostMargin(ttl time.Duration) time.Duration { return min(ttl/20, 50*time.Millisecond) }

// markLost records that ownership ended while held and tells the holder:
// Lost closes, and the functions registered with onLost run with cause. The
// nodes where the key may still hold the token, or where a command of the
// lock may still run, are cleaned up once the key would have expired anyway.
func (k *Lock) markLost(cause error) {
	k.mu.Lock()
	if k.lost || k.released {
		k.mu.Unlock()
		return
	}
	k.lost = true
	close(k.lostCh)
	k.stopTimers()
	for i := range k.nodes {
		k.cleanLeftovers(i, false)
	}
	fns := k.onLostFns
	k.onLostFns = nil
	k.mu.Unlock()
	k.forget()
	// The holder first (Do's context), the hook after: a slow hook must
	// not delay it.
	for _, f := range fns {
		f(cause)
	}
	if k.l.hook != nil {
		k.lostEvent(cause)
	}
}

// lostEvent tells the hook that the lock was lost, once it was told that it
// was acquired (see acquisition.end).
func (k *Lock) lostEvent(cause error) {
	k.mu.Lock()
	e := Event{Kind: EventLost, Key: k.key, Limit: k.limit, Held: time.Since(k.acquiredAt), Reason: lostReason(cause), Err: cause}
	if !k.told {
		k.pendingLost = &e
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.l.hook.Event(k.eventCtx(), e)
}

func (k *Lock) stopTimers() {
	if k.timer != nil {
		k.timer.Stop()
	}
	k.renewAt = time.Time{}
}

func (k *Lock) forget() {
	k.l.mu.Lock()
	delete(k.l.locks, k)
	k.l.mu.Unlock()
}

// onLost registers f to run when the lock is lost (not when it is released),
// with the cause of the loss.
func (k *Lock) onLost(f func(cause error)) {
	k.mu.Lock()
	if k.lost {
		k.mu.Unlock()
		f(ErrLockLost)
		return
	}
	if !k.released {
		k.onLostFns = append(k.onLostFns, f)
	}
	k.mu.Unlock()
}

func (k *Lock) wasLost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// setHookCtx records the context of the acquisition's events for the
// lock's background events (see eventCtx).
func (k *Lock) setHookCtx(ctx context.Context) {
	k.mu.Lock()
	k.hookCtx = ctx
	k.mu.Unlock()
}

// acquisitionTold records that the hook was told of the acquisition, and
// returns the loss held back until then (see lostEvent), if any.
func (k *Lock) acquisitionTold() (lost *Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.told = true
	lost, k.pendingLost = k.pendingLost, nil
	return lost
}

// giveBack releases a lock whose acquisition the hook will not see end
// (see giveBackOnPanic): the hook hears of no release either.
func (k *Lock) giveBack() {
	k.mu.Lock()
	k.acquiredAt = time.Time{} // no EventReleased (see Lock.release)
	k.mu.Unlock()
	k.release(context.Background())
}
