package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// termsKeeper keeps an election's count of terms (Leader.Transitions, the
// key prefix{K}:terms) alive while its leader holds. elected.lua gives the
// count the fence counter's life (termsLife) when a term begins, but the
// renewals that keep the lock and its counter leave the count alone (a
// plain lock's renewal sends nothing more for elections' sake), so a
// leader that held longer than that life would lose it. A leadership
// therefore runs keepterms.lua on every node every half of that life
// (never more often than its renewals, every TTL/3: the life is at least
// the TTL), from a runtime timer (time.AfterFunc: no goroutine while it
// waits; at the default retention, one run every 12h); the script sets the
// count's expiry again where the lock still holds the leader's token.
//
// A run is a hint, as the announcements are: one that comes late (a node
// that did not answer, a process paused past half the life) lets the
// count expire on that node, so that Transitions is 0 there and the next
// term counts from 1 again; one that runs twice sets the expiry again;
// one that never runs (the process died, the leadership ended) leaves the
// count its life from the last run. The count itself is never written:
// it can be lost, never wrong.
//
// The timer is stopped when the leadership ends (Release, Lost, Detach,
// Close: stopTimers), and is not started, or set again, after that.
type termsKeeper struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// termsLife is how long an election's count of terms lives after a term
// began or a refresh ran, for a leader with this TTL: the fence counter's
// life (counterLife, in whole milliseconds).
func (l *Locker) termsLife(ttl time.Duration) time.Duration {
	return max(l.cfg.fenceRetention, ttl.Truncate(time.Millisecond))
}

// keepTerms starts the leadership's termsKeeper, once its term was
// announced (election.go's announceTerm).
func (k *Lock) keepTerms() {
	k.mu.Lock()
	every := k.l.termsLife(k.ttl) / 2
	k.mu.Unlock()
	t := &k.election.terms
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped && t.timer == nil {
		t.timer = time.AfterFunc(every, k.refreshTerms)
	}
}

// refreshTerms runs keepterms.lua on every node, as elected does (waiting
// at most the node timeout, not for a node that recently did not answer;
// a failure is not an error), then sets the timer again unless the
// leadership ended meanwhile. Close waits for a run under way.
func (k *Lock) refreshTerms() {
	l := k.l
	if !l.join(&l.wg) {
		return
	}
	defer l.wg.Done()
	k.mu.Lock()
	ttl, held := k.ttl, k.alive()
	k.mu.Unlock()
	if !held {
		return
	}
	args := script.KeepTermsCommand(k.names.ElectedKeys(), k.tokenArg, l.counterLife(ttl))
	n := len(l.nodes)
	quorum.Fanout(l.bg, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[any](func(ctx context.Context, _ int, c node.Conn) (any, error) {
			return runOn(ctx, c, script.KeepTerms, args)
		}),
		func(rs []quorum.Result[any], suspects int) bool { return quorum.AllAnswering(rs, suspects, n) }, nil)
	t := &k.election.terms
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.timer.Reset(l.termsLife(ttl) / 2)
	}
}

// stop stops the keeper for good (the leadership ended); k.mu is held
// (stopTimers).
func (t *termsKeeper) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}
