package dlock_test

// Found by a review of the fixes for issue 43: each test failed on the
// code before their fix (bcfaf32), against real redis-servers.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestHandoffReviewReleaseRetryNotLost: a Release on a Redlock of 4 (quorum 3)
// reaches nodes 0 and 1 only (2 and 3 frozen): not confirmed, "Release may
// be called again". The second call finds the key gone on nodes 0 and 1 —
// deleted by the first round — and counts them as refusals: 2 > 4-3, so
// Release reports ErrNotHeld ("had expired or been taken") for a lock that
// was valid throughout and never lost.
func TestHandoffReviewReleaseRetryNotLost(t *testing.T) {
	l, servers, _ := redlock(t, 4)
	k, err := l.Acquire(ctx(t), "retry", dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	thaw := freeze(t, servers[2], servers[3])
	defer thaw()
	err = k.Release(ctx(t))
	if err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("first Release with 2 of 4 frozen: %v, want not confirmed", err)
	}
	t.Logf("first Release: %v", err)
	if time.Until(k.ValidUntil()) < 10*time.Second {
		t.Fatalf("validity left %v", time.Until(k.ValidUntil()))
	}
	err = k.Release(ctx(t))
	if errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release called again (validity left %v): %v: a loss that did not happen", time.Until(k.ValidUntil()), err)
	}
	t.Logf("second Release: %v", err)
}

// TestHandoffReviewReleaseRetryPermitNotLost: the same with a permit whose quorum
// is every node (limit 3 on 3 nodes): the first round reaches two nodes,
// the second finds the permit gone on one of them: one refusal > 3-3.
func TestHandoffReviewReleaseRetryPermitNotLost(t *testing.T) {
	l, servers, _ := redlock(t, 3)
	k, err := l.Acquire(ctx(t), "retryp", dlock.WithTTL(20*time.Second), dlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	thaw := freeze(t, servers[2])
	defer thaw()
	err = k.Release(ctx(t))
	if err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("first Release with 1 of 3 frozen: %v, want not confirmed", err)
	}
	t.Logf("first Release: %v", err)
	err = k.Release(ctx(t))
	if errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release called again (validity left %v): %v: a loss that did not happen", time.Until(k.ValidUntil()), err)
	}
	t.Logf("second Release: %v", err)
}

// TestHandoffReviewLateAcquisitionAfterHandoff: lock.lua's first copy is held up
// (the client sends it again and the lock is granted); the holder detaches
// at once (dlock acquire does just this) and another Locker adopts and
// releases the hold (dlock release --token). The detached Lock knew that a
// copy may still run (again) but buries nothing, and the adopter does not
// know: the late copy takes the key for a token nobody holds, for its whole
// TTL.
func TestHandoffReviewLateAcquisitionAfterHandoff(t *testing.T) {
	c, direct, p := lateCopyClient(t)
	l := newLocker(t, c)
	deliver := p.HoldBack(arg("23456"))
	k, err := l.TryAcquire(ctx(t), "handoff", dlock.WithTTL(23456*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatalf("TryAcquire, sent again after a reset: %v", err)
	}
	h := k.Detach()
	b := newLocker(t, direct)
	k2, err := b.Adopt(ctx(t), h.Key, h.Token, dlock.WithTTL(h.TTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := deliver(ctx(t)); err != nil {
		t.Fatalf("the held copy: %v", err)
	}
	if v := direct.Get(ctx(t), "dlock:{handoff}").Val(); v != "" {
		t.Fatalf("after the adopter's release the key holds %q (the dead token %v), PTTL %v", v, v == h.Token, direct.PTTL(ctx(t), "dlock:{handoff}").Val())
	}
}

// TestHandoffReviewRetryAnsweredWithErrorReply: lock.lua's first copy is held up
// (its connection reset); go-redis' retry reaches a server that is busy in
// a long script and answers BUSY, an error reply. effectOf takes an error
// reply for "did not run" even though the command was written twice
// (again), so the failed attempt leaves nothing to clean up and buries
// nothing; the held copy then runs and the key is held by a token nobody
// holds, for its whole TTL.
func TestHandoffReviewRetryAnsweredWithErrorReply(t *testing.T) {
	s := dlocktest.Start(t, dlocktest.WithArgs("--lua-time-limit", "20"))
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	direct, busy := s.Client(), s.Client()
	t.Cleanup(func() { c.Close(); direct.Close(); busy.Close() })
	l := newLocker(t, c)
	// The scripts loaded, a connection made before.
	if k, err := l.TryAcquire(ctx(t), "other"); err != nil {
		t.Fatal(err)
	} else if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// A long read-only script: the server answers BUSY meanwhile.
	started := make(chan struct{})
	go func() {
		close(started)
		busy.Eval(context.Background(), "local i = 0 while true do i = i + 1 end", nil)
	}()
	<-started
	for {
		if err := direct.Ping(ctx(t)).Err(); err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	deliver := p.HoldBack(arg("34567"))
	_, err = l.TryAcquire(ctx(t), "busy", dlock.WithTTL(34567*time.Millisecond))
	t.Logf("TryAcquire: %v", err)
	if err == nil {
		t.Skip("granted")
	}
	for {
		err := direct.Do(ctx(t), "script", "kill").Err()
		if err == nil || strings.Contains(err.Error(), "NOTBUSY") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for direct.Ping(ctx(t)).Err() != nil {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let a clean-up, if any, run
	if err := deliver(ctx(t)); err != nil {
		t.Fatalf("the held copy: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("keys %v dead %v", direct.Keys(ctx(t), "*").Val(), direct.ZRangeWithScores(ctx(t), "dlock:{busy}:dead", 0, -1).Val())
	if v := direct.Get(ctx(t), "dlock:{busy}").Val(); v != "" {
		t.Fatalf("after a failed TryAcquire the key holds %q, PTTL %v: a dead token", v, direct.PTTL(ctx(t), "dlock:{busy}").Val())
	}
}

// startBusy has s run a long script (the server answers BUSY meanwhile)
// and returns its end.
func startBusy(t *testing.T, s *dlocktest.Server) (stop func()) {
	t.Helper()
	busy, direct := s.Client(), s.Client()
	go busy.Eval(context.Background(), "local i = 0 while true do i = i + 1 end", nil)
	for {
		if err := direct.Ping(ctx(t)).Err(); err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() {
		for {
			err := direct.Do(ctx(t), "script", "kill").Err()
			if err == nil || strings.Contains(err.Error(), "NOTBUSY") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		for direct.Ping(ctx(t)).Err() != nil {
			time.Sleep(5 * time.Millisecond)
		}
		busy.Close()
		direct.Close()
	}
}

// TestHandoffReviewLateReleaseEndsAdoptersHold: a Release whose first copy is held
// up (its connection reset) and whose retry is answered with an error
// (BUSY) is not confirmed; Detach after it ("also after a release began")
// waits for the round, drops the clean-ups, and hands the hold over; the
// adopter's Adopt confirms. Then the held copy of the release runs and
// deletes the adopter's key: a third holder gets in while the adopter's
// Lost is open. Detach's promise: "Once Detach returns, this process sends
// nothing more that could end the hold".
func TestHandoffReviewLateReleaseEndsAdoptersHold(t *testing.T) {
	s := dlocktest.Start(t, dlocktest.WithArgs("--lua-time-limit", "20"))
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	direct := s.Client()
	t.Cleanup(func() { c.Close(); direct.Close() })
	l := newLocker(t, c)
	k, err := l.TryAcquire(ctx(t), "rel", dlock.WithTTL(20*time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	// Load release.lua / unlock.lua first.
	if k0, err := l.TryAcquire(ctx(t), "other"); err != nil {
		t.Fatal(err)
	} else if err := k0.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	stop := startBusy(t, s)
	deliver := p.HoldBack(arg(k.Token()))
	err = k.Release(ctx(t))
	t.Logf("Release: %v", err)
	h := k.Detach() // e.g. a worker detaching while Close releases
	stop()
	if h.Token != "" {
		t.Fatalf("Detach after a Release was sent gave the token: its release may still end an adopter's hold")
	}
	_ = deliver(ctx(t))
}

// TestHandoffReviewAdoptShapeWithoutLimitKey: a permit of a semaphore of 3 whose
// limit key was lost (an eviction) is adopted WithShared: adopt.lua's shape
// check needs the limit key, extend.lua then writes the adopter's "0" as
// the semaphore's limit: the permits become shared holds, and shared
// acquisitions get in past the limit of 3.
func TestHandoffReviewAdoptShapeWithoutLimitKey(t *testing.T) {
	l, s, _ := single(t)
	c := s.Client()
	defer c.Close()
	var ks []*dlock.Lock
	for range 3 {
		k, err := l.TryAcquire(ctx(t), "sem", dlock.WithLimit(3), dlock.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	h := ks[0].Detach()
	if err := c.Del(ctx(t), "dlock:{sem}:limit").Err(); err != nil { // evicted
		t.Fatal(err)
	}
	b := newLocker(t, c)
	k, err := b.Adopt(ctx(t), h.Key, h.Token, dlock.WithShared())
	if err == nil {
		n := 0
		for range 3 {
			if _, err := b.TryAcquire(ctx(t), "sem", dlock.WithShared()); err == nil {
				n++
			}
		}
		t.Fatalf("a permit of limit 3 adopted WithShared (limit key now %q); %d more shared holds beside 3 permits (fence %d)",
			c.Get(ctx(t), "dlock:{sem}:limit").Val(), n, k.Fence())
	}
	t.Logf("Adopt: %v", err)
}
