package dlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/internal/inbox"
	"github.com/dlock-dev/dlock/internal/node"
)

// Observe watches the election named key. It sends the current leader at
// once (the zero Leader if there is none), then every change in order: a new
// term, and a vacancy (the zero Leader) when the leader resigned or its lock
// expired. Changes are announced on a pub/sub channel; besides, once the
// leader's lock would have expired, Observe reads the leader again, which
// catches a leader that died without resigning (one read per TTL of the
// leader's lock, at most), and every 15s while there is no leader, in case
// an announcement was missed. The channel is closed when ctx ends or the
// Locker is closed; an invalid key, or a closed Locker, closes it at once.
// Close returns once its observers have ended and given back their pub/sub
// connections (for at most one node timeout: a frozen node may hold one
// longer), so that the client can be closed right after it.
//
// Changes are kept for a reader that falls behind, up to 64: one further
// behind loses the oldest of them. Changes are never reordered, and the
// terms a reader receives never decrease. A term is sent again only for
// the same leader: with a new Value (Proclaim), with a larger Transitions
// (a read can find a new term before its nodes counted it; the count
// comes with its announcement, or the next read), or after a vacancy that
// a read reported and a later read disproved (on a quorum, a lock that
// was renewed late). Announcements can be missed
// (a reconnection, a node that was away): then the next read of the leader,
// at the latest when the lock would have expired, brings the observer up to
// date. On a quorum, a vacancy shorter than the nodes' delivery skew may be
// folded into the next term. Each Observe holds one pub/sub connection per
// node.
//
// A node that refuses the subscription (an ACL without the channel
// &PREFIXleader:*) is reported as an EventNodeError whose error matches
// ErrMisconfigured (WithLogger logs it at Error), and asked again every
// 15s. While every node refuses it no announcement can come: the observer
// then reads the leader every second instead, so changes reach it up to a
// second late, and a leader that comes and goes within a second may be
// missed.
func (l *Locker) Observe(ctx context.Context, key string) <-chan Leader {
	out := make(chan Leader)
	if l.checkKey(key) != nil || !l.join(&l.observers) {
		close(out)
		return out
	}
	o := &observer{l: l, key: key, out: out, events: make(chan string, 16), stop: make(chan struct{}), poke: make(chan struct{}, 1)}
	ch := l.electionChannel(key)
	for _, n := range l.nodes {
		// No connection yet: the subscription is made by its receiving
		// goroutine (see receive), so that a frozen node does not hold up
		// Observe.
		o.subs = append(o.subs, n.NewPubSub())
	}
	go o.run(ctx, ch)
	return out
}

// observer is one Observe call.
type observer struct {
	l      *Locker
	key    string
	out    chan Leader
	subs   []node.PubSub
	events chan string   // announcements from every node
	stop   chan struct{} // closed when the observer ends
	// refusals counts the nodes that refused the subscription (see
	// observerNode); poke tells run that it changed.
	refusals atomic.Int32
	poke     chan struct{}
}

// observerNode is an observer's subscription on one node (a listener).
type observerNode struct {
	o         *observer
	node      int
	channel   string
	isRefused bool // only the node's receiving goroutine uses it
}

func (n *observerNode) Message(payload string) {
	select {
	case n.o.events <- payload:
	case <-n.o.stop:
	}
}

func (n *observerNode) Confirmed() {
	if n.isRefused {
		n.isRefused = false
		n.o.refusals.Add(-1)
		n.o.pokeRun()
	}
}

// refused reports the node's refusal once (until it confirms again), as an
// EventNodeError matching ErrMisconfigured (WithLogger logs it at Error).
func (n *observerNode) Refused(err error) {
	if n.isRefused {
		return
	}
	n.isRefused = true
	n.o.l.nodeEvent(n.node, n.o.key, &subscriptionError{channel: n.channel, err: err})
	n.o.refusals.Add(1)
	n.o.pokeRun()
}

func (o *observer) pokeRun() {
	select {
	case o.poke <- struct{}{}:
	default:
	}
}

// wait is how long to wait before the next read of the leader, when the
// election state says d: at most observerRefusedPoll while every node
// refuses the subscription (no announcement can come).
func (o *observer) wait(d time.Duration) time.Duration {
	if int(o.refusals.Load()) == len(o.subs) {
		return min(d, observerRefusedPoll)
	}
	return d
}

func (o *observer) run(ctx context.Context, channel string) {
	defer o.l.observers.Done()
	var wg sync.WaitGroup
	o.subscribe(ctx, channel, &wg)
	defer func() {
		close(o.stop)
		for _, ps := range o.subs {
			_ = ps.Close()
		}
		wg.Wait()
		close(o.out)
	}()
	var st electionState
	if o.first(ctx, &st) {
		o.follow(ctx, &st)
	}
}

// subscribe subscribes to channel on every node, each on a goroutine of
// its own that then receives the node's announcements until o.stop (wg
// counts them), and returns once each has subscribed (or given up after
// inbox.SubscribeTimeout), so that no change after the first read goes unheard.
func (o *observer) subscribe(ctx context.Context, channel string, wg *sync.WaitGroup) {
	var subscribed sync.WaitGroup
	for i, ps := range o.subs {
		wg.Add(1)
		subscribed.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, inbox.SubscribeTimeout)
			_ = ps.Subscribe(sctx, channel) // go-redis records it even if this write fails
			cancel()
			subscribed.Done()
			inbox.Receive(ps, channel, o.stop, &observerNode{o: o, node: i, channel: channel}, permanent)
		}()
	}
	subscribed.Wait()
}

// first reads the current leader into st, again on a backoff while too
// few nodes answer; it reports false if ctx ended or the Locker was closed
// first.
func (o *observer) first(ctx context.Context, st *electionState) bool {
	for {
		if st.read(ctx, o.l, o.key) || ctx.Err() != nil {
			return ctx.Err() == nil
		}
		select {
		case <-time.After(errorRetry(o.l.nodeTimeout(DefaultTTL), 0)):
		case <-ctx.Done():
		case <-o.l.done:
			return false
		}
	}
}

// follow sends the leader in st, then each change: from the announcements
// (o.events), from the reads that the check timer asks for (when the
// leader's lock could have run out, after a vacancy or a doubt, and
// periodically), until ctx ends or the Locker is closed. Changes wait in a
// queue for a reader that is behind.
func (o *observer) follow(ctx context.Context, st *electionState) {
	queue := leaderQueue{st.cur}
	check := time.NewTimer(o.wait(st.next))
	defer check.Stop()
	errWait := 0
	for {
		var out chan Leader
		var next Leader
		if len(queue) > 0 {
			out, next = o.out, queue[0]
		}
		select {
		case out <- next:
			queue = queue[1:]
		case p := <-o.events:
			before := st.cur
			if st.apply(p) {
				queue = queue.push(before, st.cur)
				if st.cur.Term == 0 {
					check.Reset(0) // a vacancy: make sure, and look for the next leader
				}
			}
			if st.doubt {
				st.doubt = false
				check.Reset(0)
			}
		case <-check.C:
			if len(o.events) > 0 {
				// Announcements first: a read must not jump over them.
				check.Reset(announceGrace / 4)
				continue
			}
			before := st.cur
			if st.read(ctx, o.l, o.key) {
				errWait = 0
			} else {
				if ctx.Err() != nil {
					return
				}
				// Nodes unavailable: try again on a backoff.
				st.next = errorRetry(o.l.nodeTimeout(DefaultTTL), errWait)
				errWait++
			}
			queue = queue.push(before, st.cur)
			check.Reset(o.wait(st.next))
		case <-o.poke:
			check.Reset(o.wait(st.next))
		case <-ctx.Done():
			return
		case <-o.l.done:
			return
		}
	}
}

// leaderQueue holds the changes not sent yet, oldest first (at most
// observeQueue: a reader further behind loses the oldest).
type leaderQueue []Leader

// push returns q with cur queued if it differs from before. (A value
// receiver, so that the queue of a reader that keeps up stays on the
// stack.)
func (q leaderQueue) push(before, cur Leader) leaderQueue {
	if cur == before {
		return q
	}
	if len(q) == observeQueue {
		q = q[1:]
	}
	return append(q, cur)
}

// observeQueue is how many changes an observer keeps for a reader that is
// behind.
const observeQueue = 64

// electionState is what an observer knows of an election.
type electionState struct {
	cur   Leader // the current leader; zero: none
	token string // the current (or last) leader's lock token
	seen  uint64 // the largest term known
	// vacated: the term seen has ended (resigned, or its lock is gone);
	// resigned: by its leader's announcement.
	vacated, resigned bool
	// next is when to read the leader again: once the leader's lock would
	// have expired without a renewal, or after observerFallback without one.
	next time.Duration
	// unannounced is a term that a read found and no announcement told of
	// yet: it is taken after announceGrace, if its announcement (or those
	// of terms before it) did not come meanwhile.
	unannounced uint64
	// doubt: an announcement of another leader came with a term not above
	// the largest known (stale, or the term known was read too high): read
	// the leader again now.
	doubt bool
	// countTerm and count: the largest count of terms (Leader.Transitions)
	// announced for countTerm, a term not taken yet ("C TERM N" comes
	// before its term's "L").
	countTerm, count uint64
}

// announceGrace is how long an observer that read a term it was not told of
// waits for the announcements in flight before it takes that term, so that
// the terms in between are not skipped.
const announceGrace = 200 * time.Millisecond

// observerRefusedPoll is how often an observer reads the leader while every
// node refuses its subscription to the election's channel.
const observerRefusedPoll = time.Second

// observerFallback is how often an observer reads an election that has no
// leader, in case an announcement was missed.
const observerFallback = 15 * time.Second

// read reads the leader and updates the state; it reports false when the
// nodes could not tell.
func (s *electionState) read(ctx context.Context, l *Locker, key string) bool {
	ld, token, ttl, err := l.leader(ctx, key)
	switch {
	case err == nil:
		s.next = max(ttl, time.Millisecond) + 10*time.Millisecond
		if token == s.token {
			// The same leadership (on a quorum its term as read may
			// differ from the one announced: see Leader): back after a
			// vacancy that a read, not a resignation, reported; or with a
			// value (Proclaim) or count that an announcement missed.
			if s.vacated && !s.resigned {
				s.cur, s.vacated = Leader{Value: ld.Value, Term: s.seen, Transitions: ld.Transitions}, false
			} else if !s.vacated {
				s.cur.Value, s.cur.Transitions = ld.Value, max(s.cur.Transitions, ld.Transitions)
			}
			s.unannounced = 0
			return true
		}
		switch {
		case ld.Term > s.seen && s.seen != 0 && s.unannounced != ld.Term:
			// Its announcement may be on its way, with those of terms
			// before it: look again shortly.
			s.unannounced, s.next = ld.Term, announceGrace
			return true
		case ld.Term > s.seen:
			s.cur, s.seen, s.vacated, s.resigned, s.token = ld, ld.Term, false, false, token
		default:
			// Another leader, with a term below the largest known: that
			// one was read above the term its leader held (a fence
			// counter that ran ahead: see Leader). A read tells the
			// present, and a former leader cannot hold the lock again:
			// this is the leader now.
			s.cur, s.seen, s.vacated, s.resigned, s.token = ld, ld.Term, false, false, token
		}
		s.unannounced = 0
		return true
	case errors.Is(err, ErrNoLeader):
		if !s.vacated {
			s.cur, s.vacated = Leader{}, true
		}
		s.next = observerFallback
		return true
	}
	return false
}

// apply updates the state with the announcement p, and reports whether it
// changed: "L TERM TOKEN VALUE", a leader won TERM; "C TERM N", before it,
// the election's count of terms (Leader.Transitions); "P TERM TOKEN
// VALUE", the leader of TERM proclaimed VALUE (one of a term not known yet
// is taken as its "L"); "V TERM", the leader of TERM resigned. An
// announcement of an older term than the largest known is stale.
func (s *electionState) apply(p string) bool {
	kind, rest, _ := strings.Cut(p, " ")
	termS, rest, _ := strings.Cut(rest, " ")
	term, err := strconv.ParseUint(termS, 10, 64)
	if err != nil {
		return false
	}
	token, value, _ := strings.Cut(rest, " ")
	if kind == "C" {
		return s.counted(term, token)
	}
	switch {
	case (kind == "L" || kind == "P") && value == "":
		return false
	case (kind == "L" || kind == "P") && term > s.seen:
		var n uint64
		if s.countTerm == term {
			n = s.count
		}
		s.cur, s.seen, s.vacated, s.resigned, s.token = Leader{Value: value, Term: term, Transitions: n}, term, false, false, token
		return true
	case kind == "P" && term == s.seen && token == s.token && !s.vacated:
		changed := s.cur.Value != value
		s.cur.Value = value
		return changed
	case kind == "L" && token != s.token:
		s.doubt = true
		return false
	case kind == "V" && term == s.seen && !s.resigned:
		changed := !s.vacated
		s.cur, s.vacated, s.resigned = Leader{}, true, true
		return changed
	}
	return false
}

// counted records the count of terms n (a decimal) announced for term: the
// current leader's, or kept for the term's own announcement.
func (s *electionState) counted(term uint64, n string) bool {
	c, err := strconv.ParseUint(n, 10, 64)
	switch {
	case err != nil:
		return false
	case term == s.seen && !s.vacated:
		changed := c > s.cur.Transitions
		s.cur.Transitions = max(s.cur.Transitions, c)
		return changed
	case term > s.seen:
		if s.countTerm != term {
			s.countTerm, s.count = term, 0
		}
		s.count = max(s.count, c)
	}
	return false
}
