package dlock_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// multiExclusion runs workers over the lockers, each taking a random 2 or 3
// of 6 keys, named in a random order, with AcquireAll: every call returns
// (no deadlock), in the order given, and no key is ever held twice at once.
func multiExclusion(t *testing.T, lockers []*dlock.Locker, workers, rounds int) {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	names := []string{"acct-1", "acct-2", "acct-3", "acct-4", "acct-5", "acct-6"}
	var mu sync.Mutex
	inside := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			for range rounds {
				perm := mrand.Perm(len(names))
				keys := make([]string, 2+mrand.IntN(2))
				for i := range keys {
					keys[i] = names[perm[i]]
				}
				ks, err := l.AcquireAll(ctx, keys)
				if err != nil {
					t.Errorf("worker %d: AcquireAll(%q): %v", w, keys, err)
					return
				}
				mu.Lock()
				for i, k := range ks {
					if k.Key() != keys[i] {
						t.Errorf("lock %d is %q, want %q", i, k.Key(), keys[i])
					}
					if inside[k.Key()]++; inside[k.Key()] > 1 {
						t.Errorf("%q held twice at once", k.Key())
					}
				}
				mu.Unlock()
				time.Sleep(500 * time.Microsecond)
				mu.Lock()
				for _, k := range ks {
					inside[k.Key()]--
				}
				mu.Unlock()
				for _, k := range ks {
					if err := k.Release(ctx); err != nil {
						t.Errorf("worker %d: Release: %v", w, err)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestAcquireAllEveryOrder(t *testing.T) {
	s := dlocktest.Start(t)
	var ls []*dlock.Locker
	for range 4 {
		ls = append(ls, newLocker(t, s.Client()))
	}
	multiExclusion(t, ls, 12, 20)
}

func TestAcquireAllEveryOrderRedlock(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	ls := lockers(t, 3, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	multiExclusion(t, ls, 8, 10)
}

// TestAcquireAllEveryOrderCluster: the keys live in different slots, on
// different masters.
func TestAcquireAllEveryOrderCluster(t *testing.T) {
	c := dlocktest.StartCluster(t, 3)
	var ls []*dlock.Locker
	for range 3 {
		ls = append(ls, newLocker(t, c.Client()))
	}
	cc := c.Client()
	defer cc.Close()
	slots := map[int64]bool{}
	for i := 1; i <= 6; i++ {
		slots[cc.ClusterKeySlot(ctx(t), fmt.Sprintf("dlock:{acct-%d}", i)).Val()] = true
	}
	if len(slots) < 2 {
		t.Fatalf("the keys share a slot: %v", slots)
	}
	multiExclusion(t, ls, 8, 10)
}

// TestAcquireAllRedlockFrozen: with one of three masters frozen, AcquireAll
// still takes every key, each with its quorum.
func TestAcquireAllRedlockFrozen(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	ls := lockers(t, 2, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	if err := servers[0].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[0].Thaw() })
	ks, err := ls[0].AcquireAll(ctx(t), []string{"f-b", "f-a"}, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls[1].TryAcquire(ctx(t), "f-a", dlock.WithTTL(2*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("f-a while held: %v", err)
	}
	for _, k := range ks {
		if err := k.Release(ctx(t)); err != nil {
			t.Error(err)
		}
	}
}

func TestAcquireAllInvalid(t *testing.T) {
	l, _, _ := single(t)
	for _, keys := range [][]string{nil, {}, {"a", ""}, {"a", "b", "a"}} {
		if ks, err := l.AcquireAll(ctx(t), keys); !errors.Is(err, dlock.ErrInvalid) || ks != nil {
			t.Errorf("AcquireAll(%q) = %v, %v; want ErrInvalid", keys, ks, err)
		}
	}
	if _, err := l.AcquireAll(ctx(t), []string{"a"}, dlock.WithTTL(time.Microsecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a bad option: %v", err)
	}
}

// TestAcquireAllNoneLeft: when a key stays held, AcquireAll fails when ctx
// ends and leaves none of the keys held: the others are free at once, not
// after their TTL, and nothing of them is left in Redis.
func TestAcquireAllNoneLeft(t *testing.T) {
	for _, held := range []string{"n-a", "n-c"} { // the first key, and the last
		t.Run(held, func(t *testing.T) {
			l, _, c := single(t)
			other := newLocker(t, c)
			h, err := other.Acquire(ctx(t), held)
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			ks, err := l.AcquireAll(cctx, []string{"n-c", "n-b", "n-a"})
			if ks != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("AcquireAll = %v, %v; want ErrNotAcquired and the deadline", ks, err)
			}
			for _, k := range []string{"n-a", "n-b", "n-c"} {
				if k == held {
					continue
				}
				if n := c.Exists(ctx(t), "dlock:{"+k+"}").Val(); n != 0 {
					t.Errorf("%s left held after AcquireAll failed", k)
				}
			}
			_ = h.Release(ctx(t))
		})
	}
}

// TestAcquireAllCancelled: a cancellation in the middle of AcquireAll,
// while it holds the first keys and waits for the last, releases the keys
// it holds at once, and its waiter's registration goes too.
func TestAcquireAllCancelled(t *testing.T) {
	l, _, c := single(t)
	other := newLocker(t, c)
	h, err := other.Acquire(ctx(t), "m-z")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.AcquireAll(cctx, []string{"m-z", "m-a", "m-b"})
		done <- err
	}()
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{m-z}:waiters").Val() == 1 }, "AcquireAll to wait for m-z")
	if c.Exists(ctx(t), "dlock:{m-a}", "dlock:{m-b}").Val() != 2 {
		t.Fatal("AcquireAll does not hold the keys before the one it waits for")
	}
	cancel()
	if err := <-done; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireAll after cancel: %v", err)
	}
	if n := c.Exists(ctx(t), "dlock:{m-a}", "dlock:{m-b}").Val(); n != 0 {
		t.Errorf("%d keys left held after the cancellation", n)
	}
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{m-z}:waiters").Val() == 0 }, "the registration to go")
	_ = h.Release(ctx(t))
}

// TestAcquireAllRefused: a key that the nodes refuse for good (held with
// another limit) fails AcquireAll at once, and the keys granted with it are
// released.
func TestAcquireAllRefused(t *testing.T) {
	l, _, c := single(t)
	other := newLocker(t, c)
	sem, err := other.Acquire(ctx(t), "mm-b", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Release(ctx(t))
	ks, err := l.AcquireAll(ctx(t), []string{"mm-c", "mm-b", "mm-a"})
	if ks != nil || !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("AcquireAll with a key held as a semaphore = %v, %v; want ErrMisconfigured", ks, err)
	}
	if n := c.Exists(ctx(t), "dlock:{mm-a}", "dlock:{mm-c}").Val(); n != 0 {
		t.Errorf("%d keys left held after AcquireAll was refused", n)
	}
}

// TestAcquireAllShared: AcquireAll with WithShared takes shared holds of
// every key, which other shared holds share and a writer waits for.
func TestAcquireAllShared(t *testing.T) {
	l, _, c := single(t)
	other := newLocker(t, c)
	a, err := l.AcquireAll(ctx(t), []string{"s-1", "s-2"}, dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.AcquireAll(ctx(t), []string{"s-2", "s-1"}, dlock.WithShared())
	if err != nil {
		t.Fatalf("a second shared AcquireAll: %v", err)
	}
	if _, err := other.TryAcquire(ctx(t), "s-1"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("exclusive while shared: %v", err)
	}
	for _, k := range append(a, b...) {
		_ = k.Release(ctx(t))
	}
}

// TestAcquireAllClosed: AcquireAll on a closed Locker is ErrClosed.
func TestAcquireAllClosed(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	l.Close()
	if _, err := l.AcquireAll(ctx(t), []string{"a", "b"}); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("AcquireAll on a closed Locker: %v", err)
	}
}

// TestAcquireAllWaitsForFrozenRedis: a Redis that does not answer the first
// attempt (a node timeout, not the caller's deadline) is waited for, as
// Acquire waits: AcquireAll gets the keys once it is back.
func TestAcquireAllWaitsForFrozenRedis(t *testing.T) {
	l, s, _ := single(t)
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := make(chan struct{})
	go func() {
		defer close(thawed)
		time.Sleep(time.Second) // the fault's length, not a synchronisation
		_ = s.Thaw()
	}()
	ks, err := l.AcquireAll(ctxTimeout(t, 20*time.Second), []string{"fz-b", "fz-a"}, dlock.WithTTL(time.Second))
	<-thawed
	if err != nil {
		t.Fatalf("AcquireAll with Redis frozen for 1s: %v", err)
	}
	for _, k := range ks {
		_ = k.Release(ctx(t))
	}
}

// TestAcquireAllLostWhileWaiting: a lock AcquireAll took, lost while it
// waits for the next key (which stays held), ends the wait at once: the
// call fails with ErrLockLost, not at ctx's end with ErrNotAcquired, and
// leaves nothing behind.
func TestAcquireAllLostWhileWaiting(t *testing.T) {
	l, _, c := single(t)
	other := newLocker(t, c)
	b, err := other.Acquire(ctx(t), "lost-b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx(t))
	type result struct {
		locks []*dlock.Lock
		err   error
	}
	done := make(chan result, 1)
	go func() {
		locks, err := l.AcquireAll(ctxTimeout(t, 60*time.Second), []string{"lost-a", "lost-b"}, dlock.WithTTL(time.Second))
		done <- result{locks, err}
	}()
	waitFor(t, func() bool { st, _ := other.Status(ctx(t), "lost-a"); return st.Held }, "AcquireAll to take the first key")
	waitFor(t, func() bool { st, _ := other.Status(ctx(t), "lost-b"); return st.Waiters == 1 }, "AcquireAll to wait for the second key")
	if _, err := other.ForceRelease(ctx(t), "lost-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if !errors.Is(r.err, dlock.ErrLockLost) || r.locks != nil {
			t.Fatalf("AcquireAll after a lock it held was lost: %v, %v; want nil and ErrLockLost", r.locks, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("AcquireAll still waits 15s after a lock it held was lost")
	}
	// Its registration for the second key goes in the background.
	waitFor(t, func() bool { st, _ := other.Status(ctx(t), "lost-b"); return st.Waiters == 0 }, "the registration to go")
}
