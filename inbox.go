package dlock

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/inbox"
	"github.com/dlock-dev/dlock/internal/keys"
)

// inboxReady reports, per node, whether the Locker's inbox subscription for
// ks's key is confirmed there.
func (l *Locker) inboxReady(ks *keyState) []bool {
	ready := make([]bool, len(l.subs))
	for i, s := range l.subs {
		ready[i] = s.Ready(ks.hashSlot)
	}
	return ready
}

// subscribe subscribes the Locker's inbox for ks's key on every node where
// it has not been requested yet, and waits up to timeout for those
// confirmations (not again for a node that was asked before and has not
// confirmed: it is down, and its subscription comes back on its own). It
// reports whether any node newly confirmed, i.e. whether an immediate new
// attempt can register where the last one could not.
func (l *Locker) subscribe(ctx context.Context, ks *keyState, timeout time.Duration) bool {
	var pending []<-chan struct{}
	for _, s := range l.subs {
		if ch := s.Start(ks.hashSlot); ch != nil {
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

// newInbox returns the inbox of node i (see internal/inbox): on a Locker of
// one Cluster, sharded (the waiters' members say so, see memberID), with
// the classic subscription as its fallback.
func (l *Locker) newInbox(i int) inbox.Inbox {
	classic := l.newSubscriber(i)
	cc, ok := l.nodes[i].Client.(*redis.ClusterClient)
	if !ok || len(l.nodes) > 1 {
		return classic
	}
	l.sharded = inbox.NewSharded(inbox.ShardedConfig{
		Client:  cc,
		Channel: l.shardedInbox,
		Deliver: func(payload string) { l.deliver(i, payload) },
		Refused: func(err error) {
			l.nodeEvent(i, "", &subscriptionError{channel: l.shardedInbox(-1), err: err})
		},
		Wake:     l.wakeSlot,
		Fallback: classic,
		FellBack: func(err error) {
			l.nodeEvent(i, "", &classicInboxError{err: err})
			l.inboxFellBack()
		},
		Earlier: l.earlierInbox(i),
	})
	return l.sharded
}

// earlierInbox is the classic subscription that a sharded inbox keeps for
// releases by earlier versions of dlock (v0.1.0), which know no sharded
// pub/sub: they PUBLISH "w MEMBER" on the inbox prefix and the member's
// LOCKERID, which for a sharded member ends in shardedMark. Without it, a
// waiter of this version would hear nothing of a release by a process not
// yet upgraded, and try again only when its timers run out. A release by
// this version whose SPUBLISH is refused PUBLISHes there too (release.lua).
// A refusal (an ACL without SUBSCRIBE) is told once, as a node error that
// fails no waiter (waiting works; such releases are heard only through the
// waiters' timers), and wakes none.
func (l *Locker) earlierInbox(i int) *inbox.Subscriber {
	channel := l.inbox + shardedMark
	cfg := l.subscriberConfig(i, channel)
	cfg.Refused = func(err error) { l.nodeEvent(i, "", &earlierInboxError{channel: channel, err: err}) }
	cfg.QuietRefusal = true
	return inbox.New(cfg)
}

// inboxFellBack gives every waiter registered with a sharded member a
// classic one, after the Locker's inbox fell back to classic pub/sub (a
// release would SPUBLISH to the sharded member, whose channel nobody
// listens to any more): its registrations are removed, and it registers
// again at its next attempt, which every waiter makes now.
func (l *Locker) inboxFellBack() {
	mark := l.id + shardedMark + ":"
	l.mu.Lock()
	kss := make([]*keyState, 0, len(l.keys))
	for _, ks := range l.keys {
		kss = append(kss, ks)
	}
	l.mu.Unlock()
	for _, ks := range kss {
		// Not under l.mu: a removal takes it (see Locker.leave).
		ks.mu.Lock()
		if strings.HasPrefix(ks.member, mark) {
			ks.leave()
			if ks.shared {
				// Its number names its keyState (see deliver).
				ks.member = l.readerMember(ks.slot.reader, ks.key)
			} else {
				ks.member = ks.newMember()
			}
		}
		ks.mu.Unlock()
		ks.signal()
	}
}

// shardedInbox is the Locker's sharded inbox channel of a hash slot (in
// that slot); of slot -1, its pattern, for messages.
func (l *Locker) shardedInbox(slot int) string {
	tag := "TAG"
	if slot >= 0 {
		tag = keys.SlotTag(slot)
	}
	return l.inboxes + "{" + tag + "}" + l.id + shardedMark
}

// inboxOf names the channel of the Locker's inbox for a key of slot.
func (l *Locker) inboxOf(slot int) string {
	if l.sharded != nil && l.sharded.Active() {
		return l.shardedInbox(slot)
	}
	return l.inbox
}

// shardedMark ends the LOCKERID of the waiters' members of a Locker whose
// inbox is sharded: release.lua wakes them with SPUBLISH.
const shardedMark = "s"

// memberID is the LOCKERID of the Locker's waiters' members.
func (l *Locker) memberID() string {
	if l.sharded != nil && l.sharded.Active() {
		return l.id + shardedMark
	}
	return l.id
}

// newSubscriber returns the classic inbox subscription of node i (see
// internal/inbox).
func (l *Locker) newSubscriber(i int) *inbox.Subscriber {
	cfg := l.subscriberConfig(i, l.inbox)
	// Key "": the subscription, not a lock's command (see EventNodeError).
	cfg.Refused = func(err error) { l.nodeEvent(i, "", &subscriptionError{channel: l.inbox, err: err}) }
	return inbox.New(cfg)
}

// subscriberConfig is what every classic subscription of node i's inbox
// shares: its messages go to the waiters, and its confirmations wake them.
func (l *Locker) subscriberConfig(i int, channel string) inbox.Config {
	return inbox.Config{
		PubSub:    l.nodes[i].NewPubSub,
		Channel:   channel,
		Done:      l.done,
		Permanent: permanent,
		Deliver:   func(payload string) { l.deliver(i, payload) },
		WakeAll:   l.wakeAll,
	}
}

// inboxRefused returns an error when so many nodes refused the inbox
// subscription for ks's key that no quorum of them can wake its waiter.
func (l *Locker) inboxRefused(ks *keyState) error {
	var errs []error
	for i, s := range l.subs {
		if err := s.Refusal(ks.hashSlot); err != nil {
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

// classicInboxError says that a Cluster's waiters use classic pub/sub:
// sharded pub/sub was refused (a server before Redis 7.0, or an ACL without
// SSUBSCRIBE), so that each wake-up crosses the cluster bus. Waiting works.
type classicInboxError struct{ err error }

func (e *classicInboxError) Error() string {
	return "the waiters use classic pub/sub, whose wake-ups cross the cluster bus: sharded pub/sub was refused: " + e.err.Error()
}

func (e *classicInboxError) Unwrap() error { return e.err }

// earlierInboxError says that a sharded inbox's classic subscription (see
// earlierInbox) was refused: a release that cannot SPUBLISH (by an earlier
// version of dlock, or by a user without SPUBLISH) then wakes this
// Locker's waiters only through their timers. Waiting works.
type earlierInboxError struct {
	channel string
	err     error
}

func (e *earlierInboxError) Error() string {
	return "releases that cannot use sharded pub/sub (by dlock v0.1.0, or by a user without SPUBLISH) wake the waiters only through their timers: the subscription to the channel " + e.channel + " was refused: " + e.err.Error()
}

func (e *earlierInboxError) Unwrap() error { return e.err }
