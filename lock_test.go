package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// exclusion runs workers goroutines spread over the lockers, each doing
// rounds non-atomic read-modify-writes of a shared counter under the lock,
// and checks that no two critical sections overlapped, that no update was
// lost and that fences strictly increase in the order the lock was held.
func exclusion(t *testing.T, lockers []*dlock.Locker, workers, rounds int) {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	var (
		counter   int // deliberately not atomic: the lock must protect it
		inside    atomic.Int32
		overlaps  atomic.Int32
		fenceMu   sync.Mutex
		lastFence uint64
		fenceErrs []string
	)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			for r := 0; r < rounds; r++ {
				k, err := l.Acquire(ctx, "counter")
				if err != nil {
					t.Errorf("worker %d: Acquire: %v", w, err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				fenceMu.Lock()
				if k.Fence() <= lastFence {
					fenceErrs = append(fenceErrs, fmt.Sprintf("fence %d after %d", k.Fence(), lastFence))
				}
				lastFence = k.Fence()
				fenceMu.Unlock()
				v := counter
				time.Sleep(100 * time.Microsecond) // widen the race window
				counter = v + 1
				inside.Add(-1)
				if err := k.Release(ctx); err != nil {
					t.Errorf("worker %d: Release: %v", w, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping critical sections", n)
	}
	if counter != workers*rounds {
		t.Errorf("counter = %d, want %d (lost updates)", counter, workers*rounds)
	}
	if len(fenceErrs) > 0 {
		t.Errorf("fences not strictly increasing: %v", fenceErrs)
	}
}

// lockers makes n Lockers (standing for n processes), each on clients of its
// own from newClients, all closed in the test's Cleanup.
func lockers(t *testing.T, n int, newClients func() []redis.UniversalClient) []*dlock.Locker {
	t.Helper()
	var ls []*dlock.Locker
	for i := 0; i < n; i++ {
		clients := newClients()
		l, err := dlock.NewRedlock(clients)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			l.Close()
			for _, c := range clients {
				c.Close()
			}
		})
		ls = append(ls, l)
	}
	return ls
}

func TestMutualExclusion(t *testing.T) {
	s := dlocktest.Start(t)
	exclusion(t, lockers(t, 3, func() []redis.UniversalClient {
		return []redis.UniversalClient{s.Client()}
	}), 16, 15)
}

func TestMutualExclusionRedlock(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	exclusion(t, lockers(t, 2, func() []redis.UniversalClient {
		return dlocktest.Clients(t, servers...)
	}), 16, 8)
}

func TestMutualExclusionCluster(t *testing.T) {
	cl := dlocktest.StartCluster(t, 3)
	exclusion(t, lockers(t, 2, func() []redis.UniversalClient {
		return []redis.UniversalClient{cl.Client()}
	}), 16, 8)
}

func TestTryAcquireHeld(t *testing.T) {
	l, s, _ := single(t)
	ctx := ctxTimeout(t, 10*time.Second)
	k, err := l.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	other := dlock.New(s.Client())
	defer other.Close()
	if _, err := other.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held key: err = %v, want ErrNotAcquired", err)
	}
	// The same Locker is no exception: a lock is not reentrant.
	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire by the same Locker: err = %v, want ErrNotAcquired", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k2, err := other.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if k2.Fence() <= k.Fence() {
		t.Errorf("fence %d after %d", k2.Fence(), k.Fence())
	}
	k2.Release(ctx)
}

func TestAcquireDeadline(t *testing.T) {
	l, s, c := single(t)
	k, err := l.Acquire(ctx(t), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	other := dlock.New(s.Client())
	defer other.Close()
	dctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = other.Acquire(dctx, "busy")
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Acquire returned %s after its 300ms deadline", el)
	}
	// Nothing is left behind: the waiter's registration is gone.
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{busy}:waiters").Val() == 0 }, "waiter registration removed")
	if v := c.Get(ctx(t), "dlock:{busy}").Val(); v != k.Token() {
		t.Errorf("lock value %q, want the holder's token", v)
	}
}

func TestAcquireCancelled(t *testing.T) {
	l, s, _ := single(t)
	k, err := l.Acquire(ctx(t), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	other := dlock.New(s.Client())
	defer other.Close()
	cctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := other.Acquire(cctx, "busy")
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotAcquired and Canceled", err)
	}
}

// TestWakeOnRelease checks that a waiter is woken by the release itself, well
// before any fallback timer (the first fallback sleep is at least 11s).
func TestWakeOnRelease(t *testing.T) {
	l, s, _ := single(t)
	other := dlock.New(s.Client())
	defer other.Close()
	for i := 0; i < 5; i++ {
		k, err := l.Acquire(ctx(t), "handoff")
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, other, "handoff")
		// Release only once the waiter is registered in Redis.
		waitFor(t, func() bool {
			st, _ := l.Status(ctx(t), "handoff")
			return st.Waiters > 0
		}, "waiter registered")
		handoff(t, k, got, "the waiter")
	}
}

// TestWakeOne checks the cost of waiting: with several processes contending,
// a release leads to about one attempt, not one per waiting process.
func TestWakeOne(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	const procs, rounds = 8, 20
	ls := lockers(t, procs, func() []redis.UniversalClient { return []redis.UniversalClient{s.Client()} })
	if err := admin.ConfigResetStat(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var acquisitions atomic.Int64
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				k, err := l.Acquire(ctx(t), "hot")
				if err != nil {
					t.Error(err)
					return
				}
				acquisitions.Add(1)
				time.Sleep(time.Millisecond)
				k.Release(ctx(t))
			}
		}()
	}
	wg.Wait()
	calls := scriptCalls(t, admin)
	perAcq := float64(calls) / float64(acquisitions.Load())
	t.Logf("%d script calls for %d acquisitions: %.2f per acquisition", calls, acquisitions.Load(), perAcq)
	// Steady state is 3 (failed attempt that registers, woken attempt,
	// release); each process also pays one extra attempt when it first
	// subscribes. A broadcast wake-up would cost about procs per release.
	if perAcq > 4.5 {
		t.Errorf("%.2f script calls per acquisition, want ≤ 4.5", perAcq)
	}
}

// scriptCalls returns the number of EVALSHA and EVAL calls the server ran
// since its statistics were reset.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	stats, err := c.Info(ctx(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, name := range []string{"evalsha", "eval"} {
		var calls int64
		if i := indexOf(stats, "cmdstat_"+name+":calls="); i >= 0 {
			fmt.Sscanf(stats[i+len("cmdstat_"+name+":calls="):], "%d", &calls)
		}
		total += calls
	}
	return total
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestFixedLeaseExpires(t *testing.T) {
	l, s, c := single(t)
	const ttl = 200 * time.Millisecond
	k, err := l.Acquire(ctx(t), "lease", dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire for an expired fixed lease")
	}
	// Wait until Redis expired the key, then let someone else take it.
	waitFor(t, func() bool { return c.Exists(ctx(t), "dlock:{lease}").Val() == 0 }, "key expired")
	other := dlock.New(s.Client())
	defer other.Close()
	k2, err := other.TryAcquire(ctx(t), "lease")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx(t), time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Extend: err = %v, want ErrNotHeld", err)
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Release: err = %v, want ErrNotHeld", err)
	}
	if v := c.Get(ctx(t), "dlock:{lease}").Val(); v != k2.Token() {
		t.Errorf("the new owner's lock was touched: value %q", v)
	}
	if err := k2.Release(ctx(t)); err != nil {
		t.Errorf("new owner's Release: %v", err)
	}
}

func TestStaleOwnerCannotTouchNewOwner(t *testing.T) {
	l, _, c := single(t)
	k, err := l.Acquire(ctx(t), "row", dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	// The key vanishes behind the owner's back and another owner takes it.
	c.Del(ctx(t), "dlock:{row}")
	k2, err := l.TryAcquire(ctx(t), "row")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx(t), time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Extend: err = %v, want ErrNotHeld", err)
	}
	select {
	case <-k.Lost():
	default:
		t.Error("Lost not closed after Extend found the lock taken")
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Release: err = %v, want ErrNotHeld", err)
	}
	if v := c.Get(ctx(t), "dlock:{row}").Val(); v != k2.Token() {
		t.Errorf("new owner's lock value %q, want its token", v)
	}
	if err := k2.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := k2.Release(ctx(t)); err != nil {
		t.Errorf("second Release after success: %v, want nil", err)
	}
}

func TestAutoRenew(t *testing.T) {
	l, _, c := single(t)
	const ttl = 500 * time.Millisecond // renewed every fraction of it: short, but not so short that a loaded CI machine starves the renewals
	k, err := l.Acquire(ctx(t), "renewed", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// Hold it for several TTLs: it must still be ours, and never lost.
	deadline := time.After(6 * ttl)
	for done := false; !done; {
		select {
		case <-k.Lost():
			t.Fatal("auto-renewed lock was lost")
		case <-deadline:
			done = true
		}
	}
	if v := c.Get(ctx(t), "dlock:{renewed}").Val(); v != k.Token() {
		t.Fatalf("lock value %q after 6 TTLs, want our token", v)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestExtend(t *testing.T) {
	l, _, c := single(t)
	k, err := l.Acquire(ctx(t), "ext", dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	if p := c.PTTL(ctx(t), "dlock:{ext}").Val(); p < 30*time.Second {
		t.Errorf("PTTL after Extend(1m) = %s", p)
	}
	if time.Until(k.ValidUntil()) < 30*time.Second {
		t.Errorf("ValidUntil not moved by Extend")
	}
	if err := k.Extend(ctx(t), 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Extend(0): err = %v, want ErrInvalid", err)
	}
	k.Release(ctx(t))
	if err := k.Extend(ctx(t), time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after Release: err = %v, want ErrNotHeld", err)
	}
}

func TestLostWhenDeleted(t *testing.T) {
	l, _, c := single(t)
	k, err := l.Acquire(ctx(t), "victim", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx(t), "dlock:{victim}")
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire after the key was deleted")
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after loss: err = %v, want ErrNotHeld", err)
	}
}

func TestDoLost(t *testing.T) {
	l, _, c := single(t)
	fnErr := errors.New("fn failed")
	err := l.Do(ctx(t), "do", func(ctx context.Context) error {
		c.Del(ctx, "dlock:{do}")
		<-ctx.Done() // cancelled when the renewal finds the lock gone
		if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(ctx))
		}
		return fnErr
	}, dlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, fnErr) {
		t.Fatalf("Do: err = %v, want ErrLockLost joined with fn's error", err)
	}
}

func TestDo(t *testing.T) {
	l, _, c := single(t)
	ran := false
	err := l.Do(ctx(t), "do", func(ctx context.Context) error {
		ran = true
		if c.Exists(ctx, "dlock:{do}").Val() != 1 {
			t.Error("lock not held inside Do")
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: err = %v, ran = %v", err, ran)
	}
	if c.Exists(ctx(t), "dlock:{do}").Val() != 0 {
		t.Error("lock not released after Do")
	}
	fnErr := errors.New("boom")
	if err := l.Do(ctx(t), "do", func(context.Context) error { return fnErr }); !errors.Is(err, fnErr) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do: err = %v, want fn's error only", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic in fn not propagated")
			}
		}()
		l.Do(ctx(t), "do", func(context.Context) error { panic("fn panicked") })
	}()
	if c.Exists(ctx(t), "dlock:{do}").Val() != 0 {
		t.Error("lock not released after fn panicked")
	}
}

// TestLostBeforeExpiryFrozen freezes the only Redis while the lock is held:
// renewals stop being confirmed and Lost must fire before the key can have
// expired in Redis. The key's real expiry is at least the send time of the
// last successful acquire or renew command plus the TTL; a client hook
// records those send times.
func TestLostBeforeExpiryFrozen(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	rec := &sendRecorder{}
	c.AddHook(rec)
	l := dlock.New(c)
	defer l.Close()
	const ttl = 2 * time.Second
	k, err := l.Acquire(ctx(t), "frozen", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// Let at least one renewal happen, then freeze.
	waitFor(t, func() bool { return rec.successes() >= 2 }, "a renewal")
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer s.Thaw()
	select {
	case <-k.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("Lost did not fire while Redis was frozen")
	}
	lostAt := time.Now()
	expiry := rec.lastSuccess().Add(ttl)
	if !lostAt.Before(expiry) {
		t.Errorf("Lost fired at %s, after the key could have expired (%s)", lostAt.Format(time.StampMicro), expiry.Format(time.StampMicro))
	}
	t.Logf("Lost fired %s before the earliest possible expiry", expiry.Sub(lostAt))

	// The renewal that the frozen server received runs when it thaws and
	// extends the key by a whole TTL; since the holder was told it lost the
	// lock, that late renewal must be undone rather than keep the next
	// owner waiting.
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	for c.Exists(ctx(t), "dlock:{frozen}").Val() == 1 {
		if time.Since(thawed) > ttl/2 {
			t.Fatalf("the lost lock's key is still there %s after the thaw (PTTL %s)", time.Since(thawed), c.PTTL(ctx(t), "dlock:{frozen}").Val())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sendRecorder is a go-redis hook that records when each script call that
// succeeded was sent.
type sendRecorder struct {
	mu   sync.Mutex
	n    int
	last time.Time
}

func (r *sendRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *sendRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (r *sendRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			if v, ok := cmd.(*redis.Cmd); ok && isSuccess(v.Val()) {
				r.mu.Lock()
				r.n++
				r.last = sent
				r.mu.Unlock()
			}
		}
		return err
	}
}

func isSuccess(v any) bool {
	switch x := v.(type) {
	case int64:
		return x == 1
	case []any:
		return len(x) > 0 && x[0] == int64(1)
	}
	return false
}

func (r *sendRecorder) successes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *sendRecorder) lastSuccess() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// TestRetriedAcquire replays the acquire command, as go-redis does when the
// first reply is lost on the network: the owner must not lock itself out,
// and the fence must not be incremented twice.
func TestRetriedAcquire(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	c.AddHook(replayFirstScript{})
	l := dlock.New(c)
	defer l.Close()
	admin := s.Client()
	defer admin.Close()
	// A counter ahead of the clock, so that the next fence is counter+1.
	admin.Set(ctx(t), "dlock:{retried}:fence", "5000000000000041", 0)
	k, err := l.TryAcquire(ctx(t), "retried")
	if err != nil {
		t.Fatalf("TryAcquire with a replayed command: %v", err)
	}
	if k.Fence() != 5000000000000042 {
		t.Errorf("fence = %d, want 5000000000000042 (the replay must not increment it again)", k.Fence())
	}
	if v := admin.Get(ctx(t), "dlock:{retried}:fence").Val(); v != "5000000000000042" {
		t.Errorf("fence counter = %s, want 5000000000000042", v)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// replayFirstScript runs every script command twice and keeps the second
// reply, as a retry after a lost reply would.
type replayFirstScript struct{}

func (replayFirstScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (replayFirstScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (replayFirstScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func TestScriptsReloadedAfterFlush(t *testing.T) {
	l, _, c := single(t)
	k, err := l.Acquire(ctx(t), "flush")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	// Status reads the server's time with a script too (time.lua): a
	// semaphore's permits need it.
	p, err := l.Acquire(ctx(t), "flush", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx(t))
	if err := c.ScriptFlush(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if st, err := l.Status(ctx(t), "flush"); err != nil || len(st.Permits) != 1 || st.Permits[0].TTL <= 0 {
		t.Fatalf("Status after SCRIPT FLUSH: %+v, %v", st, err)
	}
}

func TestWaiterGivesUpHandsOn(t *testing.T) {
	// A waiter that is woken but has given up must not stall the next one.
	l, s, _ := single(t)
	k, err := l.Acquire(ctx(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	quitter := dlock.New(s.Client())
	defer quitter.Close()
	patient := dlock.New(s.Client())
	defer patient.Close()
	qctx, qcancel := context.WithCancel(context.Background())
	qerr := make(chan error, 1)
	go func() { _, err := quitter.Acquire(qctx, "q"); qerr <- err }()
	waitFor(t, func() bool { st, _ := l.Status(ctx(t), "q"); return st.Waiters == 1 }, "first waiter registered")
	got := acquireAsync(t, patient, "q")
	waitFor(t, func() bool { st, _ := l.Status(ctx(t), "q"); return st.Waiters == 2 }, "second waiter registered")
	qcancel()
	if err := <-qerr; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("quitter: %v", err)
	}
	handoff(t, k, got, "the second waiter")
}

func TestLocalQueue(t *testing.T) {
	// Many goroutines of one Locker waiting for one key: one registration in
	// Redis, all served.
	l, _, _ := single(t)
	k, err := l.Acquire(ctx(t), "local")
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var wg sync.WaitGroup
	var got atomic.Int32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := l.Acquire(ctx(t), "local")
			if err != nil {
				t.Error(err)
				return
			}
			got.Add(1)
			k.Release(ctx(t))
		}()
	}
	waitFor(t, func() bool { st, _ := l.Status(ctx(t), "local"); return st.Waiters == 1 }, "one registration")
	st, _ := l.Status(ctx(t), "local")
	if st.Waiters != 1 {
		t.Errorf("%d registrations for one Locker, want 1", st.Waiters)
	}
	k.Release(ctx(t))
	wg.Wait()
	if got.Load() != n {
		t.Errorf("%d of %d waiters acquired", got.Load(), n)
	}
}

func TestClose(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	k, err := l.Acquire(ctx(t), "closing", dlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	other := dlock.New(c)
	defer other.Close()
	k2, err := other.Acquire(ctx(t), "other-held")
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Release(ctx(t))
	waiting := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx(t), "other-held"); waiting <- err }()
	waitFor(t, func() bool { st, _ := other.Status(ctx(t), "other-held"); return st.Waiters == 1 }, "waiter registered")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Acquire(ctx(t), "x"); !errors.Is(err, dlock.ErrClosed) || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Acquire after Close: %v", err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, dlock.ErrClosed) || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("waiting Acquire after Close: %v, want ErrClosed (and not ErrNotAcquired)", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("waiting Acquire did not return after Close")
	}
	// Renewal stopped: the lock is lost when its validity runs out.
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire after Close stopped the renewal")
	}
	if c.Exists(ctx(t), "dlock:{closing}").Val() == 1 {
		// Still there within the TTL is fine; Release must still work.
		k.Release(ctx(t))
	}
}

func TestBadInput(t *testing.T) {
	l, s, _ := single(t)
	c := ctx(t)
	cases := []struct {
		name string
		err  error
	}{
		{"empty key", func() error { _, err := l.Acquire(c, ""); return err }()},
		{"empty key try", func() error { _, err := l.TryAcquire(c, ""); return err }()},
		{"zero TTL", func() error { _, err := l.Acquire(c, "k", dlock.WithTTL(0)); return err }()},
		{"negative TTL", func() error { _, err := l.TryAcquire(c, "k", dlock.WithTTL(-time.Second)); return err }()},
		{"TTL too short", func() error { _, err := l.Acquire(c, "k", dlock.WithTTL(time.Millisecond)); return err }()},
		{"nil fn", l.Do(c, "k", nil)},
		{"Do bad TTL", l.Do(c, "k", func(context.Context) error { return nil }, dlock.WithTTL(0))},
		{"no clients", func() error { _, err := dlock.NewRedlock(nil); return err }()},
		{"nil client in list", func() error {
			_, err := dlock.NewRedlock([]redis.UniversalClient{s.Client(), nil})
			return err
		}()},
		{"same client twice", func() error {
			cl := s.Client()
			defer cl.Close()
			_, err := dlock.NewRedlock([]redis.UniversalClient{cl, cl})
			return err
		}()},
		{"bad node timeout", func() error {
			_, err := dlock.NewRedlock([]redis.UniversalClient{s.Client()}, dlock.WithNodeTimeout(0))
			return err
		}()},
		{"status empty key", func() error { _, err := l.Status(c, ""); return err }()},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, dlock.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, tc.err)
		}
	}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("New(nil) did not panic")
			}
		}()
		dlock.New(nil)
	}()
	bad := dlock.New(s.Client(), dlock.WithNodeTimeout(-1))
	defer bad.Close()
	if _, err := bad.Acquire(c, "k"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Acquire on a Locker with a bad option: %v", err)
	}
}

func ctx(t *testing.T) context.Context { return ctxTimeout(t, 30*time.Second) }

// acquireAsync starts Acquire(key) on l and delivers the lock (nil on an
// error, which fails the test).
func acquireAsync(t *testing.T, l *dlock.Locker, key string, opts ...dlock.LockOption) <-chan *dlock.Lock {
	t.Helper()
	got := make(chan *dlock.Lock, 1)
	go func() {
		k, err := l.Acquire(ctx(t), key, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- k
	}()
	return got
}

// handoff releases k and checks that the waiter behind got acquires the lock
// within a second: woken by the release, not by a fallback timer (at least
// 11s). It then releases the waiter's lock.
func handoff(t *testing.T, k *dlock.Lock, got <-chan *dlock.Lock, who string) {
	t.Helper()
	start := time.Now()
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	k2 := <-got
	if el := time.Since(start); el > time.Second {
		t.Errorf("%s took %s to acquire after the release; it should be woken by it", who, el)
	}
	if k2 != nil {
		if err := k2.Release(ctx(t)); err != nil {
			t.Errorf("the waiter's Release: %v", err)
		}
	}
}

// acquiredWithin waits up to d for the acquisition behind got (see
// acquireAsync), failing the test with what if none came; it releases what
// came, and returns when it came.
func acquiredWithin(t *testing.T, got <-chan *dlock.Lock, d time.Duration, what string) time.Time {
	t.Helper()
	select {
	case k := <-got:
		at := time.Now()
		if k != nil {
			_ = k.Release(ctx(t))
		}
		return at
	case <-time.After(d):
		t.Fatal(what)
		return time.Time{}
	}
}

// waitFor polls cond (a test-side observation of Redis, not
// synchronisation of the code under test) until it holds or 10s pass.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	waitForWithin(t, 10*time.Second, cond, what)
}

// waitForWithin is waitFor with a limit of its own.
func waitForWithin(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAcquireUnreachable(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	s.Kill()
	_, err := l.TryAcquire(ctx(t), "down")
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &ne) {
		t.Fatalf("TryAcquire on a dead Redis: %v, want ErrUnavailable (not ErrNotAcquired) with a *NodeError", err)
	}
	dctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(dctx, "down")
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) {
		t.Fatalf("Acquire on a dead Redis: %v, want ErrUnavailable, DeadlineExceeded and the node error", err)
	}
	t.Log(err)
}

// TestDeadWaiterDoesNotStall registers a waiter that never comes (its process
// died without leaving the queue) ahead of a live one: the release wakes and
// reserves for the dead one, and the live one must stand in for it promptly,
// not after its fallback timer (at least 11s).
func TestDeadWaiterDoesNotStall(t *testing.T) {
	l, s, c := single(t)
	k, err := l.Acquire(ctx(t), "dead")
	if err != nil {
		t.Fatal(err)
	}
	// The dead waiter: first in the queue, with a live lease.
	now, err := c.Time(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	c.ZAdd(ctx(t), "dlock:{dead}:waiters", redis.Z{Score: 1, Member: "ghost"})
	c.HSet(ctx(t), "dlock:{dead}:wexp", "ghost", now.Add(time.Minute).UnixMilli())
	live := dlock.New(s.Client())
	defer live.Close()
	got := acquireAsync(t, live, "dead")
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{dead}:waiters").Val() == 2 }, "live waiter registered")
	handoff(t, k, got, "the live waiter, behind a dead one,")
}

// TestSentinel: a Locker on a Sentinel-managed master, through go-redis'
// FailoverClient.
func TestSentinel(t *testing.T) {
	master := dlocktest.Start(t)
	sentinel := dlocktest.StartSentinel(t, "dlockmaster", master)
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "dlockmaster",
		SentinelAddrs: []string{sentinel.Addr()},
	})
	defer c.Close()
	lockers := []*dlock.Locker{dlock.New(c), dlock.New(c)}
	for _, l := range lockers {
		defer l.Close()
	}
	exclusion(t, lockers, 8, 5)
}

// TestWakeAfterReconnect kills the waiter's pub/sub connection and releases
// the lock while it is down: the release's notification is lost, and the
// waiter must learn of it from its subscription's return, not from its
// fallback timer (at least 11s).
func TestWakeAfterReconnect(t *testing.T) {
	l, s, c := single(t)
	k, err := l.Acquire(ctx(t), "reconnect")
	if err != nil {
		t.Fatal(err)
	}
	waiter := dlock.New(s.Client())
	defer waiter.Close()
	got := acquireAsync(t, waiter, "reconnect")
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{reconnect}:waiters").Val() == 1 }, "waiter registered")
	if err := c.Do(ctx(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	at := acquiredWithin(t, got, 5*time.Second, "waiter not woken within 5s of a release made while its subscription was down")
	t.Logf("acquired %s after the release", at.Sub(start))
}

// TestHooksSeeEveryCommand: hooks added to the client before New see every
// command dlock sends, whatever the client's options (dlock calls a copy of
// a default client only if the copy keeps its hooks).
func TestHooksSeeEveryCommand(t *testing.T) {
	s := dlocktest.Start(t)
	for _, ctxTimeout := range []bool{false, true} {
		var sent dlocktest.Counter
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: ctxTimeout})
		c.AddHook(&sent)
		l := dlock.New(c)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					k, err := l.Acquire(ctx(t), fmt.Sprintf("hooks-%d", g))
					if err != nil {
						t.Error(err)
						return
					}
					if err := k.Release(ctx(t)); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		_ = l.Close()
		_ = c.Close()
		// Every Acquire and Release sends one script call at least.
		if n := sent.Load(); n < 8*20*2 {
			t.Errorf("ContextTimeoutEnabled %v: the hook saw %d commands, want at least %d", ctxTimeout, n, 8*20*2)
		}
	}
}
