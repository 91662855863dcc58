package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// inboxReady reports, per node, whether the Locker's inbox subscription is
// confirmed there.
func (l *Locker) inboxReady() []bool {
	ready := make([]bool, len(l.subs))
	for i, s := range l.subs {
		ready[i] = s.isReadyNow()
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
		if ch := s.start(); ch != nil {
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

// subscriber is a Locker's one pub/sub connection to one node, subscribed to
// the Locker's inbox channel from the first time the Locker has to wait
// until Close.
type subscriber struct {
	l    *Locker
	node int

	mu      sync.Mutex
	ps      *redis.PubSub
	ready   chan struct{} // closed on the first confirmation, or a refusal
	woken   bool          // ready is closed
	isReady bool          // confirmed: an attempt may register as a waiter
	// refusal is the permanent error with which the node refused the
	// subscription (NOPERM: the user may not use the channel), until a
	// later confirmation.
	refusal error
	closed  bool
	// subscribing: the loop is in its first SUBSCRIBE, which a frozen node
	// can hold for the client's read timeout.
	subscribing bool
	wg          sync.WaitGroup
}

// start subscribes if that has not been done, and then returns a channel
// closed once the subscription is confirmed; it returns nil if the
// subscription was requested before (or the Locker is closed).
func (s *subscriber) start() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ps != nil {
		return nil
	}
	s.ready = make(chan struct{})
	s.ps = s.l.nodes[s.node].Client.Subscribe(context.Background())
	s.wg.Add(1)
	go s.loop(s.ps)
	return s.ready
}

func (s *subscriber) isReadyNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isReady
}

func (s *subscriber) loop(ps *redis.PubSub) {
	defer s.wg.Done()
	// go-redis records the channel even if this write fails, and subscribes
	// again whenever Receive reconnects. Its connection handshake with a
	// frozen node ignores cancellation (it waits for the client's read
	// timeout): close does not wait for it, and the goroutine ends once
	// go-redis gives up.
	s.setSubscribing(true)
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	_ = ps.Subscribe(ctx, s.l.inbox)
	cancel()
	s.setSubscribing(false)
	if s.isClosed() {
		return
	}
	receive(ps, s.l.inbox, s.l.done, s)
}

// message delivers a message of the inbox (see Locker.deliver).
func (s *subscriber) message(payload string) { s.l.deliver(s.node, payload) }

// confirmed records a subscription confirmation, and makes every waiter try
// again: after the first, a waiter that could not register on this node
// (its wait for the confirmation timed out) now can; after a later one,
// which follows a reconnection, a release may have gone unheard.
func (s *subscriber) confirmed() {
	s.mu.Lock()
	s.isReady, s.refusal = true, nil
	s.wakeReady()
	s.mu.Unlock()
	s.l.wakeAll()
}

// wakeReady closes ready once; s.mu is held.
func (s *subscriber) wakeReady() {
	if !s.woken {
		s.woken = true
		close(s.ready)
	}
}

// refused records that the node refused the subscription for good, and lets
// the waiters know (they report it: see Locker.inboxRefused).
func (s *subscriber) refused(err error) {
	// Only the loop changes refusal: it is still nil after this check.
	s.mu.Lock()
	first := s.refusal == nil
	s.mu.Unlock()
	if first {
		// Before the waiters learn it, so that the log tells it first.
		// Key "": the subscription, not a lock's command (see
		// EventNodeError).
		s.l.nodeEvent(s.node, "", &subscriptionError{channel: s.l.inbox, err: err})
	}
	s.mu.Lock()
	s.isReady, s.refusal = false, err
	s.wakeReady()
	s.mu.Unlock()
	s.l.wakeAll()
}

// inboxRefused returns an error when so many nodes refused the inbox
// subscription that no quorum of them can wake a waiter.
func (l *Locker) inboxRefused() error {
	var errs []error
	for i, s := range l.subs {
		s.mu.Lock()
		if s.refusal != nil {
			errs = append(errs, l.nodeErr(i, s.refusal))
		}
		s.mu.Unlock()
	}
	if len(errs) > len(l.nodes)-l.quorum {
		return joined(errs)
	}
	return nil
}

func (s *subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *subscriber) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ps, subscribing := s.ps, s.subscribing
	s.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	if !subscribing {
		s.wg.Wait()
	}
	return err
}

func (s *subscriber) setSubscribing(on bool) {
	s.mu.Lock()
	s.subscribing = on
	s.mu.Unlock()
}

// subscribeTimeout bounds a SUBSCRIBE's write.
const subscribeTimeout = 5 * time.Second

// refusedRetry is how long after a node refused a subscription it is asked
// again: the ACL may have been fixed meanwhile.
const refusedRetry = 15 * time.Second

// A listener handles what a subscription receives (see receive).
type listener interface {
	// message is a message published on the channel.
	message(payload string)
	// confirmed is the node's confirmation of the subscription: the first,
	// or one after a reconnection (messages may have been missed) or after
	// a refusal.
	confirmed()
	// refused is a permanent error of the subscription (NOPERM: the ACL
	// does not allow the channel).
	refused(err error)
}

// receive reads what ps, subscribed to channel, receives, and hands it to
// h, until ps is closed or stop is. On a broken connection it backs off
// (50ms more per failure, at most 1s) while go-redis reconnects and
// subscribes again; after a refusal it subscribes again every
// refusedRetry.
func receive(ps *redis.PubSub, channel string, stop <-chan struct{}, h listener) {
	failures := 0
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, redis.ErrClosed) || isDone(stop) {
				return
			}
			if permanent(err) {
				h.refused(err)
				if !sleepUnless(refusedRetry, stop) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
				_ = ps.Subscribe(ctx, channel)
				cancel()
				continue
			}
			failures++
			if !sleepUnless(min(time.Duration(failures)*50*time.Millisecond, time.Second), stop) {
				return
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.confirmed()
			}
		case *redis.Message:
			h.message(m.Payload)
		}
	}
}

// sleepUnless waits d, and reports false if stop was closed first.
func sleepUnless(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

func isDone(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
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
