package dlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// scheduled is the number of locks in l's renewals.
func (l *Locker) scheduled() int {
	l.renewals.mu.Lock()
	defer l.renewals.mu.Unlock()
	n := 0
	for _, es := range l.renewals.due {
		n += len(es)
	}
	return n
}

// TestRenewalsKeepNoReleasedLock: a lock released, lost or renewed alone
// leaves the Locker's renewals at once, so that the schedule keeps no dead
// lock alive (a process that takes short locks at a high rate would keep
// each one for TTL/3).
func TestRenewalsKeepNoReleasedLock(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := New(c)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var locks []*Lock
	for i := range 100 {
		k, err := l.Acquire(ctx, "short-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, k)
	}
	if n := l.scheduled(); n != len(locks) {
		t.Fatalf("%d locks in the schedule, want %d", n, len(locks))
	}
	for i, k := range locks {
		switch i % 3 {
		case 0:
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case 1:
			k.markLost(ErrLockLost)
		case 2:
			k.mu.Lock()
			k.scheduleRenew(time.Hour) // alone (a retry)
			k.mu.Unlock()
		}
	}
	if n := l.scheduled(); n != 0 {
		t.Errorf("%d locks left in the schedule after their release, loss or renewal alone", n)
	}
	for i, k := range locks {
		if i%3 == 2 {
			_ = k.Release(ctx)
		}
	}
}
