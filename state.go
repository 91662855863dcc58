package dlock

// A Lock's life has one owner: its state, guarded by Lock.mu, which moves
// from held to one end, once, through end. Every path that ends a lock, or
// that acts on its key, asks the state under the same mutex:
//
//   - Release (and Close, which releases the locks it holds) ends it as
//     released, then sends its release round; a lock that was lost is
//     still released in Redis (its key may still hold the token), but stays
//     lost.
//   - markLost (a renewal that a quorum refused, the validity run out, Close)
//     ends it as lost; its key is cleaned up once it would have expired.
//   - Detach ends it as detached, also after a loss or a release began:
//     from then on this process sends nothing for the hold (no release, no
//     clean-up, no renewal), so that an adopter's hold is never ended by the
//     process that handed it over (see Detach).
//   - Extend and the renewals run only while it is held (under the ops
//     slot, which Detach takes too).
type lockState uint8

const (
	stateHeld     lockState = iota
	stateReleased           // Release ended it
	stateLost               // ownership ended while held (or Close took it back)
	stateDetached           // Detach ended it: this process no longer acts on the hold
)

// end moves the lock from held to s and reports whether it did (false: it
// had ended already); k.mu is held. Only Detach moves it on from another
// end (see detach).
func (k *Lock) end(s lockState) bool {
	if k.state != stateHeld {
		return false
	}
	k.state = s
	return true
}

// alive reports whether the lock is held (not ended); k.mu is held.
func (k *Lock) alive() bool { return k.state == stateHeld }
