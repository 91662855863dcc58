package dlocksql_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlocksql"
	"github.com/dlock-dev/dlock/fenced"
)

// TestClockJumpStaleHolderRefused: the Redis server's clock jumps forward
// by more than the TTL while A holds the lock (redis-server under Debian's
// libfaketime, as the core's TestClockForwardJump): Redis expires A's key
// early and B takes the lock while A still believes it holds it (the clock
// limit of the design). The database refuses A's writes once B has written:
// B's fence is larger.
func TestClockJumpStaleHolderRefused(t *testing.T) {
	var libs []string
	for _, pattern := range []string{"/usr/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/faketime/libfaketime.so.1"} {
		m, _ := filepath.Glob(pattern)
		if len(m) == 0 {
			if os.Getenv("DLOCK_RELIABILITY") == "1" {
				t.Fatalf("no %s", pattern)
			}
			t.Skipf("no %s (install Debian's libfaketime)", pattern)
		}
		libs = append(libs, m[0])
	}
	clock := filepath.Join(t.TempDir(), "faketime")
	if err := os.WriteFile(clock, []byte("+0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// jemalloc and libfaketime clash (wolfcw/libfaketime#130): glibc's
	// malloc first.
	srv := dlocktest.Start(t, dlocktest.WithEnv("LD_PRELOAD="+libs[0]+" "+libs[1],
		"FAKETIME_TIMESTAMP_FILE="+clock, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"))
	dbs := openDB(t, 2)
	dbA, dbB := dbs[0], dbs[1]
	ca, cb := srv.Client(), srv.Client()
	la, lb := dlock.New(ca), dlock.New(cb)
	t.Cleanup(func() {
		la.Close()
		lb.Close()
		ca.Close()
		cb.Close()
	})
	ctx := ctxTimeout(t, 20*time.Second)
	const key = "account:1"
	a, err := la.Acquire(ctx, key, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	balanceA, err := dlocksql.Claim(ctx, dbA, 1, a.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(clock, []byte(fmt.Sprintf("%+d\n", 60)), 0o600); err != nil {
		t.Fatal(err)
	}
	if now, err := ca.Time(ctx).Result(); err != nil || now.Sub(time.Now()) < 50*time.Second {
		t.Fatalf("the server's clock: %v, %v; libfaketime does not apply", now, err)
	}
	b, err := lb.TryAcquire(ctx, key, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("B after a forward jump of 1m: %v; the key should have expired early", err)
	}
	defer b.Release(context.Background())
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d ≤ A's %d", b.Fence(), a.Fence())
	}
	balanceB, err := dlocksql.Claim(ctx, dbB, 1, b.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if err := dlocksql.Update(ctx, dbB, 1, balanceB+50, b.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := dlocksql.Update(ctx, dbA, 1, balanceA-30, a.Fence()); !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("A's write after B's: %v, want ErrStale", err)
	}
	if err := dlocksql.Add(ctx, dbA, 1, -30, a.Fence()); !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("A's Add after B's: %v, want ErrStale", err)
	}
	wantBalance(t, dbB, 1, 150, b.Fence())
	select {
	case <-a.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("A's Lost did not close")
	}
}
