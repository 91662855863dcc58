package dlock_test

// Regression tests of the liveness defects of issue 17: long-lived leaders,
// graceful shutdowns that stall the next waiter, a command delayed on its own
// connection, and failures that were silent. Each one failed on the code
// before its fix.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// Item 1: a leadership held longer than the fence retention keeps its
// counter (renewals refresh it), and Status, Leader and a new Observe report
// the leader's real term, also after the counter was deleted (an eviction),
// and the count of terms (the leader keeps it: see
// TestTransitionsOutliveRetention).
func TestLivenessFenceOutlivesRetention(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := newLocker(t, c, dlock.WithFenceRetention(300*time.Millisecond))
	k, err := l.Campaign(ctx(t), "long", "node-a", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	want := dlock.Leader{Value: "node-a", Term: k.Fence(), Transitions: 1}
	check := func(when string) {
		t.Helper()
		if ld, err := l.Leader(ctx(t), "long"); err != nil || ld != want {
			t.Errorf("%s: Leader = %v, %v; want %v", when, ld, err, want)
		}
		if st, err := l.Status(ctx(t), "long"); err != nil || st.Fence != k.Fence() {
			t.Errorf("%s: Status.Fence = %d, %v; want %d", when, st.Fence, err, k.Fence())
		}
		octx, cancel := context.WithCancel(ctx(t))
		defer cancel()
		if first := <-l.Observe(octx, "long"); first != want {
			t.Errorf("%s: a new Observe sent %v first, want %v", when, first, want)
		}
	}
	// Several retentions and TTLs pass while the lock is renewed: the
	// passing of time is the scenario, not a synchronisation.
	time.Sleep(1500 * time.Millisecond)
	select {
	case <-k.Lost():
		t.Fatal("the leadership was lost")
	default:
	}
	if n := c.Exists(ctx(t), "dlock:{long}:fence").Val(); n != 1 {
		t.Error("the fence counter expired while its lock was held")
	}
	check("after the retention")
	// The counter lost some other way (an eviction): the holder's fence is
	// still reported.
	c.Del(ctx(t), "dlock:{long}:fence")
	check("after the counter was deleted")
	// The next holder's fence is still larger.
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	k2, err := l.Campaign(ctx(t), "long", "node-b", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Release(ctx(t))
	if k2.Fence() <= k.Fence() {
		t.Errorf("next term %d, not above %d", k2.Fence(), k.Fence())
	}
}

// Item 1 for a semaphore and a plain lock: renewals keep the counter.
func TestLivenessFenceKeptByRenewals(t *testing.T) {
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			s := dlocktest.Start(t)
			c := s.Client()
			defer c.Close()
			l := newLocker(t, c, dlock.WithFenceRetention(200*time.Millisecond))
			k, err := l.TryAcquire(ctx(t), "kept", dlock.WithTTL(500*time.Millisecond), dlock.WithLimit(limit))
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(ctx(t))
			time.Sleep(1200 * time.Millisecond) // retentions pass while renewed
			if pttl := c.PTTL(ctx(t), "dlock:{kept}:fence").Val(); pttl <= 0 {
				t.Errorf("fence counter PTTL %v while its lock is held", pttl)
			}
			if st, err := l.Status(ctx(t), "kept"); err != nil || st.Fence < k.Fence() {
				t.Errorf("Status.Fence = %d, %v; want at least %d", st.Fence, err, k.Fence())
			}
		})
	}
}

// Item 2: on a Redlock, a node that ran a leader's acquisition late counts
// from its own, higher counter; reads must report the term the leader holds,
// and an observer that started then must follow the next leader.
func TestLivenessObserverAfterInflatedTerm(t *testing.T) {
	t.Parallel() // mostly waits (a failover, a freeze, validities): beside the other waiting tests
	servers := dlocktest.StartN(t, 3)
	clients := dlocktest.Clients(t, servers...)
	a, err := dlock.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Node 3's counter is far ahead (a node that counted while the others
	// did not): its late grant of A's campaign gets a larger fence than A's.
	const high = "5000000000000000000"
	if err := clients[2].Set(ctx(t), "dlock:{infl}:fence", high, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	thaw := freeze(t, servers[2])
	ka, err := a.Campaign(ctx(t), "infl", "A", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	thaw()
	waitFor(t, func() bool { return clients[2].Get(ctx(t), "dlock:{infl}").Val() == ka.Token() }, "the late grant on node 3")
	if ld, err := a.Leader(ctx(t), "infl"); err != nil || ld.Term != ka.Fence() {
		t.Errorf("Leader = %v, %v; want term %d (A's fence)", ld, err, ka.Fence())
	}
	obs, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	octx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch := obs.Observe(octx, "infl")
	if first := <-ch; first.Value != "A" {
		t.Fatalf("observer's first %v, want A", first)
	}
	// Node 3 away again: B's term comes from nodes 1 and 2, below node 3's
	// counter.
	thaw = freeze(t, servers[2])
	defer thaw() // before the Lockers close
	if err := ka.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	b, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kb, err := b.Campaign(ctx(t), "infl", "B", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Release(ctx(t))
	if kb.Fence() <= ka.Fence() {
		t.Fatalf("B's term %d not above A's %d", kb.Fence(), ka.Fence())
	}
	deadline := time.After(10 * time.Second) // B's lock lives 2s: a read would find it by then
	for {
		select {
		case ld := <-ch:
			if ld.Value == "B" {
				if ld.Term != kb.Fence() {
					t.Errorf("observer reports B at term %d, want %d", ld.Term, kb.Fence())
				}
				return
			}
		case <-deadline:
			t.Fatal("the observer did not follow B")
		}
	}
}

// Item 3: a Close between Acquire's grant and Campaign's announcement must
// not leave observers with a leader that no longer holds the lock.
func TestLivenessCloseDuringCampaign(t *testing.T) {
	s := dlocktest.Start(t)
	obs := newLocker(t, s.Client())
	octx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch := obs.Observe(octx, "cc")
	if first := <-ch; first != (dlock.Leader{}) {
		t.Fatalf("first %v, want vacant", first)
	}
	granted, proceed := make(chan struct{}), make(chan struct{})
	block := hookFunc(func(_ context.Context, e dlock.Event) {
		if e.Kind == dlock.EventAcquired && e.Key == "cc" {
			close(granted)
			<-proceed
		}
	})
	c := s.Client()
	defer c.Close()
	l := dlock.New(c, dlock.WithHook(startHook{newRecorder(), block}))
	done := make(chan error, 1)
	go func() {
		k, err := l.Campaign(ctx(t), "cc", "closing", dlock.WithTTL(time.Minute))
		if err == nil {
			select {
			case <-k.Lost():
			default:
				err = errors.New("Campaign returned a leadership that is not lost after Close")
			}
		}
		done <- err
	}()
	<-granted
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	t.Logf("Campaign: %v", <-done)
	// A real leader next: once the observer reports it, it has seen every
	// announcement made before.
	b := newLocker(t, s.Client())
	kb, err := b.Campaign(ctx(t), "cc", "real", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Release(ctx(t))
	for ld := range ch {
		if ld.Value == "closing" {
			t.Errorf("the observer reported %v, a leader whose Locker was closed before it was announced", ld)
		}
		if ld.Value == "real" {
			break
		}
	}
}

// Item 4: Close while Acquire calls wait removes their registrations from
// the waiting set before it returns.
func TestLivenessCloseRemovesWaiters(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := newLocker(t, c)
	k, err := holder.TryAcquire(ctx(t), "cw")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	const n = 10
	var waiters []*dlock.Locker
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		w := dlock.New(s.Client())
		waiters = append(waiters, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := w.Acquire(ctx(t), "cw")
			if !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("Acquire on a closed Locker: %v", err)
			}
		}()
	}
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{cw}:waiters").Val() == n }, "the waiters to register")
	var cw sync.WaitGroup
	for _, w := range waiters {
		cw.Add(1)
		go func() {
			defer cw.Done()
			if err := w.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}()
	}
	cw.Wait()
	if left := c.ZCard(ctx(t), "dlock:{cw}:waiters").Val(); left != 0 {
		t.Errorf("%d of %d closed Lockers' registrations left in the waiting set", left, n)
	}
	if left := c.HLen(ctx(t), "dlock:{cw}:wexp").Val(); left != 0 {
		t.Errorf("%d of %d closed Lockers' leases left", left, n)
	}
	wg.Wait()
}

// Item 5: two gracefully closed waiters ahead of a live one do not stall it.
func TestLivenessClosedWaitersAhead(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := newLocker(t, c)
	k, err := holder.TryAcquire(ctx(t), "ahead")
	if err != nil {
		t.Fatal(err)
	}
	var closing []*dlock.Locker
	for i := 0; i < 2; i++ {
		w := dlock.New(s.Client())
		closing = append(closing, w)
		go w.Acquire(ctx(t), "ahead")
		waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{ahead}:waiters").Val() == int64(i+1) }, "a waiter to register")
	}
	live := newLocker(t, s.Client())
	got := queued(t, live, c, "ahead", 3)
	for _, w := range closing {
		w.Close()
	}
	handoff(t, k, got, "the live waiter behind two closed ones")
}

// Item 5: registrations of processes that are gone without leaving the
// queue (killed: nothing listens on their inbox) are passed over by a
// release, which wakes the next live waiter.
func TestLivenessDeadRegistrationsPassedOver(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := newLocker(t, c)
	k, err := holder.TryAcquire(ctx(t), "dead")
	if err != nil {
		t.Fatal(err)
	}
	// Two registrations of a Locker that no longer exists, first in line,
	// with leases that have not run out.
	lease := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	for i, m := range []string{"gone1:1:dead", "gone2:1:dead"} {
		c.ZAdd(ctx(t), "dlock:{dead}:waiters", redis.Z{Score: float64(1 + i), Member: m})
		c.HSet(ctx(t), "dlock:{dead}:wexp", m, lease)
	}
	live := newLocker(t, s.Client())
	got := queued(t, live, c, "dead", 3)
	handoff(t, k, got, "the live waiter behind two dead registrations")
}

// Item 6: an acquisition held up on its own connection (a latency spike on
// one link, while new connections get through) that runs after the
// clean-up must not leave the key held by its dead token; also when the
// Locker is closed right after the failed attempt (as `dlock run` does).
func TestLivenessLateAcquireOnDelayedConnection(t *testing.T) {
	for _, closeAfter := range []bool{false, true} {
		t.Run(fmt.Sprintf("close %v", closeAfter), func(t *testing.T) {
			if closeAfter && !dlock.DefaultClientsInline() {
				// The held-up call runs on a helper goroutine, through the
				// node's batcher, which holds the commands sent after it
				// until its socket deadline (the client's ReadTimeout, 3s):
				// Close does not wait that long for the clean-up (see
				// Locker.Close).
				t.Skip("go-redis without hook-keeping WithTimeout copies: the clean-up waits behind the held-up call")
			}
			s := dlocktest.Start(t)
			admin := s.Client()
			defer admin.Close()
			p, err := dlocktest.NewProxy(s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// One connection open when the delay starts (the pool may open more).
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 2, ClientName: "delayed"})
			defer c.Close()
			l := newLocker(t, c)
			// Load the scripts (a late EVALSHA of an unknown script would
			// fail), on the one pooled connection.
			k, err := l.TryAcquire(ctx(t), "delayed")
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			before := clientIDs(t, admin)
			p.DelayOpen(3 * time.Second)
			_, err = l.TryAcquire(ctx(t), "delayed", dlock.WithTTL(10*time.Second))
			if err == nil {
				t.Fatal("TryAcquire through a delayed connection succeeded")
			}
			t.Logf("TryAcquire: %v", err)
			if closeAfter {
				if err := l.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			// Wait for the delayed command to reach Redis and run there: the
			// proxy delivers it, then closes the connection (go-redis gave up
			// on it), and Redis drops the connection once it has run what it
			// read.
			waitFor(t, func() bool { return p.Delayed() == 0 }, "the delayed command to be delivered")
			waitFor(t, func() bool {
				now := clientIDs(t, admin)
				for id := range before {
					if now[id] {
						return false
					}
				}
				return true
			}, "the delayed connection to be closed")
			other := newLocker(t, s.Client())
			deadline := time.Now().Add(time.Second) // far less than the 10s TTL the late command sets
			for {
				k, err := other.TryAcquire(ctx(t), "delayed")
				if err == nil {
					k.Release(ctx(t))
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the delayed acquisition ran: %v (the key holds %q for %v)", err,
						admin.Get(ctx(t), "dlock:{delayed}").Val(), admin.PTTL(ctx(t), "dlock:{delayed}").Val())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// Item 1 for a semaphore: a renewal that finds the counter lost restores it
// above every fence issued, not just above its own permit's, which may be
// below another permit's.
func TestLivenessSemaphoreCounterRestored(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := newLocker(t, c)
	opts := []dlock.LockOption{dlock.WithLimit(3), dlock.WithTTL(10 * time.Second), dlock.WithAutoRenew(false)}
	a, err := l.TryAcquire(ctx(t), "sem", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx(t))
	// b in the server's next second: its fence is that second's floor,
	// above a's.
	t0 := c.Time(ctx(t)).Val()
	waitFor(t, func() bool {
		now := c.Time(ctx(t)).Val()
		return now.Unix() > t0.Unix() && now.Nanosecond() < 300e6
	}, "the server's next second")
	b, err := l.TryAcquire(ctx(t), "sem", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx(t))
	c.Del(ctx(t), "dlock:{sem}:fence") // an eviction
	if err := a.Extend(ctx(t), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	k, err := l.TryAcquire(ctx(t), "sem", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	if k.Fence() <= b.Fence() {
		t.Errorf("fences a=%d b=%d, then %d: not above b's, issued before", a.Fence(), b.Fence(), k.Fence())
	}
}

// clientIDs returns the ids of the connections named "delayed" to the
// server of admin.
func clientIDs(t *testing.T, admin *redis.Client) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, line := range strings.Split(admin.ClientList(ctx(t)).Val(), "\n") {
		f := strings.Fields(line + " x")
		if id, ok := strings.CutPrefix(f[0], "id="); ok && strings.Contains(line, " name=delayed ") {
			ids[id] = true
		}
	}
	return ids
}

// Item 7: a hook that panics between the grant and the return to the
// caller, recovered by the caller, must not leave a lock that is renewed
// forever with nobody to release it.
func TestLivenessHookPanicReleases(t *testing.T) {
	for _, kind := range []dlock.EventKind{dlock.EventAttempt, dlock.EventAcquired} {
		t.Run(kind.String(), func(t *testing.T) {
			s := dlocktest.Start(t)
			panicky := hookFunc(func(_ context.Context, e dlock.Event) {
				if e.Kind == kind && e.Err == nil {
					panic("hook")
				}
			})
			c := s.Client()
			defer c.Close()
			l := newLocker(t, c, dlock.WithHook(startHook{newRecorder(), panicky}))
			ran := false
			func() {
				defer func() {
					if r := recover(); r != "hook" {
						t.Errorf("recovered %v, want the hook's panic", r)
					}
				}()
				_ = l.Do(ctx(t), "panicky", func(context.Context) error { ran = true; return nil }, dlock.WithTTL(300*time.Millisecond))
			}()
			if ran {
				t.Error("Do's function ran although the hook panicked")
			}
			other := newLocker(t, s.Client())
			if k, err := other.TryAcquire(ctx(t), "panicky"); err != nil {
				t.Errorf("after the panic: %v; the lock was left held", err)
			} else {
				k.Release(ctx(t))
			}
		})
	}
}

// Item 8: an observer whose subscription to the leader channel the ACL
// refuses says so (EventNodeError matching ErrMisconfigured, logged at
// Error) and still follows the election, by reading it.
func TestLivenessObserveRefusedChannel(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	runLine(t, admin, "ACL SETUSER noleader on >pw resetkeys ~dlock:* resetchannels &dlock:inbox:* -@all +evalsha +eval +subscribe +ping +get +set +del +incr +pexpire +pttl +time +zscore +hexists +zadd +hset +zrem +hdel +zpopmin +hget +publish +zrange +zcard +hgetall +type +pexpireat +zcount +zremrangebyscore +zrangebyscore +info")
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "noleader", Password: "pw"})
	defer c.Close()
	rec := newRecorder()
	var buf bytes.Buffer
	var mu sync.Mutex
	logs := &lockedWriter{w: &buf, mu: &mu}
	l := newLocker(t, c, dlock.WithHook(rec), dlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	octx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch := l.Observe(octx, "refused")
	if first := <-ch; first != (dlock.Leader{}) {
		t.Fatalf("first %v, want vacant", first)
	}
	rec.await(t, "a node error for the refused subscription", func() bool {
		for _, e := range rec.of(dlock.EventNodeError) {
			if errors.Is(e.Err, dlock.ErrMisconfigured) {
				return true
			}
		}
		return false
	})
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "election's channel") {
		t.Errorf("the refusal was not logged at Error: %q", out)
	}
	cand := newLocker(t, admin)
	k, err := cand.Campaign(ctx(t), "refused", "leader", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	select {
	case ld := <-ch:
		if ld.Value != "leader" {
			t.Errorf("observer: %v, want the leader", ld)
		}
	case <-time.After(5 * time.Second): // far below the 15s and one TTL an observer otherwise waits
		t.Error("an observer without the leader channel did not report the new leader")
	}
}

// TestLivenessCloseEndsObservers: Close returns once its observers have
// ended (their channels closed, their pub/sub connections given back), so
// that closing the client right after Close is clean; also for an
// observer whose context ended just before Close.
func TestLivenessCloseEndsObservers(t *testing.T) {
	for _, cancelFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel_first_%v", cancelFirst), func(t *testing.T) {
			s := dlocktest.Start(t)
			c := s.Client()
			defer c.Close()
			l := dlock.New(c)
			octx, cancel := context.WithCancel(ctx(t))
			defer cancel()
			var chans []<-chan dlock.Leader
			for range 5 {
				ch := l.Observe(octx, "observed")
				<-ch // the current leader (none)
				chans = append(chans, ch)
			}
			if cancelFirst {
				cancel()
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			for i, ch := range chans {
				select {
				case _, ok := <-ch:
					if ok {
						t.Errorf("observer %d: a value after Close", i)
					}
				default:
					t.Errorf("observer %d: its channel is still open after Close returned", i)
				}
			}
		})
	}
}
