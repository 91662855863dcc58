package dlock

import (
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
	if !k.end(stateLost) {
		k.mu.Unlock()
		return
	}
	k.endLost()
	k.stopTimers()
	for i := range k.nodes {
		k.cleanLeftovers(i, false, false)
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

// stopTimers takes the lock out of its Locker's timers and renewals, and
// stops a leadership's keeper of the count of terms; k.mu is held.
func (k *Lock) stopTimers() {
	k.l.timers.remove(k)
	k.renewAt = time.Time{}
	k.leaveSchedule()
	if k.election != nil {
		k.election.terms.stop()
	}
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
	if k.state == stateLost {
		k.mu.Unlock()
		f(ErrLockLost)
		return
	}
	if k.alive() {
		k.onLostFns = append(k.onLostFns, f)
	}
	k.mu.Unlock()
}

func (k *Lock) wasLost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state == stateLost
}
