package dlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// Leader is the leader of an election: the value it published when it won
// (Campaign) or later (Proclaim), its term, the fence of its leadership,
// and how many terms the election has had. The zero Leader means that
// there is none.
type Leader struct {
	Value string
	Term  uint64
	// Transitions is the number of terms the election has had, this one
	// included (the first leader's is 1): how many times leadership
	// changed hands, from no leader or another. It is counted on the
	// nodes when each term begins, and lives there as long as the fence
	// counter does after a use: the retention (WithFenceRetention), or the
	// leader's TTL if that is longer. While a leader holds, its process
	// sets that life again every half of it (renewals do not), so that
	// no leader outlives the count; after the last leader it is gone that
	// life after the last time it was set. It is 0 when it is not known: a
	// leader of a dlock version before this count, or a count that
	// expired (the leader's process paused, or its nodes unanswering, for
	// more than half that life); the next term then counts from 1 again. The count is never changed
	// but by a new term: it can be lost, not made too large. On a quorum,
	// the largest count of the leader's nodes.
	Transitions uint64
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
// when Campaign returns. While it leads, the leadership also keeps the
// election's count of terms (Leader.Transitions): one command per node
// every half of the fence retention (or of the TTL, if longer). On failure the error is Acquire's: it wraps
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
	} else if cfg.shared {
		return nil, invalid("an election has one leader: WithShared does not apply")
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
	// value is the leader's value once Proclaim changed it (nil: the
	// value Campaign published, Lock.metadata); written by Proclaim while
	// it holds the lock's ops slot, so that a renewal, which writes the
	// value again on each node, never writes an older one after it.
	value atomic.Pointer[string]
	// terms keeps the election's count of terms while the leadership
	// lasts (terms.go's).
	terms termsKeeper
}

// proclaimed records the value Proclaim set (see value).
func (e *leadership) proclaimed(v string) { e.value.Store(&v) }

// meta is the lock's metadata: a leader's current value (see leadership).
func (k *Lock) meta() string {
	if e := k.election; e != nil {
		if v := e.value.Load(); v != nil {
			return *v
		}
	}
	return k.metadata
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
	k.l.elected(k, "L "+strconv.FormatUint(k.fence, 10)+" "+k.Token()+" "+value)
	k.keepTerms()
	return true
}

// elected announces a new term with elected.lua on every node, as
// announce does (a hint: a failure is not an error), which also counts the
// term there (Leader.Transitions) and tells observers the count first.
func (l *Locker) elected(k *Lock, msg string) {
	argv := script.ElectedArgs{Token: k.tokenArg, Term: strconv.FormatUint(k.fence, 10),
		Life: l.counterLife(k.ttl), Channel: l.electionChannel(k.key), Announcement: msg}
	args := argv.Command(k.names.ElectedKeys())
	n := len(l.nodes)
	quorum.Fanout(context.Background(), l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[any](func(ctx context.Context, _ int, c node.Conn) (any, error) {
			return runOn(ctx, c, script.Elected, args)
		}),
		func(rs []quorum.Result[any], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
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
		quorum.RunFunc[int64](func(ctx context.Context, _ int, c node.Conn) (int64, error) {
			v, err := c.Do(ctx, "publish", ch, msg)
			n, _ := node.Int(v)
			return n, err
		}),
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
		ld, ttl := leaderOf(st.Nodes, token, n)
		return ld, token, ttl, nil
	}
	if most+len(l.nodes)-answered >= l.quorum {
		// The nodes that did not answer may hold the lock of a leader.
		return Leader{}, "", 0, fmt.Errorf("%w: leader of %q: %d of %d nodes answered, %d needed to tell", ErrUnavailable, key, answered, len(l.nodes), l.quorum)
	}
	return Leader{}, "", 0, fmt.Errorf("%w: %q", ErrNoLeader, key)
}

// leaderOf is the leader whose lock token held on n of nodes: the term
// and the value most of them hold (a node that missed a Proclaim holds the
// former value until the next renewal), the largest count of terms, and
// the shortest remaining TTL of its lock.
func leaderOf(nodes []NodeStatus, token string, n int) (Leader, time.Duration) {
	var ld Leader
	var ttl time.Duration
	terms := make(map[uint64]int, n)
	values := make(map[string]int, n)
	for _, ns := range nodes {
		if ns.Err != nil || ns.token != token {
			continue
		}
		t := ns.holderFence
		if t == 0 {
			t = ns.Fence // no entry (lost): the counter
		}
		terms[t]++
		values[ns.Metadata]++
		if values[ns.Metadata] > values[ld.Value] {
			ld.Value = ns.Metadata
		}
		ld.Transitions = max(ld.Transitions, ns.transitions)
		if ttl == 0 || (ns.TTL > 0 && ns.TTL < ttl) {
			ttl = ns.TTL
		}
	}
	ld.Term = mostCommon(terms)
	return ld, ttl
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
