package dlock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/inbox"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// A Request is a release request (Locker.RequestRelease) as its holder
// hears it, and as Status shows it while it is pending.
type Request struct {
	// Reason is the reason given to RequestRelease; it may be "".
	Reason string
	// From names the process that asked: "HOST:PID".
	From string
}

// RequestRelease asks the current holders of the lock named key to let go:
// the holder of a lock, every holder of a semaphore's permits, every shared
// hold. Each of them sees its Lock's Asked channel close (at the first
// request; later ones change nothing) with reason and the asking process
// readable (AskedReason, AskedBy), and decides: dlock never releases or
// shortens a lock because of a request (ForceRelease is the abrupt way).
// A request is for the holders at the time: a holder that comes later is
// not asked, even while the request is still shown by Status.
//
// It returns nil once a quorum of nodes (N/2+1; every node on one Redis)
// found holders of key and told them; an error wrapping ErrNotHeld when
// the key is free there (nobody was asked: a demanding caller learns that
// its request reached no one); an error wrapping ErrUnavailable (or
// ErrMisconfigured) when too few nodes answered, with each node's failure
// as *NodeError (nodes that answered may have told their holders); and an
// error wrapping ErrInvalid for an empty key, a reason over MaxMetadata
// bytes or an invalid Locker option. It costs one command per node (a
// script that records the request in the key's slot and publishes it);
// nothing is sent or stored while nobody asks.
//
// A holder hears it at once when its Locker listens (from the first call
// of Asked on any of its locks on, until Close), or, for a request made
// before, when that listening begins (the request is kept, in the key's
// slot, for the TTL its holders had left when asked). On a Redlock a
// holder is told by the first node that tells it.
func (l *Locker) RequestRelease(ctx context.Context, key, reason string) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if len(reason) > MaxMetadata {
		return invalid("a release request's reason of %d bytes: at most MaxMetadata (%d)", len(reason), MaxMetadata)
	}
	nm := l.names(key)
	args := script.AskedArgs{Request: requester() + "\n" + reason, Channel: l.askedChannel()}.
		Command([]any{nm.Lock(), nm.Asked()})
	n := len(l.nodes)
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[int64](func(ctx context.Context, _ int, c node.Conn) (int64, error) {
			v, err := runOn(ctx, c, script.Asked, args)
			told, err := script.IntReply("asked.lua", v, err)
			if err != nil || told > 0 {
				return 1, err
			}
			return -1, nil // free: nothing written
		}),
		func(rs []quorum.Result[int64], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
	o := l.ownerChecked(key, results, missing, l.quorum)
	o.decided(ctx.Err() != nil)
	if class := o.class(ErrNotHeld); class != nil {
		what := fmt.Sprintf("release request for %q: ", key)
		if class == ErrNotHeld {
			return o.wrap(class, what+"nobody holds it"+o.counts("found a holder"))
		}
		if ctx.Err() != nil {
			return l.nameCauses(o.wrap(class, what+"too few nodes answered"+o.counts("told its holders"), ctx.Err()), DefaultTTL)
		}
		return l.nameCauses(o.wrap(class, what+"too few nodes answered"+o.counts("told its holders")), DefaultTTL)
	}
	return nil
}

// requester is this process as a Request's From.
var requester = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "?"
	}
	return strings.ReplaceAll(host, "\n", " ") + ":" + strconv.Itoa(os.Getpid())
})

// askedChannel is where asked.lua publishes the requests for every key of
// the Locker's prefix: under the inbox prefix (so that the ACL of the docs
// allows it), a name no LOCKERID takes (those are 32 hex digits).
func (l *Locker) askedChannel() string { return l.inboxes + "asked" }

// Asked returns a channel that is closed at the first release request
// (Locker.RequestRelease) for this holder; AskedReason and AskedBy then say
// why and who. It never closes otherwise: not on release, nor on loss.
// Nothing is released because of a request: deciding is the holder's.
//
// The first call on any lock of a Locker makes the Locker listen for
// requests, from then until Close: one subscription per node (a
// connection, and one SUBSCRIBE), and, whenever a subscription is
// confirmed (the first time, and after a reconnection), one HGET per lock
// held, pipelined, for the requests made while it was not listening. It
// sends nothing more while nobody asks. A request made before is heard
// when the subscription is confirmed, while it is kept (the TTL its
// holder had left when asked); one made after is heard as soon as the
// node publishes it.
func (k *Lock) Asked() <-chan struct{} {
	k.l.listen()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ask.ch == nil {
		k.ask.ch = make(chan struct{})
		if k.ask.req != nil {
			close(k.ask.ch)
		}
	}
	return k.ask.ch
}

// AskedReason returns the reason of the first release request heard for
// this holder, or "" if none was (see Asked).
func (k *Lock) AskedReason() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ask.req == nil {
		return ""
	}
	return k.ask.req.Reason
}

// AskedBy returns the process that made the first release request heard
// for this holder ("HOST:PID"), or "" if none was (see Asked).
func (k *Lock) AskedBy() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ask.req == nil {
		return ""
	}
	return k.ask.req.From
}

// askedHold is a Lock's release request (asked.go's), under Lock.mu: ch is
// Asked's channel, made by its first call; req the first request heard.
type askedHold struct {
	ch  chan struct{}
	req *Request
}

// tellLocked records req as the lock's request, if it is the first; k.mu is
// held.
func (k *Lock) tellLocked(req Request) {
	if k.ask.req != nil {
		return
	}
	k.ask.req = &req
	if k.ask.ch != nil {
		close(k.ask.ch)
	}
}

func (k *Lock) tell(req Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tellLocked(req)
}

// listening is the Locker's side of release requests (asked.go's), under
// Locker.mu: subs, one subscription per node to askedChannel from the
// first Asked call on (nil before); early, the requests heard for tokens of
// no started lock, for a while (a lock granted on the nodes whose start
// has not come yet: start looks here).
type listening struct {
	subs  []*inbox.Subscriber
	early map[string]earlyRequest
}

type earlyRequest struct {
	req Request
	at  time.Time
}

// The early requests are kept earlyFor (longer than an acquisition's
// rounds, each bounded by the node timeout, at most 1s), at most earlyMax
// of them (requests for other processes' locks land there too).
const (
	earlyFor = 10 * time.Second
	earlyMax = 1024
)

// listen makes the Locker listen for release requests on every node, once.
func (l *Locker) listen() {
	l.mu.Lock()
	if l.closed || l.asked.subs != nil {
		l.mu.Unlock()
		return
	}
	subs := make([]*inbox.Subscriber, len(l.nodes))
	for i := range subs {
		channel := l.askedChannel()
		subs[i] = inbox.New(inbox.Config{
			PubSub:    l.nodes[i].NewPubSub,
			Channel:   channel,
			Done:      l.done,
			Permanent: permanent,
			Deliver:   l.heard,
			Refused: func(err error) {
				l.nodeEvent(i, "", &askedInboxError{channel: channel, err: err})
			},
			WakeAll:      func() { l.spawn(func() { l.readRequests(i) }) },
			QuietRefusal: true,
		})
	}
	l.asked = listening{subs: subs, early: make(map[string]earlyRequest)}
	l.mu.Unlock()
	for _, s := range subs {
		s.Start(-1)
	}
}

// heard handles a request published by asked.lua: "TOKEN TOKEN …\nFROM\nREASON".
func (l *Locker) heard(payload string) {
	list, stored, ok := strings.Cut(payload, "\n")
	req, ok2 := parseRequest(stored)
	if !ok || !ok2 {
		return
	}
	tokens := make(map[string]struct{})
	for _, t := range strings.Fields(list) {
		tokens[t] = struct{}{}
	}
	var told []*Lock
	l.mu.Lock()
	for k := range l.locks {
		if _, ok := tokens[k.Token()]; ok {
			told = append(told, k)
			delete(tokens, k.Token())
		}
	}
	now := time.Now()
	for t, e := range l.asked.early {
		if now.Sub(e.at) > earlyFor {
			delete(l.asked.early, t)
		}
	}
	for t := range tokens {
		if len(l.asked.early) >= earlyMax {
			break
		}
		l.asked.early[t] = earlyRequest{req: req, at: now}
	}
	l.mu.Unlock()
	for _, k := range told {
		k.tell(req)
	}
}

// earlyRequest gives a lock that starts a request heard before its start;
// k.mu and l.mu are held.
func (l *Locker) earlyRequestFor(k *Lock) {
	if e, ok := l.asked.early[k.Token()]; ok {
		delete(l.asked.early, k.Token())
		if time.Since(e.at) <= earlyFor {
			k.tellLocked(e.req)
		}
	}
}

// parseRequest reads a request as asked.lua stores it: "FROM\nREASON".
func parseRequest(s string) (Request, bool) {
	from, reason, ok := strings.Cut(s, "\n")
	return Request{Reason: reason, From: from}, ok
}

// readRequests reads, on node i, the requests kept for the locks the Locker
// holds (one pipeline of HGETs), after its subscription there was
// confirmed: those made while it did not listen.
func (l *Locker) readRequests(i int) {
	l.mu.Lock()
	locks := make([]*Lock, 0, len(l.locks))
	for k := range l.locks {
		locks = append(locks, k)
	}
	l.mu.Unlock()
	if len(locks) == 0 {
		return
	}
	quorum.Fanout(l.bg, l.nodes[i:i+1], l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[int](func(ctx context.Context, _ int, c node.Conn) (int, error) {
			cmds := make([][]any, len(locks))
			for j, k := range locks {
				cmds[j] = []any{"hget", k.names.Asked(), k.Token()}
			}
			for j, r := range c.DoMulti(ctx, cmds...) {
				if req, ok := parseRequest(node.String(r.Val)); ok && r.Err == nil {
					locks[j].tell(req)
				}
			}
			return 0, nil
		}),
		func([]quorum.Result[int], int) bool { return false }, nil)
}

// askedInboxError says that a node refused the subscription to the release
// requests (an ACL without the channel): requests made there reach this
// Locker's holders only when it is subscribed again. Nothing else fails.
type askedInboxError struct {
	channel string
	err     error
}

func (e *askedInboxError) Error() string {
	return "release requests are not heard from this node: the subscription to the channel " + e.channel + " was refused: " + e.err.Error()
}

func (e *askedInboxError) Unwrap() error { return e.err }
