package fenced_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// holders starts a redis-server and returns two Lockers and Stores on it,
// each with its own client, as two processes would have.
func holders(t *testing.T) (la, lb *dlock.Locker, sa, sb *fenced.Store) {
	t.Helper()
	srv := dlocktest.Start(t)
	ca, cb := srv.Client(), srv.Client()
	la, lb = dlock.New(ca), dlock.New(cb)
	t.Cleanup(func() {
		for _, l := range []*dlock.Locker{la, lb} {
			if err := l.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		ca.Close()
		cb.Close()
	})
	return la, lb, fenced.New(ca), fenced.New(cb)
}

// pause acquires key for A on a short lease that is not renewed, and
// returns it. A then behaves as a process paused past its lease: it ignores
// Lost, on purpose, and writes later with the fence it had.
func pause(t *testing.T, ctx context.Context, l *dlock.Locker, key string) *dlock.Lock {
	t.Helper()
	a, err := l.Acquire(ctx, key, dlock.WithTTL(150*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// acquireAfter waits for key on B's Locker: B gets it once A's lease has
// run out in Redis.
func acquireAfter(t *testing.T, ctx context.Context, l *dlock.Locker, key string, a *dlock.Lock) *dlock.Lock {
	t.Helper()
	b, err := l.Acquire(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Release(context.Background()) })
	select {
	case <-a.Lost():
	default:
		t.Fatal("B acquired the lock while A's Lost was still open")
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d ≤ A's %d", b.Fence(), a.Fence())
	}
	return b
}

// TestPausedHolderRefused: A holds the lock and writes; it pauses past its
// lease; B acquires the lock and writes; A wakes and writes with its old
// fence: refused, and B's value is kept.
func TestPausedHolderRefused(t *testing.T) {
	la, lb, sa, sb := holders(t)
	ctx := ctxTimeout(t, 20*time.Second)
	const key = "account:42"

	a := pause(t, ctx, la, key)
	if err := sa.Set(ctx, key, "A1", a.Fence()); err != nil {
		t.Fatal(err)
	}
	b := acquireAfter(t, ctx, lb, key, a)
	if err := sb.Set(ctx, key, "B1", b.Fence()); err != nil {
		t.Fatal(err)
	}

	// A wakes up, unaware, and writes.
	wantStale(t, sa.Set(ctx, key, "A2", a.Fence()), key, a.Fence(), b.Fence())
	wantStale(t, sa.Delete(ctx, key, a.Fence()), key, a.Fence(), b.Fence())
	wantValue(t, sb, key, "B1", b.Fence())
	if err := a.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("A's Release: %v, want ErrNotHeld", err)
	}
}

// TestClaimLocksOutBeforeWriting: B claims the resource as it starts, so
// A's late write is refused even before B has written, and B's
// read-modify-write loses nothing.
func TestClaimLocksOutBeforeWriting(t *testing.T) {
	la, lb, sa, sb := holders(t)
	ctx := ctxTimeout(t, 20*time.Second)
	const key = "counter"

	a := pause(t, ctx, la, key)
	if err := sa.Set(ctx, key, "1", a.Fence()); err != nil {
		t.Fatal(err)
	}
	b := acquireAfter(t, ctx, lb, key, a)
	v, found, err := sb.Claim(ctx, key, b.Fence())
	if err != nil || !found || v != "1" {
		t.Fatalf("B's Claim = %q, %v, %v", v, found, err)
	}
	// A's increment lands between B's read and B's write: refused.
	wantStale(t, sa.Set(ctx, key, "2", a.Fence()), key, a.Fence(), b.Fence())
	n, _ := strconv.Atoi(v)
	if err := sb.Set(ctx, key, strconv.Itoa(n+1), b.Fence()); err != nil {
		t.Fatal(err)
	}
	wantValue(t, sb, key, "2", b.Fence())
}
