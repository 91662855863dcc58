package dlock_test

import (
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRollingUpgradePlainLock: a process of v0.1.0 (its acquire.lua and
// release.lua, kept in testdata as they shipped) and a Locker of this
// version, which takes a plain lock with lock.lua and releases it with
// unlock.lua, share one key: each excludes the other, fences go on
// increasing, and each one's release wakes the other's waiter at once.
func TestRollingUpgradePlainLock(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := newLocker(t, c)
	acqSrc, err := os.ReadFile("testdata/acquire-v0.1.0.lua")
	if err != nil {
		t.Fatal(err)
	}
	relSrc, err := os.ReadFile("testdata/release-v0.1.0.lua")
	if err != nil {
		t.Fatal(err)
	}
	const key, lock = "upgrade", "dlock:{upgrade}"
	// v0.1.0's KEYS, in its order.
	acqKeys := []string{lock, lock + ":fence", lock + ":waiters", lock + ":wexp", lock + ":meta", lock + ":limit", lock + ":dead"}
	relKeys := []string{lock, lock + ":waiters", lock + ":wexp", lock + ":meta", lock + ":limit", lock + ":dead", lock + ":fence"}
	oldAcquire := func(token string, waiter ...any) []any {
		t.Helper()
		args := append([]any{token, "60000", "86400000", "", "1"}, waiter...)
		v, err := c.Eval(ctx(t), string(acqSrc), acqKeys, args...).Slice()
		if err != nil {
			t.Fatalf("v0.1.0's acquire: %v", err)
		}
		return v
	}
	oldRelease := func(token string) int64 {
		t.Helper()
		n, err := c.Eval(ctx(t), string(relSrc), relKeys, token, "dlock:inbox:", "100", "", "1", "0", "1", "0", "86400000").Int64()
		if err != nil {
			t.Fatalf("v0.1.0's release: %v", err)
		}
		return n
	}
	fenceOf := func(v []any) uint64 {
		t.Helper()
		s, _ := v[1].(string)
		f, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("fence %v: %v", v[1], err)
		}
		return f
	}

	// The old process holds: this version is refused; the old one releases.
	first := oldAcquire("old1")
	if first[0] != int64(1) {
		t.Fatalf("v0.1.0's acquire of a free key: %v", first)
	}
	if _, err := l.TryAcquire(ctx(t), key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while v0.1.0 holds: %v, want ErrNotAcquired", err)
	}
	if n := oldRelease("old1"); n != 1 {
		t.Fatalf("v0.1.0's release: %d", n)
	}
	// This version holds: the old one is refused, and waits.
	k, err := l.TryAcquire(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if k.Fence() <= fenceOf(first) {
		t.Errorf("fence %d after v0.1.0's %d", k.Fence(), fenceOf(first))
	}
	sub := c.Subscribe(ctx(t), "dlock:inbox:OLD")
	defer sub.Close()
	if _, err := sub.Receive(ctx(t)); err != nil {
		t.Fatal(err)
	}
	busy := oldAcquire("old2", "OLD:1:"+key, "180000", "0", "0", "0")
	pos, _ := busy[2].(string)
	if busy[0] != int64(0) || pos == "" || pos == "0" {
		t.Fatalf("v0.1.0's waiter while this version holds: %v, want busy and queued", busy)
	}
	// This version's release wakes the old waiter, who takes the lock.
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "w OLD:1:"+key {
			t.Errorf("the old waiter was told %q", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("this version's release did not wake v0.1.0's waiter")
	}
	got := oldAcquire("old2", "OLD:1:"+key, "180000", pos, "1", "0")
	if got[0] != int64(1) || fenceOf(got) <= k.Fence() {
		t.Fatalf("the woken v0.1.0 waiter: %v, want granted with a fence above %d", got, k.Fence())
	}
	// This version waits; the old release wakes it at once (TTL 60s).
	waiting := acquireAsync(t, newLocker(t, c), key)
	waitFor(t, func() bool { return c.ZCard(ctx(t), lock+":waiters").Val() == 1 }, "this version's waiter to register")
	if n := oldRelease("old2"); n != 1 {
		t.Fatalf("v0.1.0's release: %d", n)
	}
	acquiredWithin(t, waiting, 5*time.Second, "v0.1.0's release did not wake this version's waiter within 5s (its holder's TTL was a minute)")
}
