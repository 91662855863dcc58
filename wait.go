package dlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyState is a Locker's waiting machinery for one key: the local queue of
// goroutines waiting for it, the process's registration in the key's waiting
// set in Redis, and the subscription to the key's release channel. It lives
// while any Acquire for the key runs, and lingers for a while after, so that
// a process that takes the same lock again and again keeps its subscription.
type keyState struct {
	l     *Locker
	key   string
	names *names

	// Guarded by l.mu.
	refs        int
	lingerTimer *time.Timer

	// head is the local queue: the goroutine that holds its one slot is the
	// only one of this Locker that talks to Redis for the key; the others
	// wait their turn in arrival order (a blocked channel send is FIFO).
	head chan struct{}
	// wake is signalled when a release named this process's waiter id, or
	// when a subscription came back after a reconnection.
	wake chan struct{}

	mu        sync.Mutex
	backupFor string        // the woken waiter this process stands in for
	backup    *time.Timer   // wakes this process if backupFor does not show up
	id        string        // waiter id in the nodes' waiting sets
	pos       []string      // per node: queue position from the last reply, "0" for none
	requested []bool        // per node: subscription requested
	confirmed []bool        // per node: subscription confirmed by the server
	ready     chan struct{} // signalled on each first confirmation
	queued    []bool        // per node: id may sit in the waiting set
}

func (l *Locker) keyState(key string) *keyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	ks := l.keys[key]
	if ks == nil {
		n := len(l.nodes)
		ks = &keyState{
			l: l, key: key, names: l.names(key),
			head:      make(chan struct{}, 1),
			wake:      make(chan struct{}, 1),
			id:        newToken(),
			pos:       make([]string, n),
			requested: make([]bool, n),
			confirmed: make([]bool, n),
			queued:    make([]bool, n),
			ready:     make(chan struct{}, n),
		}
		for i := range ks.pos {
			ks.pos[i] = "0"
		}
		l.keys[key] = ks
	}
	if ks.lingerTimer != nil {
		ks.lingerTimer.Stop()
		ks.lingerTimer = nil
	}
	ks.refs++
	return ks
}

// hasKeyState reports whether the Locker has waiting machinery for key:
// someone waits for it, or its subscription lingers.
func (l *Locker) hasKeyState(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys[key] != nil
}

func (l *Locker) putKeyState(ks *keyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ks.refs--
	if ks.refs > 0 || l.closed {
		return
	}
	if !ks.hasSubscription() {
		delete(l.keys, ks.key)
		return
	}
	ks.lingerTimer = time.AfterFunc(linger, func() {
		l.mu.Lock()
		if ks.refs > 0 || l.keys[ks.key] != ks || l.closed {
			l.mu.Unlock()
			return
		}
		delete(l.keys, ks.key)
		l.mu.Unlock()
		ks.mu.Lock()
		defer ks.mu.Unlock()
		for i, r := range ks.requested {
			if r {
				l.subs[i].unsubscribe(ks)
			}
		}
	})
}

// registration returns what an attempt passes to each node: the waiter id,
// the node's queue position, and whether the node may register it (only once
// this Locker is subscribed there, so that no release goes unheard).
func (ks *keyState) registration() (string, []string, []bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	reg := make([]bool, len(ks.confirmed))
	copy(reg, ks.confirmed)
	for i, r := range reg {
		if r {
			ks.queued[i] = true
		}
	}
	return ks.id, append([]string(nil), ks.pos...), reg
}

func (ks *keyState) setPosition(node int, pos string) {
	ks.mu.Lock()
	ks.pos[node] = pos
	ks.mu.Unlock()
}

// acquired records that this process's waiter took the lock: the nodes that
// granted it dropped the registration. It returns the id and the nodes that
// may still hold a registration (nodes that refused, on a quorum), which the
// caller removes.
func (ks *keyState) acquired(granted []int) (string, []int) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, i := range granted {
		ks.queued[i] = false
	}
	var stale []int
	for i, q := range ks.queued {
		if q {
			stale = append(stale, i)
		}
	}
	id := ks.id
	if len(stale) > 0 {
		ks.rotate()
	}
	for i := range ks.pos {
		ks.pos[i] = "0"
	}
	return id, stale
}

// rotate gives the process a new waiter id; ks.mu is held.
func (ks *keyState) rotate() {
	ks.id = newToken()
	for i := range ks.pos {
		ks.pos[i] = "0"
		ks.queued[i] = false
	}
}

// notify handles a message on the key's release channel: "*" wakes every
// waiter (a forced release), "ID" or "ID NEXT" wakes waiter ID and makes NEXT
// stand in for it after a delay, and "+ID" says that ID took the lock.
func (ks *keyState) notify(payload string) {
	if payload == "*" {
		ks.signal()
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if taken, ok := strings.CutPrefix(payload, "+"); ok {
		if taken == ks.backupFor {
			ks.standDown()
		}
		return
	}
	woken, next, _ := strings.Cut(payload, " ")
	switch ks.id {
	case woken:
		ks.standDown()
		ks.signal()
	case next:
		ks.standDown()
		ks.backupFor = woken
		ks.backup = time.AfterFunc(ks.l.standIn(), ks.signal)
	}
}

// standDown cancels standing in; ks.mu is held.
func (ks *keyState) standDown() {
	if ks.backup != nil {
		ks.backup.Stop()
		ks.backup = nil
	}
	ks.backupFor = ""
}

func (ks *keyState) signal() {
	select {
	case ks.wake <- struct{}{}:
	default:
	}
}

func (ks *keyState) hasSubscription() bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, r := range ks.requested {
		if r {
			return true
		}
	}
	return false
}

func (ks *keyState) subscribedAll() bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, c := range ks.confirmed {
		if !c {
			return false
		}
	}
	return true
}

// subscribe requests the key's release channel on every node not yet
// subscribed and waits up to timeout for the confirmations. It reports
// whether any node newly confirmed, i.e. whether an immediate new attempt
// can now register where it could not before.
func (ks *keyState) subscribe(ctx context.Context, timeout time.Duration) bool {
	ks.mu.Lock()
	pending := 0
	for i := range ks.requested {
		if !ks.confirmed[i] {
			pending++
		}
		if !ks.requested[i] {
			ks.requested[i] = true
			ks.l.subs[i].subscribe(ks)
		}
	}
	ks.mu.Unlock()
	if pending == 0 {
		return false
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	got := 0
	for got < pending {
		select {
		case <-ks.ready:
			got++
		case <-t.C:
			return got > 0
		case <-ctx.Done():
			return got > 0
		case <-ks.l.done:
			return false
		}
	}
	return true
}

// confirm records the server's confirmation of the subscription on node i.
// A confirmation after the first one follows a reconnection, during which a
// release may have been missed: the waiter then tries again.
func (ks *keyState) confirm(i int) {
	ks.mu.Lock()
	first := !ks.confirmed[i]
	ks.confirmed[i] = true
	ks.mu.Unlock()
	if first {
		ks.ready <- struct{}{} // buffered: one slot per node
	} else {
		ks.signal()
	}
}

// leaveQueue runs when a waiting Acquire gives up. If no other goroutine of
// this Locker waits for the key, the process's registration is removed from
// every node's waiting set, and a reservation made for it is handed on to the
// next waiter, so that giving up never stalls the others.
func (l *Locker) leaveQueue(ks *keyState) {
	l.mu.Lock()
	others := ks.refs > 1
	l.mu.Unlock()
	if others {
		return
	}
	ks.mu.Lock()
	id := ks.id
	var nodes []int
	for i, q := range ks.queued {
		if q {
			nodes = append(nodes, i)
		}
	}
	if len(nodes) > 0 {
		ks.rotate()
	}
	ks.mu.Unlock()
	if len(nodes) > 0 {
		l.leaveNodes(ks.names, id, nodes)
	}
}

// leaveNodes removes waiter id from the waiting sets of the given nodes, in
// the background, handing on a reservation made for it.
func (l *Locker) leaveNodes(nm *names, id string, nodes []int) {
	l.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), maxNodeTimeout)
		defer cancel()
		var wg sync.WaitGroup
		for _, i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = callNode(ctx, l, i, func(ctx context.Context) (int64, error) {
					return l.runRelease(ctx, i, nm, "~"+id, id, true)
				})
			}()
		}
		wg.Wait()
	})
}

// subscriber is a Locker's one pub/sub connection to one node, shared by all
// keys. Subscribe and unsubscribe requests are written in order by one
// goroutine; another reads confirmations and release notifications.
type subscriber struct {
	l    *Locker
	node int

	mu     sync.Mutex
	ps     *redis.PubSub
	chans  map[string]*keyState
	cmds   chan subCmd
	closed bool
	wg     sync.WaitGroup
}

type subCmd struct {
	channel   string
	subscribe bool
}

// subscribe requests ks's channel; the confirmation arrives through the
// receive loop.
func (s *subscriber) subscribe(ks *keyState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.ps == nil {
		s.start()
	}
	s.chans[ks.names.channel] = ks
	s.cmds <- subCmd{channel: ks.names.channel, subscribe: true}
}

func (s *subscriber) unsubscribe(ks *keyState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ps == nil || s.chans[ks.names.channel] != ks {
		return
	}
	delete(s.chans, ks.names.channel)
	s.cmds <- subCmd{channel: ks.names.channel}
}

// start opens the connection; s.mu is held.
func (s *subscriber) start() {
	s.ps = s.l.nodes[s.node].Client.Subscribe(context.Background())
	s.chans = make(map[string]*keyState)
	// Requests are small and quick to write; the buffer only absorbs bursts.
	s.cmds = make(chan subCmd, 1024)
	s.wg.Add(2)
	go s.writeLoop(s.ps, s.cmds)
	go s.readLoop(s.ps)
}

func (s *subscriber) writeLoop(ps *redis.PubSub, cmds <-chan subCmd) {
	defer s.wg.Done()
	for c := range cmds {
		// go-redis records the channel even if the write fails, and
		// subscribes again when the read loop reconnects.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if c.subscribe {
			_ = ps.Subscribe(ctx, c.channel)
		} else {
			_ = ps.Unsubscribe(ctx, c.channel)
		}
		cancel()
	}
}

func (s *subscriber) readLoop(ps *redis.PubSub) {
	defer s.wg.Done()
	ctx := context.Background()
	failures := 0
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if s.isClosed() || errors.Is(err, redis.ErrClosed) {
				return
			}
			// The connection broke; the next Receive reconnects and
			// subscribes again. Back off while the node stays down.
			failures++
			select {
			case <-time.After(min(time.Duration(failures)*50*time.Millisecond, time.Second)):
			case <-s.l.done:
				return
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				if ks := s.lookup(m.Channel); ks != nil {
					ks.confirm(s.node)
				}
			}
		case *redis.Message:
			if ks := s.lookup(m.Channel); ks != nil {
				ks.notify(m.Payload)
			}
		}
	}
}

func (s *subscriber) lookup(channel string) *keyState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chans[channel]
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
	ps := s.ps
	if s.cmds != nil {
		close(s.cmds)
	}
	s.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	s.wg.Wait()
	return err
}
