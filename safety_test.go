package dlock_test

// Regression tests for the safety and liveness defects of issue 7, one (or
// a few) per item, each against real redis-servers with real faults.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// ctxClient returns a client for s that applies context deadlines to its
// reads (the recommended setup).
func ctxClient(t *testing.T, s *dlocktest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// newLocker returns a Locker on c, closed in the test's Cleanup.
func newLocker(t *testing.T, c redis.UniversalClient, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l := dlock.New(c, opts...)
	t.Cleanup(func() { l.Close() })
	return l
}

// freeze stops s (SIGSTOP) and thaws it in the test's Cleanup if the test
// did not; it returns the thaw.
func freeze(t *testing.T, servers ...*dlocktest.Server) func() {
	t.Helper()
	for _, s := range servers {
		if err := s.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	thaw := func() {
		once.Do(func() {
			for _, s := range servers {
				s.Thaw()
			}
		})
	}
	t.Cleanup(thaw)
	return thaw
}

// queued starts Acquire(key) on l in the background, and returns once the
// waiting set of key on c holds n registrations.
func queued(t *testing.T, l *dlock.Locker, c *redis.Client, key string, n int64) <-chan *dlock.Lock {
	t.Helper()
	got := acquireAsync(t, l, key)
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{"+key+"}:waiters").Val() == n }, "the waiter for "+key+" registered")
	return got
}

// notTwoHolders checks the one thing that matters when a second process
// acquires a lock: the first holder must have been told before.
func notTwoHolders(t *testing.T, first *dlock.Lock, what string) {
	t.Helper()
	select {
	case <-first.Lost():
	default:
		t.Fatalf("%s: two holders: the lock was acquired while the first holder's Lost was open (its validity runs %s longer)",
			what, time.Until(first.ValidUntil()).Round(time.Millisecond))
	}
}

// Item 1: an Extend to a shorter TTL that Redis did not confirm in time, but
// ran after all, must not leave the holder believing in a validity the key
// no longer has: no command moves a key's expiry earlier, so the late
// command leaves the key held as long as the holder believes.
func TestExtendUnconfirmedShorterTTL(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ctxClient bool
		autoRenew bool
	}{
		{"default client", false, false},
		{"default client, auto-renewed", false, true},
		{"ContextTimeoutEnabled", true, false},
		{"ContextTimeoutEnabled, auto-renewed", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dlocktest.Start(t)
			c := s.Client()
			if tc.ctxClient {
				c = ctxClient(t, s)
			}
			a := newLocker(t, c)
			k, err := a.Acquire(ctx(t), "shrink", dlock.WithAutoRenew(tc.autoRenew))
			if err != nil {
				t.Fatal(err)
			}
			// Load the script first: a frozen EVALSHA of an unknown script
			// would only get NOSCRIPT when the server resumes.
			if err := k.Extend(ctx(t), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			thaw := freeze(t, s)
			if err := k.Extend(ctx(t), 200*time.Millisecond); err == nil {
				t.Fatal("Extend was confirmed by a frozen Redis")
			}
			thaw() // the late command runs now
			direct := s.Client()
			defer direct.Close()
			if pttl, left := direct.PTTL(ctx(t), "dlock:{shrink}").Val(), time.Until(k.ValidUntil()); pttl < left {
				select {
				case <-k.Lost():
				default:
					t.Fatalf("the key expires in %v, the holder's validity runs %v", pttl, left)
				}
			}
			b := newLocker(t, direct)
			if k2, err := b.TryAcquire(ctx(t), "shrink"); err == nil {
				notTwoHolders(t, k, "after an unconfirmed Extend to 200ms")
				k2.Release(ctx(t))
			}
		})
	}
}

// Item 1, on a quorum: an Extend confirmed by a minority.
func TestRedlockExtendConfirmedByMinority(t *testing.T) {
	l, servers, clients := redlock(t, 3)
	k, err := l.Acquire(ctx(t), "shrink", dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx(t), 30*time.Second); err != nil { // loads the script
		t.Fatal(err)
	}
	thaw := freeze(t, servers[1], servers[2])
	if err := k.Extend(ctx(t), 200*time.Millisecond); err == nil {
		t.Fatal("Extend was confirmed with 2 of 3 nodes frozen")
	}
	thaw()
	b, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if k2, err := b.TryAcquire(ctx(t), "shrink"); err == nil {
		notTwoHolders(t, k, "after an Extend to 200ms confirmed by 1 of 3 nodes")
		k2.Release(ctx(t))
	}
	held := 0
	left := time.Until(k.ValidUntil())
	for _, c := range clients {
		if c.PTTL(ctx(t), "dlock:{shrink}").Val() >= left {
			held++
		}
	}
	if held < 2 {
		t.Errorf("%d of 3 nodes hold the key as long as the holder's validity (%v)", held, left)
	}
}

// Item 2: one node restarted without its data.
func TestFenceAfterRestartWithoutData(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := newLocker(t, c)
	var last uint64
	for range 5 {
		k, err := l.TryAcquire(ctx(t), "pay")
		if err != nil {
			t.Fatal(err)
		}
		last = k.Fence()
		k.Release(ctx(t))
	}
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	k, err := l.Acquire(ctxTimeout(t, 10*time.Second), "pay")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	if k.Fence() <= last {
		t.Errorf("fence %d after a restart without data, not above the %d issued before", k.Fence(), last)
	}
}

// Item 2, on a quorum: a node that restarted empty (kept out for a TTL, the
// documented procedure) joins a later majority whose other node missed the
// earlier acquisitions.
func TestRedlockFenceAfterDelayedRestart(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	clients := dlocktest.Clients(t, servers...)
	l, err := dlock.NewRedlock(clients, dlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const ttl = 200 * time.Millisecond
	a, b, c := servers[0], servers[1], servers[2]
	c.Kill() // c misses every acquisition below
	var last uint64
	for range 5 {
		k, err := l.Acquire(ctx(t), "pay", dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		last = k.Fence()
		if err := k.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	a.Kill()
	time.Sleep(ttl + ttl/2) // the delayed restart: out of service for more than a TTL
	if err := a.Restart(); err != nil {
		t.Fatal(err)
	}
	freeze(t, b) // the next majority is {a, c}: both empty
	k, err := l.Acquire(ctxTimeout(t, 10*time.Second), "pay", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	if k.Fence() <= last {
		t.Errorf("fence %d from a majority of restarted nodes, not above the %d issued before", k.Fence(), last)
	}
}

// Item 2: fence counters do not live forever.
func TestFenceCountersExpire(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := newLocker(t, c)
	k, err := l.TryAcquire(ctx(t), "entity")
	if err != nil {
		t.Fatal(err)
	}
	k.Release(ctx(t))
	if ttl := c.PTTL(ctx(t), "dlock:{entity}:fence").Val(); ttl <= 0 || ttl > dlock.DefaultFenceRetention {
		t.Errorf("fence counter TTL = %s, want a retention of at most %s", ttl, dlock.DefaultFenceRetention)
	}
	c.FlushAll(ctx(t))

	short := newLocker(t, c, dlock.WithFenceRetention(300*time.Millisecond))
	for i := range 1000 {
		k, err := short.TryAcquire(ctx(t), fmt.Sprintf("payout:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.DBSize(ctx(t)).Val(); n == 0 {
		t.Fatal("no fence counters right after the acquisitions")
	}
	waitFor(t, func() bool { return c.DBSize(ctx(t)).Val() == 0 }, "the 1000 fence counters to expire")
}

// Item 3: fence arithmetic is exact, and a failing increment changes nothing.
func TestFenceExact(t *testing.T) {
	l, _, c := single(t)
	c.Set(ctx(t), "dlock:{big}:fence", "9007199254740994", 0) // 2^53 + 2
	k, err := l.TryAcquire(ctx(t), "big")
	if err != nil {
		t.Fatal(err)
	}
	if k.Fence() != 9007199254740995 {
		t.Errorf("fence after 2^53+2 = %d, want 9007199254740995", k.Fence())
	}
	k.Release(ctx(t))

	for _, bad := range []string{"9223372036854775807", "not a number"} {
		c.Set(ctx(t), "dlock:{full}:fence", bad, 0)
		if k, err := l.TryAcquire(ctx(t), "full"); err == nil {
			k.Release(ctx(t))
			t.Fatalf("acquired with the fence counter at %q", bad)
		}
		if n := c.Exists(ctx(t), "dlock:{full}").Val(); n != 0 {
			t.Errorf("counter %q: the failed acquisition left the lock key behind", bad)
		}
		if v := c.Get(ctx(t), "dlock:{full}:fence").Val(); v != bad {
			t.Errorf("counter %q changed to %q by a failed acquisition", bad, v)
		}
	}
}

// Item 4: an acquisition that timed out on a frozen node, which runs it when
// it resumes, leaves no key behind.
func TestTimedOutAcquireLeavesNoKey(t *testing.T) {
	t.Parallel() // mostly waits (a failover, a freeze, validities): beside the other waiting tests
	for _, tc := range []struct {
		name   string
		client func(t *testing.T, s *dlocktest.Server) *redis.Client
		freeze time.Duration
	}{
		{"ContextTimeoutEnabled", ctxClient, 1500 * time.Millisecond},
		{"default client", func(t *testing.T, s *dlocktest.Server) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 500 * time.Millisecond})
			t.Cleanup(func() { c.Close() })
			return c
		}, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dlocktest.Start(t)
			l := newLocker(t, tc.client(t, s))
			warm, err := l.TryAcquire(ctx(t), "warm") // loads the scripts
			if err != nil {
				t.Fatal(err)
			}
			warm.Release(ctx(t))
			thaw := freeze(t, s)
			frozen := time.Now()
			if k, err := l.TryAcquire(ctx(t), "late"); err == nil {
				k.Release(ctx(t))
				t.Fatal("acquired on a frozen Redis")
			}
			time.Sleep(tc.freeze - time.Since(frozen)) // the fault: frozen this long
			thaw()
			admin := s.Client()
			defer admin.Close()
			waitFor(t, func() bool { return admin.Exists(ctx(t), "dlock:{late}").Val() == 0 },
				"the key set by the late acquisition to be cleaned up")
		})
	}
}

// Item 4: a renewal that a frozen node runs after the lock was reported lost,
// but before its key expired, does not keep the key for another TTL.
func TestLateRenewalOfLostLockCleanedUp(t *testing.T) {
	t.Parallel() // mostly waits (a failover, a freeze, validities): beside the other waiting tests
	s := dlocktest.Start(t)
	l := newLocker(t, ctxClient(t, s))
	const ttl = 6 * time.Second
	k, err := l.Acquire(ctx(t), "renewed", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx(t), ttl); err != nil { // loads the script
		t.Fatal(err)
	}
	thaw := freeze(t, s)
	<-k.Lost() // the renewal at TTL/3 is queued in the frozen server
	// Thaw after the renewal gave up (at the end of the validity) but
	// before the key expires (the drift later, 62ms): the renewal runs, for
	// another TTL.
	time.Sleep(time.Until(k.ValidUntil()) + 20*time.Millisecond)
	thaw()
	b := newLocker(t, s.Client())
	start := time.Now()
	k2, err := b.Acquire(ctxTimeout(t, ttl/2), "renewed")
	if err != nil {
		t.Fatalf("the lost lock's key was kept by its late renewal: %v", err)
	}
	t.Logf("acquired %s after the thaw", time.Since(start))
	k2.Release(ctx(t))
}

// Item 5: goroutines of one Locker that give up together leave no
// registration behind, and a later waiter is woken by the next release.
func TestWaitersGiveUpTogether(t *testing.T) {
	l, s, c := single(t)
	k, err := l.Acquire(ctx(t), "herd")
	if err != nil {
		t.Fatal(err)
	}
	b := newLocker(t, s.Client())
	gctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Acquire(gctx, "herd"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("Acquire: %v, want ErrNotAcquired", err)
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool {
		return c.ZCard(ctx(t), "dlock:{herd}:waiters").Val() == 0 && c.Exists(ctx(t), "dlock:{herd}:wexp").Val() == 0
	}, "the registration of the goroutines that gave up to be removed")
	late := newLocker(t, s.Client())
	got := queued(t, late, c, "herd", 1)
	handoff(t, k, got, "a waiter behind goroutines that gave up")
}

// Item 6: a waiter whose registration vanished (evicted, flushed, a restart)
// registers again at its next attempt, and the release wakes it.
func TestWaiterRegistersAgain(t *testing.T) {
	l, s, c := single(t)
	k, err := l.Acquire(ctx(t), "vanish")
	if err != nil {
		t.Fatal(err)
	}
	w := newLocker(t, s.Client())
	got := queued(t, w, c, "vanish", 1)
	c.Del(ctx(t), "dlock:{vanish}:waiters", "dlock:{vanish}:wexp")
	// The waiter's subscription coming back after a reconnection makes it
	// attempt again while the lock is still held.
	if err := c.Do(ctx(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{vanish}:waiters").Val() == 1 }, "the waiter to register again")
	handoff(t, k, got, "the waiter whose registration had vanished")
}

// Item 7: a waiter that stood in once stands in again when asked.
func TestStandInAgain(t *testing.T) {
	l, s, c := single(t)
	k, err := l.Acquire(ctx(t), "standin")
	if err != nil {
		t.Fatal(err)
	}
	wc := s.Client()
	defer wc.Close()
	var sent dlocktest.Counter
	wc.AddHook(&sent)
	w := newLocker(t, wc)
	got := queued(t, w, c, "standin", 1)
	member := c.ZRange(ctx(t), "dlock:{standin}:waiters", 0, 0).Val()[0]
	inbox := "dlock:inbox:" + member[:strings.IndexByte(member, ':')]

	// A first stand-in, as a release that woke a waiter ahead of it asks:
	// it attempts, and fails, since the lock is still held.
	before := sent.Load()
	c.Publish(ctx(t), inbox, "s "+member)
	waitFor(t, func() bool { return sent.Load() > before }, "the waiter to stand in")

	// Now a release wakes a dead waiter ahead of it: it must stand in again.
	now := c.Time(ctx(t)).Val()
	c.ZAdd(ctx(t), "dlock:{standin}:waiters", redis.Z{Score: 1, Member: "ghost"})
	c.HSet(ctx(t), "dlock:{standin}:wexp", "ghost", now.Add(time.Minute).UnixMilli())
	handoff(t, k, got, "the waiter standing in a second time")
}

// Item 8: a Ring is refused with a clear error, and nothing panics.
func TestRingRefused(t *testing.T) {
	s := dlocktest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.Addr()}})
	defer ring.Close()
	l := dlock.New(ring)
	defer l.Close()
	if k, err := l.TryAcquire(ctx(t), "r"); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "Ring") {
		if k != nil {
			k.Release(ctx(t))
		}
		t.Errorf("TryAcquire on a Ring: %v, want ErrInvalid naming the Ring", err)
	}
	if _, err := l.Acquire(ctxTimeout(t, time.Second), "r"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Acquire on a Ring: %v, want ErrInvalid", err)
	}
	if _, err := dlock.NewRedlock([]redis.UniversalClient{ring}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewRedlock with a Ring: %v, want ErrInvalid", err)
	}
}

// renewalSent returns a client for s whose channel is signalled when a
// script call is sent after arm() was called.
func renewalSent(t *testing.T, s *dlocktest.Server) (*redis.Client, func(), <-chan struct{}) {
	return renewalSentOpts(t, &redis.Options{Addr: s.Addr()})
}

// renewalSentOpts is renewalSent for a client with the given options.
func renewalSentOpts(t *testing.T, opts *redis.Options) (*redis.Client, func(), <-chan struct{}) {
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	var armed atomic.Bool
	ch := make(chan struct{}, 1)
	c.AddHook(scriptSignal{armed: &armed, ch: ch})
	return c, func() { armed.Store(true) }, ch
}

type scriptSignal struct {
	armed *atomic.Bool
	ch    chan struct{}
}

func (scriptSignal) DialHook(next redis.DialHook) redis.DialHook { return next }
func (scriptSignal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h scriptSignal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			select {
			case h.ch <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}

// Item 9: Extend honours its ctx while a renewal is stuck on a frozen node.
func TestExtendHonoursCtx(t *testing.T) {
	s := dlocktest.Start(t)
	c, arm, renewing := renewalSent(t, s)
	l := newLocker(t, c)
	k, err := l.Acquire(ctx(t), "stuck", dlock.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	freeze(t, s)
	arm()
	<-renewing // the renewal waits for the frozen node until the validity ends
	ectx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = k.Extend(ectx, 6*time.Second)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Extend with a 100ms context returned after %s", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend: %v, want the context's error", err)
	}
}

// Item 9: Close does not wait for a renewal stuck on a frozen node.
func TestCloseDuringStuckRenewal(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(addr string) *redis.Options
	}{
		{"default client", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
		// Found in review: with a ContextTimeoutEnabled client, a renewal
		// waiting for a frozen node ran inline and ignored Close's
		// cancellation.
		{"ContextTimeoutEnabled", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: -1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dlocktest.Start(t)
			c, arm, renewing := renewalSentOpts(t, tc.opts(s.Addr()))
			l := dlock.New(c, dlock.WithNodeTimeout(200*time.Millisecond))
			k, err := l.Acquire(ctx(t), "stuck", dlock.WithTTL(6*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			freeze(t, s)
			arm()
			<-renewing
			start := time.Now()
			l.Close()
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("Close took %s with a renewal stuck on a frozen node", el)
			}
			select {
			case <-k.Lost():
			default:
				t.Error("Close returned with the lock's Lost open")
			}
		})
	}
}

// Item 10: every name a user can pass keeps the lock's keys in one Cluster
// slot, and names stay distinct.
func TestClusterAwkwardNames(t *testing.T) {
	cl := dlocktest.StartCluster(t, 3)
	c := cl.Client()
	defer c.Close()
	a := newLocker(t, c)
	b := newLocker(t, cl.Client())
	names := []string{"}x", "}", "}}", "\x00", "\x00}x", "{", "{}", "a}b", "{a}", "x{y}z", "plain"}
	held := make([]*dlock.Lock, 0, len(names))
	for _, key := range names {
		k, err := a.TryAcquire(ctx(t), key)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", key, err)
		}
		held = append(held, k)
		if _, err := b.TryAcquire(ctx(t), key); !errors.Is(err, dlock.ErrNotAcquired) || strings.Contains(err.Error(), "CROSSSLOT") {
			t.Errorf("second TryAcquire(%q): %v, want ErrNotAcquired (held)", key, err)
		}
		if st, err := a.Status(ctx(t), key); err != nil || !st.Held {
			t.Errorf("Status(%q) = %+v, %v", key, st, err)
		}
	}
	// A waiter registers and is woken on every such name too.
	for i, key := range names {
		got := acquireAsync(t, b, key)
		waitFor(t, func() bool {
			st, _ := a.Status(ctx(t), key)
			return st.Waiters == 1
		}, fmt.Sprintf("the waiter for %q", key))
		handoff(t, held[i], got, fmt.Sprintf("the waiter for %q", key))
	}
	if _, err := newLocker(t, c, dlock.WithPrefix("p{}")).TryAcquire(ctx(t), "k"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a prefix with braces: %v, want ErrInvalid", err)
	}
	if _, err := dlock.NewRedlock([]redis.UniversalClient{c}, dlock.WithPrefix("{app}:")); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewRedlock with a prefix with braces: %v, want ErrInvalid", err)
	}
}

// Item 11: a Release made while another is under way returns its outcome.
func TestConcurrentReleaseSameOutcome(t *testing.T) {
	l, s, _ := single(t)
	k, err := l.Acquire(ctx(t), "twice")
	if err != nil {
		t.Fatal(err)
	}
	freeze(t, s)
	first := make(chan error, 1)
	go func() { first <- k.Release(ctx(t)) }()
	<-k.Lost() // closed as the first Release begins
	second := k.Release(ctx(t))
	if err1 := <-first; err1 == nil || second != err1 {
		t.Errorf("Release on a frozen node: first %v, concurrent second %v; want the same failure", err1, second)
	}
}

// Item 12: waiters whose retry lands in the holder's last millisecond
// (PTTL 0) are woken by the expiry, not by their fallback timer (≥ 11s).
func TestWaitersAtTheLastMillisecond(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	const waiters = 60
	opts := []dlock.LockOption{dlock.WithTTL(20 * time.Millisecond), dlock.WithAutoRenew(false)}
	wctx := ctxTimeout(t, 10*time.Second)
	// Acquire, not TryAcquire: a 20ms TTL gives each node 4ms, which a
	// first dial on a loaded machine can miss; Acquire tries again.
	first, err := newLocker(t, c).Acquire(wctx, "tick", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx(t))
	var wg sync.WaitGroup
	var failed atomic.Int32
	start := time.Now()
	for range waiters {
		l := newLocker(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each holder keeps its lease until it expires: every waiter
			// is woken by a holder's TTL running out.
			if _, err := l.Acquire(wctx, "tick", opts...); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d waiters did not acquire a 20ms lease within 10s", n, waiters)
	}
	t.Logf("%d waiters acquired in turn in %s", waiters, time.Since(start))
}

// Item 13: Do cancels fn's context before it releases the lock.
func TestDoCancelsBeforeRelease(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	var fctx atomic.Pointer[context.Context]
	var returned, violated atomic.Bool
	c.AddHook(afterReturn{returned: &returned, check: func() {
		if (*fctx.Load()).Err() == nil {
			violated.Store(true)
		}
	}})
	l := newLocker(t, c)
	err := l.Do(ctx(t), "do", func(ctx context.Context) error {
		fctx.Store(&ctx)
		returned.Store(true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if violated.Load() {
		t.Error("the lock was released while fn's context was still live")
	}
	if cause := context.Cause(*fctx.Load()); cause == nil {
		t.Error("fn's context was not cancelled")
	}
}

// afterReturn calls check before every command sent once returned is set.
type afterReturn struct {
	returned *atomic.Bool
	check    func()
}

func (afterReturn) DialHook(next redis.DialHook) redis.DialHook { return next }
func (afterReturn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h afterReturn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.returned.Load() {
			h.check()
		}
		return next(ctx, cmd)
	}
}

// Item 14: Close gives back the locks it holds, after telling their holders.
func TestCloseReleasesHeldLocks(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	a := dlock.New(c)
	k, err := a.TryAcquire(ctx(t), "shutdown")
	if err != nil {
		t.Fatal(err)
	}
	inDo := make(chan struct{})
	doErr := make(chan error, 1)
	var cause error
	go func() {
		doErr <- a.Do(ctx(t), "shutdown-do", func(ctx context.Context) error {
			close(inDo)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		})
	}()
	<-inDo
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-k.Lost():
	default:
		t.Error("Close returned with a held lock's Lost open")
	}
	for _, key := range []string{"dlock:{shutdown}", "dlock:{shutdown-do}"} {
		if c.Exists(ctx(t), key).Val() != 0 {
			t.Errorf("%s still exists after Close", key)
		}
	}
	if err := <-doErr; !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do interrupted by Close: %v, want ErrLockLost", err)
	}
	if !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(cause, dlock.ErrClosed) {
		t.Errorf("Do's context cause %v, want ErrLockLost and ErrClosed", cause)
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after Close: %v, want ErrNotHeld", err)
	}
	b := newLocker(t, s.Client())
	k2, err := b.TryAcquire(ctx(t), "shutdown")
	if err != nil {
		t.Fatalf("another process could not take the lock right after Close: %v", err)
	}
	k2.Release(ctx(t))
}

// Item 15.
func TestNilLock(t *testing.T) {
	var k *dlock.Lock
	if err := k.Release(context.Background()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release on a nil *Lock: %v, want ErrNotHeld", err)
	}
	if err := k.Extend(context.Background(), time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend on a nil *Lock: %v, want ErrNotHeld", err)
	}
}

// Item 16: a Redlock lock acquired on a bare majority takes its spare nodes
// back once they are free, and then survives the loss of a minority.
func TestRedlockRegainsSpareNodes(t *testing.T) {
	l, servers, clients := redlock(t, 5)
	for _, i := range []int{3, 4} {
		clients[i].Set(ctx(t), "dlock:{spare}", "a contender", time.Minute)
	}
	const ttl = 900 * time.Millisecond
	k, err := l.TryAcquire(ctx(t), "spare", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	for _, i := range []int{3, 4} {
		clients[i].Del(ctx(t), "dlock:{spare}") // the contender lets go
	}
	for _, i := range []int{3, 4} {
		waitFor(t, func() bool { return clients[i].Get(ctx(t), "dlock:{spare}").Val() == k.Token() },
			fmt.Sprintf("the renewal to take node %d back", i))
	}
	freeze(t, servers[0], servers[1])
	select {
	case <-k.Lost():
		t.Fatal("lost with 3 of 5 nodes healthy")
	case <-time.After(3 * ttl):
	}
}

// Item 17: when Release returns, the lock can be taken at once, also with
// a frozen minority.
func TestRedlockReleaseThenAcquire(t *testing.T) {
	l, servers, _ := redlock(t, 5)
	freeze(t, servers[3], servers[4])
	k, err := l.Acquire(ctx(t), "again")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := k.Release(ctx(t)); err != nil {
			t.Fatalf("round %d: Release: %v", i, err)
		}
		if k, err = l.TryAcquire(ctx(t), "again"); err != nil {
			t.Fatalf("round %d: TryAcquire right after Release: %v", i, err)
		}
	}
	k.Release(ctx(t))
}

// Item 17: Release waits for every node that is answering, also a slow one
// outside the quorum that confirmed first, so that no node still holds the
// key when it returns.
func TestRedlockReleaseWaitsForAnsweringNodes(t *testing.T) {
	l, servers, clients := redlock(t, 5)
	k, err := l.Acquire(ctx(t), "slow")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return clients[4].Exists(ctx(t), "dlock:{slow}").Val() == 1 }, "node 4 to hold the key")
	// Node 4 is held up for 300ms (stopped, then resumed: it answers,
	// late). (A script that loops on TIME for 300ms would not do on every
	// server: Valkey 8 and Redis 8 give a script the time it began at every
	// TIME, so that such a loop never ends; see TestServerTimeInScript.)
	if err := servers[4].Freeze(); err != nil {
		t.Fatal(err)
	}
	launched := time.Now()
	resumed := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { resumed <- servers[4].Thaw() })
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// Node 4 cannot answer before it resumes, 300ms after it stopped.
	if el := time.Since(launched); el < 300*time.Millisecond {
		t.Errorf("Release returned %s after node 4 was held up for 300ms: it did not wait for an answering node", el)
	}
	if n := clients[4].Exists(ctx(t), "dlock:{slow}").Val(); n != 0 {
		t.Error("Release returned while an answering node still held the key")
	}
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
}

// Found in review: an attempt that registers a waiter on a frozen node, and
// whose answer never comes, writes the registration when the node resumes.
// Waiters that gave up during the freeze must not leave such ghosts ahead
// of a live waiter.
func TestNoGhostRegistrationFromUnansweredAttempt(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	k, err := newLocker(t, c).Acquire(ctx(t), "ghost")
	if err != nil {
		t.Fatal(err)
	}
	var gone []*dlock.Locker
	for range 2 {
		l := newLocker(t, s.Client())
		wctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if _, err := l.Acquire(wctx, "ghost"); !errors.Is(err, dlock.ErrNotAcquired) { // subscribes its inbox
			t.Fatalf("warm-up Acquire: %v", err)
		}
		cancel()
		gone = append(gone, l)
	}
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{ghost}:waiters").Val() == 0 }, "warm-up registrations removed")
	thaw := freeze(t, s)
	var wg sync.WaitGroup
	for _, l := range gone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			l.Acquire(wctx, "ghost")
		}()
	}
	wg.Wait()
	thaw()
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{ghost}:waiters").Val() == 0 },
		"the registrations written late for waiters that gave up to be removed")
	got := queued(t, newLocker(t, s.Client()), c, "ghost", 1)
	handoff(t, k, got, "a live waiter behind waiters that gave up during a freeze")
}

// Found in review: go-redis retries a script whose read timed out; a retry
// that cannot get a connection ends in "connection pool timeout", although
// the first try was sent and runs when the node resumes.
func TestRetriedAcquireEndingInPoolTimeoutCleanedUp(t *testing.T) {
	s := dlocktest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1, ReadTimeout: 200 * time.Millisecond,
		PoolTimeout: 100 * time.Millisecond, MaxRetries: 1, MinRetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond})
	defer c.Close()
	l := newLocker(t, c)
	warm, err := l.TryAcquire(ctx(t), "warm")
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx(t))
	thaw := freeze(t, s)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 { // other calls of the process keep the one connection busy
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.Get(context.Background(), "other")
			}
		}()
	}
	if k, err := l.TryAcquire(ctx(t), "late"); err == nil {
		k.Release(ctx(t))
		t.Fatal("acquired on a frozen node")
	}
	close(stop)
	wg.Wait()
	thaw()
	admin := s.Client()
	defer admin.Close()
	waitFor(t, func() bool { return admin.Exists(ctx(t), "dlock:{late}").Val() == 0 },
		"the key of the retried acquisition to be cleaned up")
}

// Found in review: Status and ForceRelease ignored a refused prefix and acted
// on the default one: a force release deleted another application's lock.
func TestAdminRefusesBadPrefix(t *testing.T) {
	l, s, _ := single(t)
	k, err := l.TryAcquire(ctx(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	admin := newLocker(t, s.Client(), dlock.WithPrefix("{app}:"))
	if _, err := admin.Status(ctx(t), "job"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Status with a braced prefix: %v, want ErrInvalid", err)
	}
	if n, err := admin.ForceRelease(ctx(t), "job"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("ForceRelease with a braced prefix: deleted on %d node(s), %v; want ErrInvalid", n, err)
	}
	if err := k.Extend(ctx(t), 30*time.Second); err != nil {
		t.Errorf("the lock under the default prefix was touched: %v", err)
	}
}

// Found in review: Extend with a context that had already ended sent
// nothing, but counted as an unconfirmed Extend and capped the lock.
func TestExtendWithEndedContext(t *testing.T) {
	l, _, _ := single(t)
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		k, err := l.TryAcquire(ctx(t), "cancelled")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Extend(cctx, 200*time.Millisecond); !errors.Is(err, context.Canceled) {
			t.Errorf("try %d: Extend with a cancelled ctx: %v, want context.Canceled", i, err)
		}
		if left := time.Until(k.ValidUntil()); left < 10*time.Second {
			t.Fatalf("try %d: an Extend that sent nothing cut the validity of a 30s lock to %s", i, left.Round(time.Millisecond))
		}
		if err := k.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// Found in review: a nil *redis.Client panicked in NewRedlock.
func TestTypedNilClient(t *testing.T) {
	var c *redis.Client
	if _, err := dlock.NewRedlock([]redis.UniversalClient{c}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewRedlock with a nil *redis.Client: %v, want ErrInvalid", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "dlock: New called with a nil client") {
			t.Errorf("New with a nil *redis.Client: panic %v, want the package's message", r)
		}
	}()
	dlock.New(c)
}
