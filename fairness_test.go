package dlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestFairOrderAcrossLockers: processes (here Lockers, each with its own
// client) that start waiting one after the other acquire in that order; a
// waiter that stops answering in the middle of the queue (its process frozen
// or partitioned away) is skipped once the stand-in delay has passed.
func TestFairOrderAcrossLockers(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	t.Cleanup(func() { _ = admin.Close() })
	holder := newLocker(t, s.Client())
	const key, n, dead = "fair", 10, 5
	k, err := holder.Acquire(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}

	proxy, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	waitCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadCtx, cancelDead := context.WithCancel(waitCtx)
	defer cancelDead()

	var (
		mu    sync.Mutex
		order []int
		at    = make([]time.Time, n)
		wg    sync.WaitGroup
	)
	for i := range n {
		var c redis.UniversalClient = s.Client()
		if i == dead {
			c = redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		}
		l := dlock.New(c)
		t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx := waitCtx
			if i == dead {
				actx = deadCtx
			}
			lk, err := l.Acquire(actx, key)
			if err != nil {
				if i != dead {
					t.Errorf("waiter %d: %v", i, err)
				}
				return
			}
			mu.Lock()
			order = append(order, i)
			at[i] = time.Now()
			mu.Unlock()
			if err := lk.Release(waitCtx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		}()
		// The next one starts once this one is in the queue in Redis.
		for {
			m, err := admin.ZCard(waitCtx, "dlock:{"+key+"}:waiters").Result()
			if err != nil {
				t.Fatal(err)
			}
			if m == int64(i+1) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy.BlackHole(true) // waiter 5 hears nothing and says nothing
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for {
			mu.Lock()
			got := len(order)
			mu.Unlock()
			if got == n-1 {
				close(done)
				return
			}
			select {
			case <-waitCtx.Done():
				close(done)
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	<-done
	cancelDead()
	wg.Wait()

	want := []int{0, 1, 2, 3, 4, 6, 7, 8, 9}
	if len(order) != len(want) {
		t.Fatalf("acquired in order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("acquired in order %v, want %v", order, want)
		}
	}
	// The documented bound for skipping a waiter that does not come: the
	// stand-in delay (150ms) after the release that woke it; the margin is
	// for a loaded machine.
	if gap := at[dead+1].Sub(at[dead-1]); gap > 2*time.Second {
		t.Errorf("the waiter after the dead one acquired %v after the one before it", gap)
	} else {
		t.Logf("dead waiter skipped in %v", gap)
	}
}
