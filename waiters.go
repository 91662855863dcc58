package dlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// keyState is a Locker's waiting machinery for one key: the local queue of
// goroutines waiting for it and the process's registration in the key's
// waiting set in Redis. It lives while any Acquire for the key runs.
type keyState struct {
	l     *Locker
	key   string
	names *keys.Names
	slot  waitSlot // its entry in Locker.keys
	// hashSlot is the key's Cluster hash slot on a Locker whose inbox is
	// sharded (see Locker.sharded), 0 otherwise.
	hashSlot int
	// shared: the waiter of one shared acquisition (WithShared), which
	// has a keyState, a registration and a member ("LOCKERID:rSEQ:KEY")
	// of its own, so that a release wakes every shared waiter at once.
	shared bool

	refs int // guarded by l.mu
	// gone is set when the last Acquire left (guarded by mu): an answer that
	// comes later is settled on its own.
	gone bool

	// The local queue: the goroutine at its head (busy) is the only one of
	// this Locker that talks to Redis for the key; the others wait their
	// turn in queue, in arrival order (guarded by mu; see enter).
	busy  bool
	queue []chan struct{}
	// wake is signalled when a release woke this process's waiter, when it
	// stands in for a woken waiter that did not come, and after the inbox
	// subscription came back from a reconnection.
	wake chan struct{}

	mu sync.Mutex
	// member is the waiter in the nodes' waiting sets, "LOCKERID:SEQ:KEY";
	// made when first needed, since most Acquire calls never wait.
	member  string
	nodes   []nodeWait  // per node
	standIn *time.Timer // set while standing in for a woken waiter
	// changed, made by watch, is closed (and cleared) by changedReg when
	// the member or a node's registration changes (see RequestLeadership);
	// resets counts the registrations forgotten (reset), whether the member
	// changed or not.
	changed chan struct{}
	resets  uint64
}

// waitSlot names a keyState in Locker.keys: reader is 0 for the local queue
// of a key's exclusive acquisitions, and a shared acquisition's own number
// (the SEQ of its member, see keyState.shared) otherwise.
type waitSlot struct {
	key    string
	reader uint64
}

// keyState returns the waiting machinery of key for an acquisition: the
// key's local queue, or for a shared one (see keyState.shared) its own.
func (l *Locker) keyState(key string, shared bool) *keyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := waitSlot{key: key}
	if shared {
		slot.reader = l.seq.Add(1)
	}
	ks := l.keys[slot]
	if ks == nil {
		n := len(l.nodes)
		ks = &keyState{
			l: l, key: key, names: l.names(key), slot: slot, shared: shared,
			wake:  make(chan struct{}, 1),
			nodes: make([]nodeWait, n),
		}
		if l.sharded != nil {
			ks.hashSlot = keys.Slot(ks.names.Lock())
		}
		for i := range ks.nodes {
			ks.nodes[i].pos = "0"
		}
		if shared {
			ks.member = l.readerMember(slot.reader, key)
		}
		l.keys[slot] = ks
	}
	ks.refs++
	return ks
}

// putKeyState drops a reference to ks. The last goroutine to leave, if it
// did not take the lock, removes the process's registration from the
// nodes' waiting sets (handing on a reservation made for it): whether it
// gave up at the head of the local queue or behind it, and however many gave
// up at once, no registration outlives the Acquire calls that made it. While
// other goroutines of the Locker still wait for the key, the registration
// stays: it is theirs.
func (l *Locker) putKeyState(ks *keyState) {
	l.mu.Lock()
	ks.refs--
	last := ks.refs == 0
	if last {
		delete(l.keys, ks.slot)
	}
	l.mu.Unlock()
	if !last {
		return
	}
	ks.mu.Lock()
	ks.gone = true
	ks.leave()
	ks.mu.Unlock()
}

// enter waits until the caller is at the head of the key's local queue,
// which goroutines reach in the order they called enter (an explicit FIFO,
// as golang.org/x/sync/semaphore keeps: the order in which blocked channel
// operations proceed is not specified). It returns ctx's error, or
// ErrClosed's, if the wait ends first; a goroutine that gives up leaves the
// queue, and one made head as it gave up passes the head on. The head calls
// exit when done.
func (ks *keyState) enter(ctx context.Context, closed <-chan struct{}) error {
	ks.mu.Lock()
	if !ks.busy {
		ks.busy = true
		ks.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	ks.queue = append(ks.queue, turn)
	ks.mu.Unlock()
	var err error
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	ks.mu.Lock()
	for i, t := range ks.queue {
		if t == turn {
			ks.queue = append(ks.queue[:i], ks.queue[i+1:]...)
			ks.mu.Unlock()
			return err
		}
	}
	ks.mu.Unlock()
	// Made head as it gave up: pass it on.
	ks.exit()
	return err
}

// exit hands the head of the local queue to the next goroutine in it.
func (ks *keyState) exit() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if len(ks.queue) == 0 {
		ks.busy = false
		return
	}
	close(ks.queue[0])
	ks.queue = ks.queue[1:]
}

func (ks *keyState) signal() {
	select {
	case ks.wake <- struct{}{}:
	default:
	}
}

// woken handles a release on node i that woke this waiter: the release
// popped the registration there, so it is written again if the attempt
// fails.
func (ks *keyState) woken(i int) {
	ks.mu.Lock()
	ks.stopStandIn()
	for j := range ks.nodes {
		ks.nodes[j].regAt = time.Time{}
	}
	if i < len(ks.nodes) {
		ks.nodes[i].popped = true
	}
	ks.mu.Unlock()
	ks.signal()
}

// standInFor makes this waiter attempt shortly unless it is woken first: it
// is next in line after a woken waiter that may have died.
func (ks *keyState) standInFor() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.standIn != nil {
		return // already standing in
	}
	var t *time.Timer
	t = time.AfterFunc(ks.l.standIn(), func() {
		// Fired: the next stand-in message must start a new one.
		ks.mu.Lock()
		if ks.standIn == t {
			ks.standIn = nil
		}
		ks.mu.Unlock()
		ks.signal()
	})
	ks.standIn = t
}

// stopStandIn cancels standing in; ks.mu is held.
func (ks *keyState) stopStandIn() {
	if ks.standIn != nil {
		ks.standIn.Stop()
		ks.standIn = nil
	}
}

// deliver routes a message from the Locker's inbox on node i: "w MEMBER"
// wakes the waiter, "s MEMBER" makes it stand in for the waiter just woken.
// A wake-up for a member that no longer waits (it gave up, or took the lock,
// and its registration outlived it: an attempt that registered it ran late)
// is handed on at once to the next waiter, instead of leaving the lock
// reserved for nobody until the stand-in's delay.
func (l *Locker) deliver(i int, payload string) {
	kind, member, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	rest, ok := strings.CutPrefix(member, l.id)
	if !ok {
		return
	}
	rest = strings.TrimPrefix(rest, shardedMark)
	if rest, ok = strings.CutPrefix(rest, ":"); !ok {
		return
	}
	seq, key, ok := strings.Cut(rest, ":")
	if !ok || key == "" {
		return
	}
	slot := waitSlot{key: key}
	if r, ok := strings.CutPrefix(seq, "r"); ok {
		slot.reader, _ = strconv.ParseUint(r, 10, 64)
	}
	l.mu.Lock()
	ks := l.keys[slot]
	l.mu.Unlock()
	current := false
	if ks != nil {
		ks.mu.Lock()
		current = ks.member == member
		ks.mu.Unlock()
	}
	switch {
	case !current && kind == "w":
		l.leave(i, l.names(key), member, 1)
	case !current:
	case kind == "w":
		ks.woken(i)
	case kind == "s":
		ks.standInFor()
	}
}

// wakeAll makes every waiting goroutine's head try again: after the inbox
// subscription came back, a release may have gone unheard.
func (l *Locker) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ks := range l.keys {
		ks.signal()
	}
}

// wakeSlot makes the waiters of the keys of a hash slot try again: after
// the Locker's sharded inbox confirmed the slot's subscription (see
// inbox.Sharded).
func (l *Locker) wakeSlot(slot int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ks := range l.keys {
		if ks.hashSlot == slot {
			ks.signal()
		}
	}
}
