package dlockgocron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// A minimum-hold timer that fired while the next run took the lock over is
// stale: when its callback runs after that run's Unlock, it must not
// release the lock, which the later run's minimum hold still covers.
func TestStaleMinHoldTimer(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	newLocker := func() *dlock.Locker {
		c := s.Client()
		l := dlock.New(c)
		t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
		return l
	}
	a := NewLocker(newLocker(), WithMinHold(time.Minute))
	b := NewLocker(newLocker(), WithMinHold(0))

	first, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	j := first.(run).j
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	stale := j.hold
	a.mu.Unlock()
	// The next run takes the lock over and ends.
	second, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if second.(run).j != j {
		t.Fatal("the next run did not take the held lock over")
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first run's timer fires late.
	j.expire(stale)
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another instance's Lock after a stale timer fired: %v, want ErrNotAcquired", err)
	}
}

// TestUnlockOfAnEarlierRun: a second Unlock of a run that a later run took
// over does nothing to the later run.
func TestUnlockOfAnEarlierRun(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	c := s.Client()
	l := dlock.New(c)
	t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
	a := NewLocker(l, WithMinHold(time.Minute))
	first, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Unlock(ctx)
	second, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Unlock(ctx) // again, late
	if a.Held("job") == nil {
		t.Fatal("an earlier run's Unlock ended the later run's hold")
	}
	if _, err := a.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Lock while the second run holds the job: %v, want ErrNotAcquired", err)
	}
	_ = second.Unlock(ctx)
}

// TestTakeoverWithoutRenewal: without auto-renewal, a run that takes the
// lock over gets a whole TTL from then, not the rest of the last run's.
func TestTakeoverWithoutRenewal(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	c := s.Client()
	l := dlock.New(c)
	t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
	const ttl = time.Second
	a := NewLocker(l, WithMinHold(time.Minute), WithLockOptions(dlock.WithTTL(ttl), dlock.WithAutoRenew(false)))
	first, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	before := a.Held("job").ValidUntil()
	_ = first.Unlock(ctx)
	// Wait until most of the first lease is gone (a condition, polled).
	for time.Until(before) > ttl/3 {
		time.Sleep(10 * time.Millisecond)
	}
	second, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Unlock(ctx)
	if left := time.Until(a.Held("job").ValidUntil()); left < ttl/2 {
		t.Errorf("the run that took the lock over has %s of validity, want about %s", left, ttl)
	}
}
