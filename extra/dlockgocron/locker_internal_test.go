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
	j := first.(*jobLock)
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
	if second != j {
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
