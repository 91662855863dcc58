package dlocksql_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlocksql"
	"github.com/dlock-dev/dlock/fenced"
)

// openDB creates a SQLite database file with the accounts table and account
// 1 (balance 100), and returns n handles on it, as n processes would have.
func openDB(t *testing.T, n int) []*sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "bank.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)"
	var dbs []*sql.DB
	for i := 0; i < n; i++ {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := dbs[0].ExecContext(ctx, dlocksql.Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := dbs[0].ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (1, 100)`); err != nil {
		t.Fatal(err)
	}
	return dbs
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantBalance(t *testing.T, db *sql.DB, id, balance int64, fence uint64) {
	t.Helper()
	b, f, err := dlocksql.Balance(context.Background(), db, id)
	if err != nil {
		t.Fatal(err)
	}
	if b != balance || f != fence {
		t.Fatalf("account %d: balance %d, fence %d; want %d, %d", id, b, f, balance, fence)
	}
}

// TestPausedHolderRefused: A takes the lock and withdraws 30; it pauses
// past its lease (ignoring Lost, on purpose); B takes the lock and
// deposits 50; A wakes and withdraws 30 again, computed from the balance
// it read before its pause, with its old fence: the database refuses it,
// and B's write survives.
func TestPausedHolderRefused(t *testing.T) {
	dbs := openDB(t, 2)
	dbA, dbB := dbs[0], dbs[1]
	srv := dlocktest.Start(t)
	ca, cb := srv.Client(), srv.Client()
	la, lb := dlock.New(ca), dlock.New(cb)
	t.Cleanup(func() {
		for _, l := range []*dlock.Locker{la, lb} {
			if err := l.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		ca.Close()
		cb.Close()
	})
	ctx := ctxTimeout(t, 20*time.Second)
	const key = "account:1"

	a, err := la.Acquire(ctx, key, dlock.WithTTL(150*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	balanceA, _, err := dlocksql.Balance(ctx, dbA, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := dlocksql.Update(ctx, dbA, 1, balanceA-30, a.Fence()); err != nil {
		t.Fatal(err)
	}
	balanceA -= 30
	wantBalance(t, dbA, 1, 70, a.Fence())

	// A pauses. B waits for the lock, and gets it once A's lease has run
	// out in Redis.
	b, err := lb.Acquire(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	select {
	case <-a.Lost():
	default:
		t.Fatal("B acquired the lock while A's Lost was still open")
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d ≤ A's %d", b.Fence(), a.Fence())
	}
	balanceB, _, err := dlocksql.Balance(ctx, dbB, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := dlocksql.Update(ctx, dbB, 1, balanceB+50, b.Fence()); err != nil {
		t.Fatal(err)
	}

	// A wakes, unaware, and withdraws again from what it read.
	err = dlocksql.Update(ctx, dbA, 1, balanceA-30, a.Fence())
	var se *fenced.StaleError
	if !errors.Is(err, fenced.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("A's late write: %v, want a *fenced.StaleError", err)
	}
	if want := (fenced.StaleError{Key: "1", Fence: a.Fence(), Seen: b.Fence()}); *se != want {
		t.Fatalf("StaleError = %+v, want %+v", *se, want)
	}
	wantBalance(t, dbB, 1, 120, b.Fence())
	if err := a.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("A's Release: %v, want ErrNotHeld", err)
	}
}

// TestOneWritePerHolder: fence < $f refuses a second write with the same
// fence (Seen == Fence); a holder that writes a row several times under one
// lock uses fence <= $f.
func TestOneWritePerHolder(t *testing.T) {
	db := openDB(t, 1)[0]
	ctx := ctxTimeout(t, 10*time.Second)
	if err := dlocksql.Update(ctx, db, 1, 10, 7); err != nil {
		t.Fatal(err)
	}
	err := dlocksql.Update(ctx, db, 1, 20, 7)
	var se *fenced.StaleError
	if !errors.As(err, &se) || se.Seen != 7 || se.Fence != 7 {
		t.Fatalf("second write with fence 7: %v, want refused with Seen 7", err)
	}
	wantBalance(t, db, 1, 10, 7)

	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`, 20, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("fence <= $f with an equal fence: %d rows, want 1", n)
	}
	res, err = db.ExecContext(ctx,
		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`, 30, 6, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("fence <= $f with a smaller fence: %d rows, want 0", n)
	}
	wantBalance(t, db, 1, 20, 7)
}

func TestErrors(t *testing.T) {
	db := openDB(t, 1)[0]
	ctx := ctxTimeout(t, 10*time.Second)
	if err := dlocksql.Update(ctx, db, 2, 1, 1); !errors.Is(err, dlocksql.ErrNoAccount) || errors.Is(err, fenced.ErrStale) {
		t.Errorf("Update of a missing account: %v, want ErrNoAccount", err)
	}
	if _, _, err := dlocksql.Balance(ctx, db, 2); !errors.Is(err, dlocksql.ErrNoAccount) {
		t.Errorf("Balance of a missing account: %v, want ErrNoAccount", err)
	}
	for _, f := range []uint64{0, math.MaxInt64 + 1, math.MaxUint64} {
		if err := dlocksql.Update(ctx, db, 1, 1, f); !errors.Is(err, fenced.ErrInvalid) {
			t.Errorf("fence %d: %v, want ErrInvalid", f, err)
		}
	}
	if err := dlocksql.Update(ctx, db, 1, 1, math.MaxInt64); err != nil {
		t.Errorf("fence 2^63-1: %v", err)
	}
	wantBalance(t, db, 1, 1, math.MaxInt64)
}

// TestConcurrentWriters: writers with distinct fences race on one row,
// through handles of their own; the largest fence's write is the one left.
func TestConcurrentWriters(t *testing.T) {
	const writers, each = 4, 25
	dbs := openDB(t, writers)
	ctx := ctxTimeout(t, 30*time.Second)
	var wg sync.WaitGroup
	for w, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				fence := uint64(1<<53 + i*writers + w)
				if i%2 == 1 {
					fence = uint64(math.MaxInt64) - uint64(i/2*writers+w)
				}
				err := dlocksql.Update(ctx, db, 1, int64(fence%1000), fence)
				var se *fenced.StaleError
				if err != nil && !(errors.As(err, &se) && se.Seen >= fence) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wantBalance(t, dbs[0], 1, int64(uint64(math.MaxInt64)%1000), math.MaxInt64)
}
