package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/inbox"
)

// inboxReady reports, per node, whether the Locker's inbox subscription is
// confirmed there.
func (l *Locker) inboxReady() []bool {
	ready := make([]bool, len(l.subs))
	for i, s := range l.subs {
		ready[i] = s.Ready()
	}
	return ready
}

// subscribe subscribes the Locker's inbox on every node where it has not
// been requested yet, and waits up to timeout for those confirmations (not
// again for a node that was asked before and has not confirmed: it is down,
// and its subscription comes back on its own). It reports whether any node
// newly confirmed, i.e. whether an immediate new attempt can register where
// the last one could not.
func (l *Locker) subscribe(ctx context.Context, timeout time.Duration) bool {
	var pending []<-chan struct{}
	for _, s := range l.subs {
		if ch := s.Start(); ch != nil {
			pending = append(pending, ch)
		}
	}
	if len(pending) == 0 {
		return false
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	got := 0
	for _, ch := range pending {
		select {
		case <-ch:
			got++
		case <-t.C:
			return got > 0
		case <-ctx.Done():
			return got > 0
		case <-l.done:
			return false
		}
	}
	return true
}

// newSubscriber returns the inbox subscription of node i (see
// internal/inbox).
func (l *Locker) newSubscriber(i int) *inbox.Subscriber {
	return inbox.New(inbox.Config{
		Client:    l.nodes[i].Client,
		Channel:   l.inbox,
		Done:      l.done,
		Permanent: permanent,
		Deliver:   func(payload string) { l.deliver(i, payload) },
		// Key "": the subscription, not a lock's command (see
		// EventNodeError).
		Refused: func(err error) { l.nodeEvent(i, "", &subscriptionError{channel: l.inbox, err: err}) },
		WakeAll: l.wakeAll,
	})
}

// inboxRefused returns an error when so many nodes refused the inbox
// subscription that no quorum of them can wake a waiter.
func (l *Locker) inboxRefused() error {
	var errs []error
	for i, s := range l.subs {
		if err := s.Refusal(); err != nil {
			errs = append(errs, l.nodeErr(i, err))
		}
	}
	if len(errs) > len(l.nodes)-l.quorum {
		return joined(errs)
	}
	return nil
}

// subscriptionError is a node's refusal of a subscription (NOPERM: the ACL
// does not allow the channel): waiting for locks, or observing an
// election, cannot work as documented until it is fixed. It matches
// ErrMisconfigured.
type subscriptionError struct {
	channel string
	err     error
}

func (e *subscriptionError) Error() string {
	return "the subscription to the channel " + e.channel + " was refused: " + e.err.Error()
}

func (e *subscriptionError) Unwrap() []error { return []error{ErrMisconfigured, e.err} }
