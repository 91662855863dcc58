package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

func redlock(t *testing.T, n int) (*dlock.Locker, []*dlocktest.Server, []redis.UniversalClient) {
	t.Helper()
	servers := dlocktest.StartN(t, n)
	clients := dlocktest.Clients(t, servers...)
	l, err := dlock.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, servers, clients
}

// TestRedlockMinorityFrozen: with default go-redis clients (which do not
// apply ctx deadlines to reads), two frozen nodes of five must not slow
// Acquire, Release or renewal down to their read timeout.
func TestRedlockMinorityFrozen(t *testing.T) {
	l, servers, _ := redlock(t, 5)
	for _, s := range servers[:2] {
		if err := s.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		start := time.Now()
		k, err := l.Acquire(ctx(t), "minority", dlock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatalf("Acquire with 2 of 5 nodes frozen: %v", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("Acquire took %s with 2 of 5 nodes frozen", el)
		}
		start = time.Now()
		if err := k.Release(ctx(t)); err != nil {
			t.Errorf("Release: %v", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("Release took %s with 2 of 5 nodes frozen", el)
		}
	}
	// Renewal keeps the lock for three TTLs with the minority frozen. (A
	// TTL of 2s, not 1s: under the race detector on a loaded 2-core machine
	// a renewal has its 400ms node timeout, not 200ms.)
	k, err := l.Acquire(ctx(t), "minority-renew", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
		t.Fatal("lock lost with only a minority frozen")
	case <-time.After(6 * time.Second):
	}
	k.Release(ctx(t))
	for _, s := range servers[:2] {
		s.Thaw()
	}
}

// TestRedlockMajorityFrozen: with three of five nodes frozen there is no
// quorum; TryAcquire refuses after the node timeout, Acquire within its
// deadline, both with the node errors visible.
func TestRedlockMajorityFrozen(t *testing.T) {
	l, servers, _ := redlock(t, 5)
	for _, s := range servers[:3] {
		if err := s.Freeze(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := l.TryAcquire(ctx(t), "majority")
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryAcquire with 3 of 5 frozen: %v, want ErrUnavailable", err)
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not expose the node timeouts", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("TryAcquire took %s", el)
	}

	dctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = l.Acquire(dctx, "majority")
	if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with 3 of 5 frozen: %v, want ErrUnavailable and the deadline", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Acquire with an 800ms deadline took %s", el)
	}
	for _, s := range servers[:3] {
		s.Thaw()
	}
	// Back to a quorum: it works again, promptly, although the nodes are
	// still suspect until they answer.
	tctx, tcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer tcancel()
	k, err := l.Acquire(tctx, "majority")
	if err != nil {
		t.Fatalf("Acquire after thaw: %v", err)
	}
	k.Release(ctx(t))
}

// TestRedlockFencesAcrossMajorities: node 0's counter is far ahead (of the
// others, which start from the clock); the first holder's quorum {0,1,2}
// gets that counter + 1 and raises nodes 1 and 2 to it; the second holder's
// quorum {2,3,4} shares only node 2 with it, and must still get a larger
// fence.
func TestRedlockFencesAcrossMajorities(t *testing.T) {
	l, servers, clients := redlock(t, 5)
	const ahead = 1 << 60
	if err := clients[0].Set(ctx(t), "dlock:{pay}:fence", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	freeze := func(idx ...int) func() {
		for _, i := range idx {
			if err := servers[i].Freeze(); err != nil {
				t.Fatal(err)
			}
		}
		return func() {
			for _, i := range idx {
				servers[i].Thaw()
			}
		}
	}
	thaw := freeze(3, 4)
	k1, err := l.Acquire(ctx(t), "pay")
	if err != nil {
		t.Fatal(err)
	}
	if k1.Fence() != ahead+1 {
		t.Errorf("first fence = %d, want %d (the maximum of the quorum)", k1.Fence(), uint64(ahead+1))
	}
	if err := k1.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	thaw()
	// The acquire and release commands that the frozen nodes received run
	// when they thaw; the late acquire must not leave the key behind.
	for _, i := range []int{3, 4} {
		waitFor(t, func() bool { return clients[i].Exists(ctx(t), "dlock:{pay}").Val() == 0 }, "late acquisition cleaned up")
	}
	thaw = freeze(0, 1)
	defer thaw()
	k2, err := l.Acquire(ctx(t), "pay")
	if err != nil {
		t.Fatal(err)
	}
	if k2.Fence() <= k1.Fence() {
		t.Errorf("second holder's fence %d is not larger than the first's %d", k2.Fence(), k1.Fence())
	}
	k2.Release(ctx(t))
}

// TestRedlockLostWhenMajorityGone: a holder whose nodes stop answering is told
// before the lock can expire.
func TestRedlockLostWhenMajorityGone(t *testing.T) {
	l, servers, _ := redlock(t, 3)
	k, err := l.Acquire(ctx(t), "gone", dlock.WithTTL(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Kill()
	servers[1].Freeze()
	defer servers[1].Thaw()
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire with 2 of 3 nodes gone")
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after loss: %v, want ErrNotHeld", err)
	}
}

func TestRedlockStatusAndForceRelease(t *testing.T) {
	l, _, _ := redlock(t, 3)
	k, err := l.Acquire(ctx(t), "admin")
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Status(ctx(t), "admin")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Fence < k.Fence() || len(st.Nodes) != 3 || st.TTL <= 0 {
		t.Errorf("status = %+v", st)
	}
	// The third node may not have run the acquisition yet: Acquire returns
	// as soon as a quorum granted it.
	n, err := l.ForceRelease(ctx(t), "admin")
	if err != nil || n < 2 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	st, _ = l.Status(ctx(t), "admin")
	if st.Held {
		t.Error("still held after ForceRelease")
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after ForceRelease: %v, want ErrNotHeld", err)
	}
}

// TestRedlockWakeOne checks the cost of waiting on a quorum: a release wakes
// about one waiting process per node, and the stand-in stands down when the
// woken waiter takes the lock.
func TestRedlockWakeOne(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	const procs, rounds = 6, 10
	ls := lockers(t, procs, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	admins := make([]*redis.Client, len(servers))
	for i, s := range servers {
		admins[i] = s.Client()
		defer admins[i].Close()
		admins[i].ConfigResetStat(ctx(t))
	}
	done := make(chan error, procs)
	for _, l := range ls {
		go func() {
			for r := 0; r < rounds; r++ {
				k, err := l.Acquire(ctx(t), "hot")
				if err != nil {
					done <- err
					return
				}
				time.Sleep(time.Millisecond)
				k.Release(ctx(t))
			}
			done <- nil
		}()
	}
	for range ls {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var calls int64
	for _, a := range admins {
		calls += scriptCalls(t, a)
	}
	perAcq := float64(calls) / float64(len(servers)) / float64(procs*rounds)
	t.Logf("%.2f script calls per node per acquisition", perAcq)
	if perAcq > 6 {
		t.Errorf("%.2f script calls per node per acquisition, want ≤ 6", perAcq)
	}
}

// TestRedlockSuspectNodes: a round that cannot decide without frozen nodes
// waits for them once (the node timeout), and not again while they stay
// unresponsive.
func TestRedlockSuspectNodes(t *testing.T) {
	servers := dlocktest.StartN(t, 5)
	clients := dlocktest.Clients(t, servers...)
	l, err := dlock.NewRedlock(clients, dlock.WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Node 0 is held by someone else; nodes 3 and 4 are frozen: 2 grants,
	// 1 refusal, and 2 nodes that decide the outcome but do not answer.
	clients[0].Set(ctx(t), "dlock:{suspect}", "someone-else", time.Minute)
	servers[3].Freeze()
	servers[4].Freeze()
	defer servers[3].Thaw()
	defer servers[4].Thaw()

	start := time.Now()
	_, err = l.TryAcquire(ctx(t), "suspect")
	first := time.Since(start)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("first TryAcquire: %v, want ErrUnavailable (the refusal alone does not decide)", err)
	}
	start = time.Now()
	_, err = l.TryAcquire(ctx(t), "suspect")
	second := time.Since(start)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("second TryAcquire: %v, want ErrUnavailable", err)
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) {
		t.Errorf("error %v does not name the nodes it did not wait for", err)
	}
	t.Logf("first %s, second %s: %v", first, second, err)
	if first < 2*time.Second {
		t.Errorf("first attempt took %s: it should have waited the node timeout for the deciding nodes", first)
	}
	if second > time.Second {
		t.Errorf("second attempt took %s: it waited again for nodes that had just not answered", second)
	}
}

// TestRedlockLostWhenNoQuorumKnown: a Redlock lock of 3 whose renewal is
// confirmed by one node while another, which lost its data, finds the key
// free and the third is down (a round that is unavailable, not refused)
// has no quorum known to hold it: Lost closes at that renewal. The node
// that still holds the key keeps it until it would have expired anyway
// (the holder's time to stop), so another Locker cannot take the lock
// before then; and the Locker's other locks are still told of their own
// loss on time.
func TestRedlockLostWhenNoQuorumKnown(t *testing.T) {
	t.Parallel() // mostly waits (a failover, a freeze, validities): beside the other waiting tests
	l, servers, clients := redlock(t, 3)
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	k, err := l.Acquire(ctx(t), "no-quorum", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.Acquire(ctx(t), "no-quorum-other", dlock.WithTTL(1500*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	// Node 1 loses the key, as after a restart without its data.
	if err := clients[1].Del(ctx(t), "dlock:{no-quorum}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost(): // at its next renewal, TTL/3 on
	case <-time.After(5 * time.Second):
		t.Fatalf("Lost open 5s after a node lost the key with another down (ValidUntil %v)", k.ValidUntil())
	}
	lostAt := time.Now()
	pttl := clients[0].PTTL(ctx(t), "dlock:{no-quorum}").Val()
	if pttl < ttl/3 {
		t.Fatalf("node 0's key has %s left at Lost; the renewal it confirmed gave it %s", pttl, ttl)
	}
	// Until well before that key expires, it stays, and the lock cannot be
	// taken (nodes 1 and 2 are not a quorum).
	l2, err := dlock.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for time.Since(lostAt) < pttl/2 {
		if clients[0].Exists(ctx(t), "dlock:{no-quorum}").Val() == 0 {
			t.Fatalf("node 0's key (%s left at Lost) was cleaned up %s after Lost, before it would have expired", pttl, time.Since(lostAt))
		}
		if k2, err := l2.TryAcquire(ctx(t), "no-quorum"); err == nil {
			t.Fatalf("another Locker took the lock %s after Lost (fence %d), while node 0 still held its key", time.Since(lostAt), k2.Fence())
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-other.Lost():
	case <-time.After(5 * time.Second):
		t.Errorf("the other lock (TTL 1.5s, not renewed): Lost open after 5s (ValidUntil %v)", other.ValidUntil())
	}
}
