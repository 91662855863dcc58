// Package inbox holds the pub/sub side of a Locker: the subscription of its
// inbox channel on one node (Subscriber), and the receive loop (Receive)
// that it shares with the observers of elections.
package inbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
)

// SubscribeTimeout bounds a SUBSCRIBE's write.
const SubscribeTimeout = 5 * time.Second

// refusedRetry is how long after a node refused a subscription it is asked
// again: the ACL may have been fixed meanwhile.
const refusedRetry = 15 * time.Second

// A Listener handles what a subscription receives (see Receive).
type Listener interface {
	// Message is a message published on the channel.
	Message(payload string)
	// Confirmed is the node's confirmation of the subscription: the first,
	// or one after a reconnection (messages may have been missed) or after
	// a refusal.
	Confirmed()
	// Refused is a permanent error of the subscription (NOPERM: the ACL
	// does not allow the channel).
	Refused(err error)
}

// Receive reads what ps, subscribed to channel, receives, and hands it to
// h, until ps is closed or stop is. On a broken connection it backs off
// (50ms more per failure, at most 1s) while go-redis reconnects and
// subscribes again; after a refusal (an error that permanent tells) it
// subscribes again every refusedRetry.
func Receive(ps node.PubSub, channel string, stop <-chan struct{}, h Listener, permanent func(error) bool) {
	failures := 0
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, node.ErrClosed) || isDone(stop) {
				return
			}
			if permanent(err) {
				h.Refused(err)
				if !sleepUnless(refusedRetry, stop) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), SubscribeTimeout)
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
		switch msg.Kind {
		case "subscribe":
			h.Confirmed()
		case "message":
			h.Message(msg.Payload)
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

// Config is what a Subscriber needs of its Locker.
type Config struct {
	// PubSub returns a new pub/sub connection to the node.
	PubSub  func() node.PubSub
	Channel string          // the Locker's inbox channel
	Done    <-chan struct{} // closed when the Locker's Close begins
	// Permanent tells the errors that waiting cannot fix.
	Permanent func(error) bool
	// Deliver handles a message of the inbox.
	Deliver func(payload string)
	// Refused is told of the first refusal in a row (before the waiters
	// learn it, so that the log tells it first).
	Refused func(err error)
	// WakeAll makes every waiter try again: after a confirmation (a waiter
	// may now register; after a reconnection a release may have gone
	// unheard) and, unless QuietRefusal, after a refusal (they report it).
	WakeAll func()
	// QuietRefusal: a refusal wakes no waiter, for a subscription whose
	// refusal no waiter reports (see ShardedConfig.Earlier): waking them
	// at every retry (every refusedRetry) would cost an attempt each.
	QuietRefusal bool
}

// A Subscriber is one pub/sub connection of a Locker to one node, subscribed
// to one channel (the Locker's inbox channel; see also ShardedConfig.Earlier)
// from the first time the Locker has to wait until Close.
type Subscriber struct {
	cfg Config

	mu      sync.Mutex
	ps      node.PubSub
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

// New returns a Subscriber that has not subscribed yet.
func New(cfg Config) *Subscriber { return &Subscriber{cfg: cfg} }

// Start subscribes if that has not been done, and then returns a channel
// closed once the subscription is confirmed (or refused); it returns nil
// if the subscription was requested before (or the Subscriber is closed).
// The slot is ignored: one channel serves every key (see Sharded).
func (s *Subscriber) Start(slot int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ps != nil {
		return nil
	}
	s.ready = make(chan struct{})
	s.ps = s.cfg.PubSub()
	s.wg.Add(1)
	go s.loop(s.ps)
	return s.ready
}

// Started reports whether the subscription was requested (see Start).
func (s *Subscriber) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ps != nil
}

// Ready reports whether the subscription is confirmed: an attempt may
// register as a waiter (for a key of any slot).
func (s *Subscriber) Ready(slot int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isReady
}

// Refusal is the node's permanent refusal of the subscription, until a
// later confirmation; nil if none (for a key of any slot).
func (s *Subscriber) Refusal(slot int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusal
}

func (s *Subscriber) loop(ps node.PubSub) {
	defer s.wg.Done()
	// go-redis records the channel even if this write fails, and subscribes
	// again whenever Receive reconnects. Its connection handshake with a
	// frozen node ignores cancellation (it waits for the client's read
	// timeout): Close does not wait for it, and the goroutine ends once
	// go-redis gives up.
	s.setSubscribing(true)
	ctx, cancel := context.WithTimeout(context.Background(), SubscribeTimeout)
	_ = ps.Subscribe(ctx, s.cfg.Channel)
	cancel()
	s.setSubscribing(false)
	if s.isClosed() {
		return
	}
	Receive(ps, s.cfg.Channel, s.cfg.Done, (*listener)(s), s.cfg.Permanent)
}

// listener is a Subscriber as the Listener of its own subscription.
type listener Subscriber

// Message delivers a message of the inbox.
func (l *listener) Message(payload string) { l.cfg.Deliver(payload) }

// Confirmed records a subscription confirmation, and makes every waiter
// try again: after the first, a waiter that could not register on this
// node (its wait for the confirmation timed out) now can; after a later
// one, which follows a reconnection, a release may have gone unheard.
func (l *listener) Confirmed() {
	s := (*Subscriber)(l)
	s.mu.Lock()
	s.isReady, s.refusal = true, nil
	s.wakeReady()
	s.mu.Unlock()
	s.cfg.WakeAll()
}

// Refused records that the node refused the subscription for good, and
// lets the waiters know (they report it).
func (l *listener) Refused(err error) {
	s := (*Subscriber)(l)
	// Only the loop changes refusal: it is still nil after this check.
	s.mu.Lock()
	first := s.refusal == nil
	s.mu.Unlock()
	if first {
		s.cfg.Refused(err)
	}
	s.mu.Lock()
	s.isReady, s.refusal = false, err
	s.wakeReady()
	s.mu.Unlock()
	if !s.cfg.QuietRefusal {
		s.cfg.WakeAll()
	}
}

// wakeReady closes ready once; s.mu is held.
func (s *Subscriber) wakeReady() {
	if !s.woken {
		s.woken = true
		close(s.ready)
	}
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close closes the subscription, and waits for its loop, unless the loop
// is still in its first SUBSCRIBE (a frozen node: it ends once go-redis
// gives up). Then the PubSub is closed on another goroutine too: go-redis'
// PubSub.Close waits for the connection that SUBSCRIBE is making.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ps, subscribing := s.ps, s.subscribing
	s.mu.Unlock()
	switch {
	case ps == nil:
		return nil
	case subscribing:
		go func() { _ = ps.Close() }()
		return nil
	}
	err := ps.Close()
	s.wg.Wait()
	return err
}

func (s *Subscriber) setSubscribing(on bool) {
	s.mu.Lock()
	s.subscribing = on
	s.mu.Unlock()
}

// An Inbox is a Locker's inbox on one node: a Subscriber, or on a Cluster
// with sharded pub/sub a Sharded. Its slot arguments are the hash slots of
// the waiters' keys.
type Inbox interface {
	Start(slot int) <-chan struct{}
	Started() bool
	Ready(slot int) bool
	Refusal(slot int) error
	Close() error
}
