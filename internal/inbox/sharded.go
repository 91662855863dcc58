package inbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ShardedConfig is what a Sharded needs of its Locker.
type ShardedConfig struct {
	Client *redis.ClusterClient
	// Channel is the Locker's inbox channel of a hash slot: a name in that
	// slot, so that a release of a key of the slot reaches it with
	// SPUBLISH on the key's own shard.
	Channel func(slot int) string
	// Deliver handles a message of the inbox.
	Deliver func(payload string)
	// Refused is told of the first refusal (before the waiters learn it,
	// so that the log tells it first).
	Refused func(err error)
	// Wake makes the waiters of the keys of slot try again: after a
	// confirmation (a waiter may now register; after the slot moved, a
	// release may have gone unheard) and after a refusal (they report it).
	Wake func(slot int)
	// Fallback is the classic subscription, used instead once a node
	// answers that it has no sharded pub/sub (Redis before 7.0), or that
	// the user may not run SSUBSCRIBE.
	Fallback *Subscriber
	// FellBack is told of that answer, once.
	FellBack func(err error)
	// Earlier is the classic subscription of the channel on which a
	// release by an earlier version, which knows no sharded pub/sub, wakes
	// this Locker's sharded waiters (PUBLISH on the inbox prefix and the
	// waiter's LOCKERID), so that such a release, during a rolling upgrade,
	// wakes them at once too; and a release by this version whose
	// SPUBLISH is refused (a user without it) PUBLISHes there instead. It is
	// started with the first slot and closed with the Sharded, or when the
	// Sharded falls back (then the waiters' members are classic ones, told
	// on the Fallback's channel); no waiter waits for its confirmation. Nil
	// for none.
	Earlier *Subscriber
}

// A Sharded is a Locker's inbox on a Redis Cluster with sharded pub/sub
// (Redis 7.0+): one channel per hash slot that the Locker waits on
// (Channel), subscribed with SSUBSCRIBE on the master that serves the slot,
// over one connection per master, from the first time the Locker waits for
// a key of the slot until Close. A release wakes a waiter with SPUBLISH in
// the key's slot, so that the message stays within the key's shard (the
// master and its replicas) instead of crossing the cluster bus to every
// node.
//
// A slot's subscription follows the slot: when its master drops it (the
// slot migrated, or the master became a replica: Redis pushes sunsubscribe),
// refuses it (MOVED: the Cluster client's map was stale), its connection
// fails (a failover), or its connection falls silent (a frozen, hung or
// cut-off master, whose replica may take over: see healthInterval), the
// slot is routed again (the Cluster client's map reloaded, backing off 50ms
// more per failure, at most 1s; not to a master that fell silent, for
// silentFor) and, once the new master confirms it, the slot's waiters try
// again (a release may have gone unheard meanwhile). After a drop, the map
// is checked against the Cluster's own (CLUSTER SLOTS) before the slot is
// subscribed again: a replica accepts a subscription to its master's slots,
// and a stale map would leave the slot there. go-redis' own resubscription is not used: it
// sends every channel of a connection in one SSUBSCRIBE, which a Cluster
// refuses for channels of several slots, so a connection that fails is
// closed, and its slots subscribed again one by one.
//
// A node that has no sharded pub/sub (it answers "unknown command"), or
// that does not let the user run SSUBSCRIBE (an ACL line written for an
// earlier version), makes the Sharded fall back, for good, to the classic
// subscription (Fallback), and says so (FellBack).
type Sharded struct {
	cfg ShardedConfig

	mu        sync.Mutex
	slots     map[int]*slotSub
	byChannel map[string]int
	shards    map[string]*shard // by master address
	// quiet are the masters that fell silent (see silent), with the time
	// until which no slot is subscribed there.
	quiet map[string]time.Time
	// pending are the slots to route, with the time each is due.
	pending     map[int]time.Time
	failures    int  // routing rounds that failed in a row
	unsupported bool // a node has no sharded pub/sub: Fallback serves
	refusedOnce bool // Refused was told
	closed      bool
	kick        chan struct{} // wakes the router
	stop        chan struct{} // closed by Close
	routing     bool          // the router runs
	// subscribing: the router is in a subscription's connection, which a
	// frozen node can hold for the client's timeouts.
	subscribing bool
	router      sync.WaitGroup // the router
	wg          sync.WaitGroup // the receive loops
}

// slotSub is the subscription of one slot's channel.
type slotSub struct {
	channel string
	ready   chan struct{} // closed on the first confirmation, or a refusal
	woken   bool          // ready is closed
	isReady bool          // confirmed where the slot is served now
	refusal error         // a permanent refusal, until a confirmation
	at      *shard        // the connection it is subscribed on; nil while routed
	moved   int           // MOVED answers in a row: the Cluster client's map is stale
	// moving: the slot was dropped by its master (it moved, or the master
	// became a replica): the Cluster client's map is checked against the
	// Cluster's before the slot is subscribed again, up to this many times
	// (then the map is trusted: the two may name one node differently).
	moving int
}

// shard is one connection, to one master.
type shard struct {
	addr string
	ps   *redis.PubSub
	dead bool // closed: what it still reads is ignored
}

// NewSharded returns a Sharded that has subscribed nothing yet.
func NewSharded(cfg ShardedConfig) *Sharded {
	return &Sharded{
		cfg:       cfg,
		slots:     make(map[int]*slotSub),
		byChannel: make(map[string]int),
		shards:    make(map[string]*shard),
		quiet:     make(map[string]time.Time),
		pending:   make(map[int]time.Time),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
}

// Active reports whether the inbox is sharded: false once a node has said
// it has no sharded pub/sub (the Fallback serves then).
func (s *Sharded) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.unsupported
}

// Start subscribes slot's channel if that has not been requested, and then
// returns a channel closed once it is confirmed (or refused); it returns
// nil if it was requested before (or the Sharded is closed).
func (s *Sharded) Start(slot int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsupported {
		return s.cfg.Fallback.Start(slot)
	}
	if s.closed || s.slots[slot] != nil {
		return nil
	}
	if len(s.slots) == 0 && s.cfg.Earlier != nil {
		s.cfg.Earlier.Start(slot) // sends nothing yet: its loop does
	}
	ch := s.cfg.Channel(slot)
	st := &slotSub{channel: ch, ready: make(chan struct{})}
	s.slots[slot] = st
	s.byChannel[ch] = slot
	s.queue(slot, 0)
	return st.ready
}

// Started reports whether any subscription was requested.
func (s *Sharded) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.slots) > 0 || s.cfg.Fallback.Started()
}

// Ready reports whether slot's subscription is confirmed by the master
// that serves the slot now: an attempt may register as a waiter.
func (s *Sharded) Ready(slot int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsupported {
		return s.cfg.Fallback.Ready(slot)
	}
	st := s.slots[slot]
	return st != nil && st.isReady
}

// Refusal is the permanent refusal of slot's subscription, until a later
// confirmation; nil if none.
func (s *Sharded) Refusal(slot int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsupported {
		return s.cfg.Fallback.Refusal(slot)
	}
	if st := s.slots[slot]; st != nil {
		return st.refusal
	}
	return nil
}

// Close closes every connection, the Fallback and Earlier, and waits for the
// goroutines, except while the router connects to a frozen node: then the
// router and the receive loops (which may wait for the same connection) end
// once go-redis gives up, within the client's timeouts.
func (s *Sharded) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	var closing []*redis.PubSub
	for _, sh := range s.shards {
		sh.dead = true
		closing = append(closing, sh.ps)
	}
	s.shards = nil
	subscribing := s.subscribing
	s.mu.Unlock()
	var errs []error
	if subscribing {
		// go-redis' PubSub.Close waits for the connection that the
		// router's SSUBSCRIBE is making.
		go closeAll(closing)
	} else {
		errs = append(errs, closeAll(closing))
	}
	errs = append(errs, s.cfg.Fallback.Close())
	if s.cfg.Earlier != nil {
		errs = append(errs, s.cfg.Earlier.Close())
	}
	if !subscribing {
		// (When subscribing, the connection's receive loop may wait for
		// the same PubSub: it ends once go-redis gives up, as the router.)
		s.wg.Wait()
		s.router.Wait()
	}
	return errors.Join(errs...)
}

// queue makes slot due for routing after delay, and starts the router if it
// does not run; s.mu is held.
func (s *Sharded) queue(slot int, delay time.Duration) {
	s.pending[slot] = time.Now().Add(delay)
	if !s.routing {
		s.routing = true
		s.router.Add(1)
		go s.route()
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// route is the router: it subscribes the pending slots as they come due,
// each where the Cluster client says its master is, until Close.
func (s *Sharded) route() {
	defer s.router.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, next := s.due()
		failed := false
		masters := s.mastersIfMoving(due)
		for _, slot := range due {
			if err := s.subscribe(slot, masters); err != nil {
				failed = true
				s.retry(slot)
			}
		}
		s.mu.Lock()
		if failed {
			s.failures++
		} else if len(due) > 0 {
			s.failures = 0
		}
		s.mu.Unlock()
		if len(due) > 0 {
			continue // those retried are due later; others may be due now
		}
		t.Reset(next)
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-t.C:
		}
	}
}

// due takes the slots due now, and says how long until the next one is.
func (s *Sharded) due() ([]int, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	next := time.Hour
	var due []int
	for slot, at := range s.pending {
		if d := at.Sub(now); d > 0 {
			next = min(next, d)
			continue
		}
		delete(s.pending, slot)
		due = append(due, slot)
	}
	return due, next
}

// retry queues slot again after a failure to subscribe it, after the
// backoff, with the Cluster client's map reloaded meanwhile.
func (s *Sharded) retry(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.unsupported {
		return
	}
	s.cfg.Client.ReloadState(context.Background())
	if st := s.slots[slot]; st != nil && st.at == nil {
		s.queue(slot, backoff(s.failures+1))
	}
}

// maxMovingChecks bounds the checks of a dropped slot's master (see
// slotSub.moving): with the backoff, about 1.5s.
const maxMovingChecks = 5

func backoff(failures int) time.Duration {
	return min(time.Duration(failures)*50*time.Millisecond, time.Second)
}

// subscribe sends slot's SSUBSCRIBE to the master that serves it, on that
// master's connection (made if needed). The confirmation, or the refusal,
// comes to the connection's receive loop.
func (s *Sharded) subscribe(slot int, masters func(slot int) string) error {
	s.mu.Lock()
	st := s.slots[slot]
	if s.closed || s.unsupported || st == nil || st.at != nil {
		s.mu.Unlock()
		return nil
	}
	s.subscribing = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.subscribing = false
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), SubscribeTimeout)
	defer cancel()
	// The channel's hash tag is in slot: the master of its "key" is the
	// slot's.
	node, err := s.cfg.Client.MasterForKey(ctx, st.channel)
	if errors.Is(err, redis.ErrClosed) {
		return nil // the Cluster client was closed: nothing to retry
	}
	if err != nil {
		return err
	}
	addr := node.Options().Addr
	s.mu.Lock()
	if err := s.checkMaster(st, slot, addr, masters); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	sh := s.shards[addr]
	if sh == nil {
		sh = &shard{addr: addr, ps: node.SSubscribe(context.Background())}
		s.shards[addr] = sh
		s.wg.Add(1)
		go s.receive(sh)
	}
	st.at = sh
	s.mu.Unlock()
	wctx, wcancel := context.WithTimeout(context.Background(), SubscribeTimeout)
	defer wcancel()
	if err := sh.ps.SSubscribe(wctx, st.channel); err != nil {
		// The connection failed, or the write timed out: go-redis may have
		// reconnected it already, subscribing every channel it recorded in
		// one SSUBSCRIBE (refused for channels of several slots). The
		// connection is closed, and its slots routed again.
		s.lost(sh)
		return err
	}
	return nil
}

// checkMaster reports an error if slot (st) is not to be subscribed at
// addr, the master that the Cluster client's map names, yet: addr fell
// silent less than silentFor ago, or the slot was dropped by its master and
// the Cluster names another (masters, see mastersIfMoving); s.mu is held.
func (s *Sharded) checkMaster(st *slotSub, slot int, addr string, masters func(slot int) string) error {
	if until, ok := s.quiet[addr]; ok {
		if time.Now().Before(until) {
			return fmt.Errorf("dlock: %s, the master of slot %d in the Cluster client's map, fell silent", addr, slot)
		}
		delete(s.quiet, addr)
	}
	if st.moving > 0 && masters != nil {
		if m := masters(slot); m != addr {
			st.moving--
			return fmt.Errorf("dlock: the Cluster client's map names %s as the master of slot %d, the Cluster %q", addr, slot, m)
		}
	}
	st.moving = 0
	return nil
}

// mastersIfMoving asks the Cluster for its slots' masters (CLUSTER SLOTS,
// once for the round) when a slot of due was dropped by its master: the
// Cluster client's map may still name the old one, now a replica, which
// would accept the subscription (and hear the releases, but not be counted
// by them). It returns nil when no slot is moving, or the Cluster did not
// answer (the map is trusted then).
func (s *Sharded) mastersIfMoving(due []int) func(slot int) string {
	s.mu.Lock()
	moving := false
	for _, slot := range due {
		if st := s.slots[slot]; st != nil && st.moving > 0 {
			moving = true
		}
	}
	s.mu.Unlock()
	if !moving {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), SubscribeTimeout)
	defer cancel()
	ranges, err := s.cfg.Client.ClusterSlots(ctx).Result()
	if err != nil {
		return nil
	}
	return func(slot int) string {
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
				return r.Nodes[0].Addr
			}
		}
		return ""
	}
}

// receive reads what sh's connection receives until it fails, is closed,
// or falls silent: a connection on which nothing came for healthInterval is
// sent a PING, and one that then stays silent for healthTimeout is taken for
// lost (silent), as a failed one is.
func (s *Sharded) receive(sh *shard) {
	defer s.wg.Done()
	pinged := false
	for {
		wait := healthInterval
		if pinged {
			wait = healthTimeout
		}
		msg, err := sh.ps.ReceiveTimeout(context.Background(), wait)
		if err != nil {
			if isTimeout(err) {
				if !pinged && s.ping(sh) == nil {
					pinged = true
					continue
				}
				s.silent(sh)
				return
			}
			if !s.replyError(sh, err) {
				s.lost(sh)
				return
			}
			continue
		}
		pinged = false // anything read shows the connection alive
		switch m := msg.(type) {
		case *redis.Message:
			s.cfg.Deliver(m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				s.confirmed(sh, m.Channel)
			case "sunsubscribe":
				// Never asked for: the master no longer serves the slot.
				s.dropped(sh, m.Channel)
			}
		}
	}
}

// The health check of a shard's connection. A master that is frozen, hung
// or cut off keeps its connection open and silent: no error comes, and no
// sunsubscribe when its replica takes over, so without it the slots would
// stay on the old master, "ready", while the releases on the new one reach
// nobody. Its cost: one PING per connection (per master that the Locker
// waits on, whatever its number of waiters) per healthInterval at most, and
// none while messages come; a silent master is found within
// healthInterval+healthTimeout (8s), then avoided for silentFor.
const (
	healthInterval = 5 * time.Second
	// healthTimeout is go-redis' default read timeout: a master that
	// answers no PING within it is taken for gone.
	healthTimeout = 3 * time.Second
	// silentFor is how long after a master fell silent a slot is not
	// subscribed there again (its replica may be taking over; meanwhile
	// the Cluster client's map, reloaded, may still name it): then it is
	// tried again, as it may serve the slot still.
	silentFor = healthInterval
)

// isTimeout reports whether err is a read or dial that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ping sends a PING on sh's connection, bounded by SubscribeTimeout; its
// answer comes to the receive loop.
func (s *Sharded) ping(sh *shard) error {
	ctx, cancel := context.WithTimeout(context.Background(), SubscribeTimeout)
	defer cancel()
	return sh.ps.Ping(ctx)
}

// silent closes sh after its master fell silent, routes its slots again,
// and keeps them off that master for silentFor; the Cluster client's map is
// reloaded, so that it names the replica that takes over.
func (s *Sharded) silent(sh *shard) {
	s.mu.Lock()
	closed := s.closed || sh.dead
	if !closed {
		s.quiet[sh.addr] = time.Now().Add(silentFor)
	}
	s.mu.Unlock()
	if !closed {
		s.cfg.Client.ReloadState(context.Background())
	}
	s.lost(sh)
}

// confirmed records the confirmation of channel on sh, and wakes the
// slot's waiters.
func (s *Sharded) confirmed(sh *shard, channel string) {
	s.mu.Lock()
	slot, ok := s.byChannel[channel]
	st := s.slots[slot]
	if !ok || st.at != sh {
		s.mu.Unlock()
		return // a confirmation from where the slot no longer is
	}
	st.isReady, st.refusal, st.moved = true, nil, 0
	st.wakeReady()
	s.mu.Unlock()
	s.cfg.Wake(slot)
}

// dropped routes channel's slot again after sh's master dropped it (the
// slot moved, or the master became a replica): the Cluster client's map is
// reloaded first, and the slot subscribed a moment later, so that the map
// names the new master (a replica would accept the subscription too, and
// hear the releases, but a release's count of receivers would miss it).
func (s *Sharded) dropped(sh *shard, channel string) {
	s.mu.Lock()
	slot, ok := s.byChannel[channel]
	if ok && s.slots[slot].at == sh {
		s.slots[slot].moving = maxMovingChecks
		s.reroute(sh, slot, backoff(2))
	}
	closed := s.closed
	s.mu.Unlock()
	if ok && !closed {
		s.cfg.Client.ReloadState(context.Background())
	}
}

// reroute routes slot again after delay if it is on sh; s.mu is held.
func (s *Sharded) reroute(sh *shard, slot int, delay time.Duration) {
	st := s.slots[slot]
	if s.closed || st == nil || st.at != sh {
		return
	}
	st.at, st.isReady = nil, false
	s.queue(slot, delay)
}

// lost closes sh after its connection failed (or go-redis closed its node),
// and routes its slots again: a failover may have moved them.
func (s *Sharded) lost(sh *shard) {
	s.mu.Lock()
	if sh.dead {
		s.mu.Unlock()
		return
	}
	sh.dead = true
	if s.shards[sh.addr] == sh {
		delete(s.shards, sh.addr)
	}
	s.failures++
	for slot, st := range s.slots {
		if st.at == sh {
			s.reroute(sh, slot, backoff(s.failures))
		}
	}
	s.mu.Unlock()
	// Not under s.mu: go-redis holds the PubSub's lock while it connects,
	// which a frozen node can make last.
	_ = sh.ps.Close()
}

// replyError handles an error that sh's master answered to an SSUBSCRIBE,
// and reports false for any other error: the connection failed, or its
// handshake was refused (a password changed), or an answer that belongs to
// no slot (CROSSSLOT: go-redis subscribed again every channel it recorded).
// Then the connection is closed, and its slots routed again with backoff.
func (s *Sharded) replyError(sh *shard, err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	msg := err.Error()
	s.mu.Lock()
	if sh.dead {
		s.mu.Unlock()
		return true
	}
	switch {
	case strings.HasPrefix(msg, "MOVED "):
		// "MOVED SLOT ADDR": the Cluster client's map was stale.
		if f := strings.Fields(msg); len(f) == 3 {
			if slot, perr := strconv.Atoi(f[1]); perr == nil {
				if st := s.slots[slot]; st != nil && st.at == sh {
					st.moved++
					s.reroute(sh, slot, backoff(st.moved))
				}
			}
		}
		s.mu.Unlock()
		s.cfg.Client.ReloadState(context.Background())
	case strings.Contains(msg, "unknown command") || strings.Contains(msg, "'ssubscribe' command"):
		// No sharded pub/sub on this server (Redis < 7.0), or a user
		// whose ACL does not allow SSUBSCRIBE (a line made for an
		// earlier dlock): the classic inbox still serves.
		first, closing := s.fallBack()
		s.mu.Unlock()
		closeAll(closing)
		if first {
			s.cfg.FellBack(err)
			if s.cfg.Earlier != nil {
				// The waiters register classic members from now on
				// (FellBack), of which a release by an earlier version
				// tells the Fallback's channel.
				_ = s.cfg.Earlier.Close()
			}
		}
	case strings.HasPrefix(msg, "NOPERM"):
		// NOPERM for the channel (Redis 7.0: "... to access one of the
		// channels used as arguments", 7.2: "No permissions to access a
		// channel"): the ACL does not allow the prefix.
		s.refuse(sh, err)
	default:
		s.mu.Unlock()
		return false
	}
	return true
}

// refuse records a permanent refusal (NOPERM: the ACL does not allow the
// channel) for every slot not confirmed on sh, asks again after
// refusedRetry, and lets the waiters know; s.mu is held, and released.
func (s *Sharded) refuse(sh *shard, err error) {
	var refused []int
	for slot, st := range s.slots {
		if st.at == sh && !st.isReady {
			st.refusal = err
			st.wakeReady()
			s.reroute(sh, slot, refusedRetry)
			refused = append(refused, slot)
		}
	}
	first := !s.refusedOnce && len(refused) > 0
	s.refusedOnce = true
	s.mu.Unlock()
	if first {
		s.cfg.Refused(err)
	}
	for _, slot := range refused {
		s.cfg.Wake(slot)
	}
}

// fallBack switches to the classic subscription for good, for every slot:
// every waiting subscription request ends, so that its waiter subscribes
// the Fallback; s.mu is held. It reports whether it switched now, and
// returns the connections to close (after s.mu is released).
func (s *Sharded) fallBack() (bool, []*redis.PubSub) {
	if s.unsupported {
		return false, nil
	}
	s.unsupported = true
	for _, st := range s.slots {
		st.wakeReady()
	}
	var closing []*redis.PubSub
	for _, sh := range s.shards {
		sh.dead = true
		closing = append(closing, sh.ps)
	}
	s.shards = map[string]*shard{}
	clear(s.pending)
	return true, closing
}

// closeAll closes the PubSubs, joining their errors.
func closeAll(pss []*redis.PubSub) error {
	var errs []error
	for _, ps := range pss {
		errs = append(errs, ps.Close())
	}
	return errors.Join(errs...)
}

// wakeReady closes ready once; Sharded.mu is held.
func (st *slotSub) wakeReady() {
	if !st.woken {
		st.woken = true
		close(st.ready)
	}
}
