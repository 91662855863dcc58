package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// A Hook observes what a Locker does: acquisitions and their attempts,
// releases, renewals that fail, locks lost, nodes that fail or stop
// answering (see EventKind for the list). Metrics, tracing and logging
// attach here; github.com/dlock-dev/dlock/extra/dlockprom and
// github.com/dlock-dev/dlock/extra/dlockotel are hooks, and WithLogger
// installs one. Install hooks with WithHook.
//
// Hooks are called synchronously, on the goroutine that does the work
// (the caller's, a renewal's timer, a subscription's), sometimes with a
// lock of the Locker's held: a hook must be fast, must not block, and must
// not call the Locker or the Lock it is told about. It must be safe for
// concurrent use. A hook that panics on the caller's goroutine (Start,
// EventAttempt, EventAcquired, EventRefused, EventReleased...) panics the
// call: a lock granted before it is released first, so that a caller that
// recovers (as net/http does for each handler) leaves no lock behind, and
// Release calls waiting for the same round get its outcome. A panic on a
// background goroutine (a renewal's timer, a subscription) crashes the
// program, as go-redis' hooks do.
type Hook interface {
	// Start is called when Acquire, TryAcquire, Do or Campaign begins,
	// once its arguments are checked (a call refused for a bad argument has
	// no events; a limit other than the holders', which only Redis can
	// tell, ends in EventRefused with ErrInvalid). The context it returns
	// is passed to that acquisition's events, up to its EventAcquired or
	// EventRefused: a tracing hook opens a span here and ends it there. It
	// must return ctx or a context derived from it; the Redis commands of
	// the acquisition use the caller's ctx, not the returned one. An
	// acquired lock keeps the returned context, without its cancellation,
	// while it is held, for its EventRenewFailed and EventLost.
	Start(ctx context.Context, key string) context.Context
	// Event is called for each event, with the context of the acquisition
	// it belongs to (see Start): for EventRenewFailed and EventLost, that
	// of the acquisition of the lock, without its cancellation (a tracing
	// hook can link them to its span); the ctx passed to Release for
	// EventReleased; context.Background() for node events.
	Event(ctx context.Context, e Event)
}

// EventKind tells what happened.
type EventKind uint8

// The events of a Hook. Every acquisition has exactly one Start and then
// exactly one EventAcquired or EventRefused; every acquired lock ends with
// exactly one EventReleased (its first Release) or EventLost, whichever
// comes first (a lost lock's later Release is not an event).
const (
	// EventAttempt: one acquisition round ended (Attempt counts them in
	// this call; Err is nil if it granted the lock, else the class of its
	// failure: ErrNotAcquired, ErrUnavailable, ErrMisconfigured or
	// ErrClosed, without detail). An Acquire that waits makes one per
	// wake-up.
	EventAttempt EventKind = iota + 1
	// EventAcquired: Acquire, TryAcquire, Do, Campaign or Adopt got the lock
	// after Attempt attempts and Wait since it began; Fence, TTL and Limit
	// are the lock's.
	EventAcquired
	// EventRefused: the acquisition ended without the lock, with the error
	// the call returns (Err: ErrNotAcquired, ErrUnavailable,
	// ErrMisconfigured, ErrClosed, with ctx's error, or ErrInvalid for a
	// limit other than the holders'; ErrNotHeld for an Adopt whose token
	// does not hold the key), after Attempt attempts and Wait.
	EventRefused
	// EventWoken: a waiting Acquire was woken, and tries again, by a
	// release of the lock (or a stand-in for a woken waiter that did not
	// take it, or a subscription that came back), not by its timer.
	EventWoken
	// EventReleased: the lock was released (its first Release call), or
	// detached (Lock.Detach: this process no longer holds it), after
	// being held for Held. Err is nil, or what Release returns when the
	// release was not confirmed (ErrUnavailable: the key expires after its
	// TTL). A Release that finds the lock no longer held is an EventLost.
	EventReleased
	// EventRenewFailed: an automatic renewal or an Extend was not
	// confirmed by a quorum (Err says why). The lock is still held until
	// its validity runs out; auto-renewal tries again before then.
	EventRenewFailed
	// EventLost: the lock was lost while held, after Held. Reason is
	// LostExpired, LostNotHeld or LostClosed; Err is the cause passed on to
	// Do's context. The holder is told first: the event comes after Lost
	// is closed. A lock that Release found no longer held by a quorum (it
	// had expired or been taken before Lost could fire, as after a process
	// pause: work under it may have overlapped another holder's) is lost
	// too, with Reason LostNotHeld, instead of released.
	EventLost
	// EventNodeError: node Node failed a command (Key is the lock's when
	// the command was for one, "" for the waiters' subscription): an error
	// from Redis, a connection error, or no answer within the node timeout.
	// Not reported: an acquisition's failures once the caller's context
	// has ended (its deadline is not the node's), a refusal for a limit
	// other than the holders', and a node that had not answered yet when a
	// round decided without it (a quorum had answered): a frozen minority
	// shows in the rounds that wait for every node, such as Release.
	EventNodeError
	// EventNodeSuspect: node Node, of a NewRedlock quorum, did not answer
	// in time, and rounds no longer wait for it, until it answers again
	// (EventNodeBack) or for 10s. (One Redis is waited for anyway.)
	EventNodeSuspect
	// EventNodeBack: a suspect node answered again, or the Locker was
	// closed (it no longer tracks the node).
	EventNodeBack
)

// Reasons of EventLost.
const (
	// LostExpired: the validity ran out without a confirmed renewal (the
	// nodes did not answer, or too late).
	LostExpired = "expired"
	// LostNotHeld: a quorum of nodes said the key no longer holds the
	// lock's token (it expired there, was taken, or force-released).
	LostNotHeld = "not held"
	// LostClosed: the Locker was closed while the lock was held.
	LostClosed = "closed"
)

var kindNames = [...]string{
	EventAttempt: "attempt", EventAcquired: "acquired", EventRefused: "refused", EventWoken: "woken",
	EventReleased: "released", EventRenewFailed: "renew failed", EventLost: "lost",
	EventNodeError: "node error", EventNodeSuspect: "node suspect", EventNodeBack: "node back",
}

// String returns the event's name, as above in lower case: "acquired",
// "renew failed", "node suspect"...
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// An Event is what a Hook is told. Fields that do not apply to the Kind
// are zero.
type Event struct {
	Kind EventKind
	// Key is the lock's name, as passed to Acquire.
	Key string
	// Limit is the lock's WithLimit (0: a lock).
	Limit int
	// Attempt is the number of attempts of the acquisition so far.
	Attempt int
	// Wait is how long the acquisition took (EventAcquired, EventRefused).
	Wait time.Duration
	// Held is how long the lock was held (EventReleased, EventLost).
	Held time.Duration
	// Fence and TTL are the lock's (EventAcquired).
	Fence uint64
	TTL   time.Duration
	// Node is the address of the node (node events), as in NodeError.
	Node string
	// Reason is why a lock was lost (EventLost): LostExpired, LostNotHeld
	// or LostClosed.
	Reason string
	// Err is the event's error, if any (see EventKind).
	Err error
}

// Results of an acquisition or an attempt: see Event.Result.
const (
	ResultAcquired      = "acquired"
	ResultBusy          = "busy"          // ErrNotAcquired: held by another owner, and the call did not wait (or no longer); an Adopt's ErrNotHeld: the token does not hold the key
	ResultTimeout       = "timeout"       // the caller's deadline passed first, typically while it waited for a busy lock
	ResultCanceled      = "canceled"      // the caller's context was cancelled first
	ResultUnavailable   = "unavailable"   // ErrUnavailable: too few nodes answered (also when the context ended meanwhile)
	ResultMisconfigured = "misconfigured" // ErrMisconfigured, also a key held with another limit (WithLimit)
	ResultClosed        = "closed"        // ErrClosed: the Locker was closed
	ResultInvalid       = "invalid"       // ErrInvalid alone; dlock's events give none (a key held with another limit is ResultMisconfigured)
)

// Result classifies an EventAcquired, an EventRefused or an EventAttempt
// for metrics and traces: one of the Result constants, "" for other events
// (and for an error of none of these classes, which dlock does not give).
// The class of the failure comes first: an acquisition that ended with
// ErrUnavailable is "unavailable" even when the caller's context ended too,
// so that nodes that do not answer are not hidden behind deadlines; then
// the end of the context ("timeout", "canceled"), then a busy lock.
func (e Event) Result() string {
	switch e.Kind {
	case EventAcquired:
		return ResultAcquired
	case EventAttempt, EventRefused:
	default:
		return ""
	}
	switch err := e.Err; {
	case err == nil:
		return ResultAcquired
	case errors.Is(err, ErrClosed):
		return ResultClosed
	case errors.Is(err, ErrMisconfigured):
		return ResultMisconfigured
	case errors.Is(err, ErrUnavailable):
		return ResultUnavailable
	case errors.Is(err, ErrInvalid):
		return ResultInvalid
	case errors.Is(err, context.DeadlineExceeded):
		return ResultTimeout
	case errors.Is(err, context.Canceled):
		return ResultCanceled
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrNotHeld):
		return ResultBusy
	}
	return ""
}

// WithLogger logs what an operator should know through log: at Warn, a lost
// lock, a renewal that failed, a node that failed a command or stopped
// answering; at Error, a subscription to the waiters' channel that a node
// refused (an ACL without the channel: waiting cannot work), and a
// subscription to an election's channel refused (Observe reads the leader
// instead); at Info, a
// node that answers again; at Debug, acquisitions, refusals and releases.
// A node's failure that repeats with the same message is logged at most
// every 10s (and again once the node came back), so that a node that is
// down does not flood the log. A nil log is ignored. It is a Hook: see
// WithHook.
func WithLogger(log *slog.Logger) Option {
	if log == nil {
		return func(*lockerConfig) {}
	}
	return WithHook(&logHook{log: log, quiet: make(map[string]logged)})
}

// hooks calls several hooks in order.
type hooks []Hook

func (hs hooks) Start(ctx context.Context, key string) context.Context {
	for _, h := range hs {
		ctx = h.Start(ctx, key)
	}
	return ctx
}

func (hs hooks) Event(ctx context.Context, e Event) {
	for _, h := range hs {
		h.Event(ctx, e)
	}
}

// hook returns the Locker's hooks as one, or nil when there are none.
func hookOf(hs []Hook) Hook {
	switch len(hs) {
	case 0:
		return nil
	case 1:
		return hs[0]
	}
	return hooks(hs)
}

// nodeEvent reports node i's failure of a command for key, unless it is
// the end of the caller's context or a round that did not wait for a
// suspect node (EventNodeSuspect told of it).
func (l *Locker) nodeEvent(i int, key string, err error) {
	if l.hook == nil || errors.Is(err, context.Canceled) || errors.Is(err, quorum.ErrNotWaited) {
		return
	}
	if _, mismatch := limitMismatch(err); mismatch {
		return // the caller's limit, not the node (see EventRefused)
	}
	l.hook.Event(context.Background(), Event{Kind: EventNodeError, Key: key, Node: l.nodes[i].Addr, Err: err})
}

// acquisition follows one acquisition call for the hook: its context, its
// start and its attempts. It lives on the caller's stack; its methods do
// nothing when l is nil (no hook).
type acquisition struct {
	l        *Locker
	ctx      context.Context
	key      string
	limit    int
	began    time.Time
	attempts int
}

// start begins following an acquisition call, if the Locker has a hook.
func (a *acquisition) start(l *Locker, ctx context.Context, key string, cfg lockConfig) {
	if l.hook != nil {
		*a = acquisition{l: l, ctx: l.hook.Start(ctx, key), key: key, limit: cfg.limit, began: time.Now()}
	}
}

// attempted reports an attempt's outcome: class, nil when it granted k.
func (a *acquisition) attempted(k *Lock, class error) {
	if a.l == nil {
		return
	}
	a.attempts++
	defer giveBackOnPanic(k)
	a.l.hook.Event(a.ctx, Event{Kind: EventAttempt, Key: a.key, Limit: a.limit, Attempt: a.attempts, Err: class})
}

// giveBackOnPanic, deferred around a hook's call between the grant of k and
// the return of k to the caller, releases k if the hook panics, and panics
// again with the same value: a caller that recovers (as net/http does for
// each handler) must not leave behind a lock that is renewed forever with
// nobody to release it. The hook hears nothing of the release: for it, the
// acquisition ended in its own panic. Nothing is done when k is nil.
func giveBackOnPanic(k *Lock) {
	if k == nil {
		return
	}
	if r := recover(); r != nil {
		k.giveBack()
		panic(r)
	}
}

// woken reports a wake-up by a release.
func (a *acquisition) woken() {
	if a.l == nil {
		return
	}
	a.l.hook.Event(a.ctx, Event{Kind: EventWoken, Key: a.key, Limit: a.limit, Attempt: a.attempts})
}

// end reports the acquisition's end: k, or err.
func (a *acquisition) end(k *Lock, err error) {
	if a.l == nil {
		return
	}
	e := Event{Kind: EventRefused, Key: a.key, Limit: a.limit, Attempt: a.attempts, Wait: time.Since(a.began), Err: err}
	if k == nil {
		a.l.hook.Event(a.ctx, e)
		return
	}
	e.Kind, e.Fence, e.TTL, e.Err = EventAcquired, k.fence, k.ttl, nil
	k.setHookCtx(a.ctx)
	a.told(k, e)
}

// told tells the hook of the acquisition of k (e), and then of a loss held
// back until then.
func (a *acquisition) told(k *Lock, e Event) {
	defer giveBackOnPanic(k)
	a.l.hook.Event(a.ctx, e)
	// A loss while the hook was not yet told of the acquisition (the
	// Locker closed meanwhile) is told now, after it.
	if lost := k.acquisitionTold(); lost != nil {
		a.l.hook.Event(context.WithoutCancel(a.ctx), *lost)
	}
}

// lostReason is the Reason of an EventLost with this cause.
func lostReason(cause error) string {
	switch {
	case errors.Is(cause, ErrClosed):
		return LostClosed
	case errors.Is(cause, ErrNotHeld):
		return LostNotHeld
	}
	return LostExpired
}

// lostEvent tells the hook that the lock was lost, once it was told that it
// was acquired (see acquisition.end).
func (k *Lock) lostEvent(cause error) {
	k.mu.Lock()
	e := Event{Kind: EventLost, Key: k.key, Limit: k.limit, Held: time.Since(k.events.acquiredAt), Reason: lostReason(cause), Err: cause}
	if !k.events.told {
		k.events.pendingLost = &e
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.l.hook.Event(k.eventCtx(), e)
}

// setHookCtx records the context of the acquisition's events for the
// lock's background events (see eventCtx).
func (k *Lock) setHookCtx(ctx context.Context) {
	k.mu.Lock()
	k.events.ctx = ctx
	k.mu.Unlock()
}

// acquisitionTold records that the hook was told of the acquisition, and
// returns the loss held back until then (see lostEvent), if any.
func (k *Lock) acquisitionTold() (lost *Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events.told = true
	lost, k.events.pendingLost = k.events.pendingLost, nil
	return lost
}

// giveBack releases a lock whose acquisition the hook will not see end
// (see giveBackOnPanic): the hook hears of no release either.
func (k *Lock) giveBack() {
	k.mu.Lock()
	k.events.acquiredAt = time.Time{} // no EventReleased (see Lock.release)
	k.mu.Unlock()
	k.release(context.Background())
}

// eventCtx is the context of the lock's background events for the hook:
// its acquisition's, without its cancellation.
func (k *Lock) eventCtx() context.Context {
	k.mu.Lock()
	ctx := k.events.ctx
	k.mu.Unlock()
	if ctx == nil {
		return context.Background()
	}
	return context.WithoutCancel(ctx)
}

// lockEvents is a Lock's bookkeeping for the hook, guarded by Lock.mu: the
// start of the acquiring round (zero for a lock given back before Acquire
// returned: no EventReleased), the acquisition's context (see Hook.Start),
// whether EventAcquired was sent, and an EventLost held back until it is.
type lockEvents struct {
	acquiredAt  time.Time
	ctx         context.Context
	told        bool
	pendingLost *Event
}

// started records the start of the acquiring round; Lock.mu is held.
func (e *lockEvents) started(at time.Time) { e.acquiredAt = at }
