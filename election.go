package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// ErrNoLeader is wrapped by the error of Leader when the election has no
// leader.
var ErrNoLeader = errors.New("dlock: no leader")

// Leader is the leader of an election: the value it published when it won
// (Campaign) and its term, the fence of its leadership. The zero Leader means
// that there is none.
type Leader struct {
	Value string
	Term  uint64
}

// Campaign blocks until the caller is the leader of the election named key,
// or ctx ends, and publishes value (an address, a host name: at most
// MaxMetadata bytes, not empty) as the leader's value. An election is a lock
// (Acquire) whose holder's metadata is its value; opts are Acquire's, and
// WithMetadata among them is ignored. Candidates wait as waiters for a lock
// do: in order of arrival, woken by a resignation, not polling.
//
// The returned *Lock is the leadership: its Fence is the term, larger than
// every earlier term; Lost closes when leadership can no longer be guaranteed
// (the leader must stop acting as leader then); Release resigns, and the next
// candidate takes over at once. Observers (Observe) are told of the new term
// when Campaign returns. On failure the error is Acquire's: it wraps
// ErrNotAcquired and ctx's error when ctx ended first, and ErrClosed when
// the Locker was closed, also after the lock was granted but before the
// leadership was announced (Close gave it back, and observers are told of
// no leader).
func (l *Locker) Campaign(ctx context.Context, key, value string, opts ...LockOption) (*Lock, error) {
	if value == "" {
		return nil, invalid("a leader's value must not be empty")
	}
	if cfg, err := l.lockConfig(key, opts); err != nil {
		return nil, err
	} else if cfg.limit > 1 {
		return nil, invalid("an election has one leader: WithLimit(%d) does not apply", cfg.limit)
	}
	all := make([]LockOption, 0, len(opts)+2)
	all = append(all, opts...)
	all = append(all, WithMetadata(value), asElection)
	k, err := l.Acquire(ctx, key, all...)
	if err != nil {
		return nil, err
	}
	if !k.announceTerm(value) && l.isClosed() {
		// Close took the leadership back before it could be announced.
		return nil, closedErr(key)
	}
	return k, nil
}

// asElection makes the lock a leadership (see leadership) from its start,
// so that a Close that comes before Campaign returns announces its end.
func asElection(c *lockConfig) { c.election = true }

// leadership is the election state of a Lock that Campaign acquired. Its
// announcements are serialised, so that observers never hear of the
// vacancy of a term before the term itself: a Close (or Release) racing
// with Campaign either comes after the term's announcement and announces
// the vacancy after it, or comes first, and then the term is not announced
// at all (the vacancy is, which observers that never saw the term ignore,
// and those that read it take).
type leadership struct {
	mu      sync.Mutex
	vacated bool // the vacancy was announced (or the term can no longer be)
}

// announceTerm announces the leadership's term, unless the lock was lost or
// released first; it reports whether it did.
func (k *Lock) announceTerm(value string) bool {
	e := k.election
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.vacated || !k.held() {
		e.vacated = true
		return false
	}
	k.l.announce(k.key, "L "+strconv.FormatUint(k.fence, 10)+" "+k.token+" "+value)
	return true
}

// resigned announces that the leadership ended (resigned, or given back by
// Close), once, after its term's announcement if that is under way. It
// does nothing for a lock that is not a leadership.
func (k *Lock) resigned() {
	e := k.election
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.vacated {
		e.vacated = true
		k.l.announce(k.key, "V "+strconv.FormatUint(k.fence, 10))
	}
}

// electionChannel is the pub/sub channel on which an election's changes are
// announced.
func (l *Locker) electionChannel(key string) string { return l.cfg.prefix + "leader:" + key }

// announce publishes msg on the election's channel on every node, waiting at
// most the node timeout, and not for a node that recently did not answer in
// time (a frozen minority must not delay every Campaign by a node timeout).
// It is a hint for observers, who read the leader again when one is missed:
// a failure is not an error.
func (l *Locker) announce(key, msg string) {
	ch := l.electionChannel(key)
	n := len(l.nodes)
	quorum.Fanout(context.Background(), l.nodes, l.nodeTimeout(DefaultTTL),
		func(ctx context.Context, _ int, c redis.UniversalClient) (int64, error) {
			return c.Publish(ctx, ch, msg).Result()
		},
		func(rs []quorum.Result[int64], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
}

// Leader returns the current leader of the election named key: the holder
// of the lock on a quorum of nodes, with the value it published and its term.
// It returns an error wrapping ErrNoLeader when there is none (the lock is
// free, or reserved for a candidate that is taking over), ErrUnavailable when
// too few nodes answered, ErrInvalid for an invalid key. A leader is a
// snapshot: it may have resigned or lost the lock by the time Leader returns.
// The term is the fence the leader holds (stored with it on each node; on a
// quorum, the one most of its nodes hold: a node that ran the leader's
// acquisition late holds the fence it counted itself until the leader's
// next renewal), also when a fence counter was lost (an eviction).
func (l *Locker) Leader(ctx context.Context, key string) (Leader, error) {
	ld, _, _, err := l.leader(ctx, key)
	return ld, err
}

// leader is Leader, with the leader's token and the shortest remaining TTL
// of its lock among the nodes that hold it.
func (l *Locker) leader(ctx context.Context, key string) (Leader, string, time.Duration, error) {
	st, err := l.Status(ctx, key)
	if err != nil {
		return Leader{}, "", 0, err
	}
	if st.Limit > 0 {
		return Leader{}, "", 0, invalid("%q is a semaphore (limit %d), not an election", key, st.Limit)
	}
	answered, most := 0, 0
	held := map[string]int{}
	for _, ns := range st.Nodes {
		if ns.Err != nil {
			continue
		}
		answered++
		if ns.Held && !ns.Reserved && ns.token != "" {
			held[ns.token]++
			most = max(most, held[ns.token])
		}
	}
	for token, n := range held {
		if n < l.quorum {
			continue
		}
		var ld Leader
		var ttl time.Duration
		terms := make(map[uint64]int, n)
		for _, ns := range st.Nodes {
			if ns.Err == nil && ns.token == token {
				t := ns.holderFence
				if t == 0 {
					t = ns.Fence // no entry (lost): the counter
				}
				terms[t]++
				if ld.Value == "" {
					ld.Value = ns.Metadata
				}
				if ttl == 0 || (ns.TTL > 0 && ns.TTL < ttl) {
					ttl = ns.TTL
				}
			}
		}
		ld.Term = mostCommon(terms)
		return ld, token, ttl, nil
	}
	if most+len(l.nodes)-answered >= l.quorum {
		// The nodes that did not answer may hold the lock of a leader.
		return Leader{}, "", 0, fmt.Errorf("%w: leader of %q: %d of %d nodes answered, %d needed to tell", ErrUnavailable, key, answered, len(l.nodes), l.quorum)
	}
	return Leader{}, "", 0, fmt.Errorf("%w: %q", ErrNoLeader, key)
}

// mostCommon returns the term most nodes hold, the smallest of those that
// tie: the leader's nodes hold the fence Campaign returned, but for a node
// that ran the leader's acquisition late, which holds the fence it counted
// itself until the leader's next renewal sets it right.
func mostCommon(terms map[uint64]int) uint64 {
	var best uint64
	for t, n := range terms {
		if n > terms[best] || (n == terms[best] && t < best) {
			best = t
		}
	}
	return best
}

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
// terms a reader receives always increase. Announcements can be missed
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
		o.subs = append(o.subs, n.Client.Subscribe(context.Background()))
	}
	go o.run(ctx, ch)
	return out
}

// observer is one Observe call.
type observer struct {
	l      *Locker
	key    string
	out    chan Leader
	subs   []*redis.PubSub
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

func (n *observerNode) message(payload string) {
	select {
	case n.o.events <- payload:
	case <-n.o.stop:
	}
}

func (n *observerNode) confirmed() {
	if n.isRefused {
		n.isRefused = false
		n.o.refusals.Add(-1)
		n.o.pokeRun()
	}
}

// refused reports the node's refusal once (until it confirms again), as an
// EventNodeError matching ErrMisconfigured (WithLogger logs it at Error).
func (n *observerNode) refused(err error) {
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
// subscribeTimeout), so that no change after the first read goes unheard.
func (o *observer) subscribe(ctx context.Context, channel string, wg *sync.WaitGroup) {
	var subscribed sync.WaitGroup
	for i, ps := range o.subs {
		wg.Add(1)
		subscribed.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
			_ = ps.Subscribe(sctx, channel) // go-redis records it even if this write fails
			cancel()
			subscribed.Done()
			receive(ps, channel, o.stop, &observerNode{o: o, node: i, channel: channel})
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
			// vacancy that a read, not a resignation, reported.
			if s.vacated && !s.resigned {
				s.cur, s.vacated = Leader{Value: ld.Value, Term: s.seen}, false
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
// changed: "L TERM TOKEN VALUE", a leader won TERM; "V TERM", the leader of
// TERM resigned. An announcement of an older term than the largest known is
// stale.
func (s *electionState) apply(p string) bool {
	kind, rest, _ := strings.Cut(p, " ")
	termS, rest, _ := strings.Cut(rest, " ")
	term, err := strconv.ParseUint(termS, 10, 64)
	if err != nil {
		return false
	}
	token, value, _ := strings.Cut(rest, " ")
	switch {
	case kind == "L" && value == "":
		return false
	case kind == "L" && term > s.seen:
		s.cur, s.seen, s.vacated, s.resigned, s.token = Leader{Value: value, Term: term}, term, false, false, token
		return true
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
