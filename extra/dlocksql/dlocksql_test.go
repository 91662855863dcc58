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

// setFence sets the fence of account 1, as an earlier holder's write would
// have left it.
func setFence(t *testing.T, db *sql.DB, fence uint64) {
	t.Helper()
	if _, err := db.Exec(`UPDATE accounts SET fence = $1 WHERE id = 1`, int64(fence)); err != nil {
		t.Fatal(err)
	}
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

// wantStale checks that err is a refusal of fence by account 1, which had
// seen seen.
func wantStale(t *testing.T, what string, err error, fence, seen uint64) {
	t.Helper()
	var se *fenced.StaleError
	if !errors.Is(err, fenced.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("%s: %v, want a *fenced.StaleError", what, err)
	}
	if want := (fenced.StaleError{Key: "1", Fence: fence, Seen: seen}); *se != want {
		t.Fatalf("%s: StaleError = %+v, want %+v", what, *se, want)
	}
}

// TestReadThenWriteLosesAWrite shows why a read-modify-write needs Claim:
// with a plain read (Balance) before a fenced write, a former holder's
// write that lands between the new holder's read and write is accepted and
// then overwritten, and nobody is told. The fence check orders writes, not
// a read against a write.
func TestReadThenWriteLosesAWrite(t *testing.T) {
	db := openDB(t, 1)[0]
	ctx := ctxTimeout(t, 10*time.Second)
	setFence(t, db, 4)
	const fenceA, fenceB = 5, 6 // A: a former holder, paused; B: the holder

	balanceB, _, err := dlocksql.Balance(ctx, db, 1) // B reads 100
	if err != nil || balanceB != 100 {
		t.Fatalf("B's read: %d, %v", balanceB, err)
	}
	if err := dlocksql.Update(ctx, db, 1, 70, fenceA); err != nil { // A withdraws 30: 4 < 5
		t.Fatalf("A's write: %v", err)
	}
	if err := dlocksql.Update(ctx, db, 1, balanceB+50, fenceB); err != nil { // B deposits 50: 5 < 6
		t.Fatalf("B's write: %v", err)
	}
	// A's withdrawal is gone, and A was told nothing.
	wantBalance(t, db, 1, 150, fenceB)
}

// TestAddKeepsOrRefusesAFormerHolder runs the same scenario with Add, one
// statement that computes from the row: A's withdrawal is either applied
// along with B's deposit, or refused, and A is told.
func TestAddKeepsOrRefusesAFormerHolder(t *testing.T) {
	const fenceA, fenceB = 5, 6
	t.Run("A before B", func(t *testing.T) {
		db := openDB(t, 1)[0]
		ctx := ctxTimeout(t, 10*time.Second)
		setFence(t, db, 4)
		if err := dlocksql.Add(ctx, db, 1, -30, fenceA); err != nil {
			t.Fatalf("A's Add: %v", err)
		}
		if err := dlocksql.Add(ctx, db, 1, 50, fenceB); err != nil {
			t.Fatalf("B's Add: %v", err)
		}
		wantBalance(t, db, 1, 120, fenceB) // both applied
		// A again, once B has written: refused.
		wantStale(t, "A's late Add", dlocksql.Add(ctx, db, 1, -30, fenceA), fenceA, fenceB)
		wantBalance(t, db, 1, 120, fenceB)
	})
	t.Run("B before A", func(t *testing.T) {
		db := openDB(t, 1)[0]
		ctx := ctxTimeout(t, 10*time.Second)
		setFence(t, db, 4)
		if err := dlocksql.Add(ctx, db, 1, 50, fenceB); err != nil {
			t.Fatalf("B's Add: %v", err)
		}
		wantStale(t, "A's Add", dlocksql.Add(ctx, db, 1, -30, fenceA), fenceA, fenceB)
		wantBalance(t, db, 1, 150, fenceB)
	})
	t.Run("retry", func(t *testing.T) {
		// An Add retried with the same fence (its reply was lost) is
		// refused, with Seen equal to Fence: the first try was done, and
		// the amount is not added twice.
		db := openDB(t, 1)[0]
		ctx := ctxTimeout(t, 10*time.Second)
		if err := dlocksql.Add(ctx, db, 1, 10, 7); err != nil {
			t.Fatal(err)
		}
		wantStale(t, "the retry", dlocksql.Add(ctx, db, 1, 10, 7), 7, 7)
		wantBalance(t, db, 1, 110, 7)
	})
}

// TestClaimRefusesAFormerHolder runs the scenario with Claim and Update: once
// B has claimed the row, A's write is refused and A is told; B's write
// goes through. A write of A's before B's claim is what B reads.
func TestClaimRefusesAFormerHolder(t *testing.T) {
	const fenceA, fenceB = 5, 6
	t.Run("A after the claim", func(t *testing.T) {
		db := openDB(t, 1)[0]
		ctx := ctxTimeout(t, 10*time.Second)
		setFence(t, db, 4)
		balanceB, err := dlocksql.Claim(ctx, db, 1, fenceB)
		if err != nil || balanceB != 100 {
			t.Fatalf("B's Claim: %d, %v; want 100", balanceB, err)
		}
		wantStale(t, "A's Update", dlocksql.Update(ctx, db, 1, 70, fenceA), fenceA, fenceB)
		if err := dlocksql.Update(ctx, db, 1, balanceB+50, fenceB); err != nil {
			t.Fatalf("B's Update: %v", err)
		}
		wantBalance(t, db, 1, 150, fenceB)
		_, err = dlocksql.Claim(ctx, db, 1, fenceA)
		wantStale(t, "A's Claim", err, fenceA, fenceB)
		wantStale(t, "A's Add", dlocksql.Add(ctx, db, 1, -30, fenceA), fenceA, fenceB)
		wantBalance(t, db, 1, 150, fenceB)
	})
	t.Run("A before the claim", func(t *testing.T) {
		db := openDB(t, 1)[0]
		ctx := ctxTimeout(t, 10*time.Second)
		setFence(t, db, 4)
		if err := dlocksql.Update(ctx, db, 1, 70, fenceA); err != nil {
			t.Fatalf("A's Update: %v", err)
		}
		balanceB, err := dlocksql.Claim(ctx, db, 1, fenceB)
		if err != nil || balanceB != 70 {
			t.Fatalf("B's Claim: %d, %v; want 70", balanceB, err)
		}
		if err := dlocksql.Update(ctx, db, 1, balanceB+50, fenceB); err != nil {
			t.Fatalf("B's Update: %v", err)
		}
		wantBalance(t, db, 1, 120, fenceB)
	})
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
	balanceA, err := dlocksql.Claim(ctx, dbA, 1, a.Fence())
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
	balanceB, err := dlocksql.Claim(ctx, dbB, 1, b.Fence())
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
	if err := dlocksql.Add(ctx, dbA, 1, -30, a.Fence()); !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("A's late Add: %v, want ErrStale", err)
	}
	wantBalance(t, dbB, 1, 120, b.Fence())
	if err := a.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("A's Release: %v, want ErrNotHeld", err)
	}
}

// TestWritesPerHolder: Claim and Update accept the fence the row holds (the
// same holder, writing again); Add refuses it (one Add per holder and row,
// so that a retried Add is not applied twice); all refuse a smaller one.
func TestWritesPerHolder(t *testing.T) {
	db := openDB(t, 1)[0]
	ctx := ctxTimeout(t, 10*time.Second)
	if err := dlocksql.Update(ctx, db, 1, 10, 7); err != nil {
		t.Fatal(err)
	}
	if err := dlocksql.Update(ctx, db, 1, 20, 7); err != nil {
		t.Fatalf("second Update with fence 7: %v", err)
	}
	if b, err := dlocksql.Claim(ctx, db, 1, 7); err != nil || b != 20 {
		t.Fatalf("Claim with fence 7: %d, %v; want 20", b, err)
	}
	wantStale(t, "Add with fence 7", dlocksql.Add(ctx, db, 1, 1, 7), 7, 7)
	wantStale(t, "Update with fence 6", dlocksql.Update(ctx, db, 1, 30, 6), 6, 7)
	_, err := dlocksql.Claim(ctx, db, 1, 6)
	wantStale(t, "Claim with fence 6", err, 6, 7)
	wantBalance(t, db, 1, 20, 7)
	if err := dlocksql.Add(ctx, db, 1, 5, 8); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, db, 1, 25, 8)
}

// unchangedNotCounted reports 0 rows for every UPDATE that leaves the row's
// values as they were, as MySQL does unless the connection sets
// clientFoundRows.
type unchangedNotCounted struct{ *sql.DB }

type noRows struct{ sql.Result }

func (noRows) RowsAffected() (int64, error) { return 0, nil }

func (d unchangedNotCounted) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var before, after [2]int64
	read := func(v *[2]int64) error {
		return d.DB.QueryRowContext(ctx, `SELECT balance, fence FROM accounts WHERE id = 1`).Scan(&v[0], &v[1])
	}
	if err := read(&before); err != nil {
		return nil, err
	}
	res, err := d.DB.ExecContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	if err := read(&after); err != nil {
		return nil, err
	}
	if before == after {
		return noRows{res}, nil
	}
	return res, nil
}

// TestUnchangedRowNotCounted: a repeated Claim or Update with the row's own
// fence that changes nothing is done, even where the database reports 0
// rows for it.
func TestUnchangedRowNotCounted(t *testing.T) {
	sdb := openDB(t, 1)[0]
	db := unchangedNotCounted{sdb}
	ctx := ctxTimeout(t, 10*time.Second)
	if b, err := dlocksql.Claim(ctx, db, 1, 3); err != nil || b != 100 {
		t.Fatalf("Claim: %d, %v", b, err)
	}
	if b, err := dlocksql.Claim(ctx, db, 1, 3); err != nil || b != 100 {
		t.Fatalf("Claim again: %d, %v", b, err)
	}
	if err := dlocksql.Update(ctx, db, 1, 100, 3); err != nil {
		t.Fatalf("Update to the same balance: %v", err)
	}
	wantStale(t, "Update with fence 2", dlocksql.Update(ctx, db, 1, 1, 2), 2, 3)
	wantBalance(t, sdb, 1, 100, 3)
}

func TestErrors(t *testing.T) {
	db := openDB(t, 1)[0]
	ctx := ctxTimeout(t, 10*time.Second)
	missing := map[string]error{
		"Update": dlocksql.Update(ctx, db, 2, 1, 1),
		"Add":    dlocksql.Add(ctx, db, 2, 1, 1),
		"Claim":  func() error { _, err := dlocksql.Claim(ctx, db, 2, 1); return err }(),
		"Balance": func() error {
			_, _, err := dlocksql.Balance(ctx, db, 2)
			return err
		}(),
	}
	for name, err := range missing {
		if !errors.Is(err, dlocksql.ErrNoAccount) || errors.Is(err, fenced.ErrStale) {
			t.Errorf("%s of a missing account: %v, want ErrNoAccount", name, err)
		}
	}
	for _, f := range []uint64{0, math.MaxInt64 + 1, math.MaxUint64} {
		if err := dlocksql.Update(ctx, db, 1, 1, f); !errors.Is(err, fenced.ErrInvalid) {
			t.Errorf("Update, fence %d: %v, want ErrInvalid", f, err)
		}
		if err := dlocksql.Add(ctx, db, 1, 1, f); !errors.Is(err, fenced.ErrInvalid) {
			t.Errorf("Add, fence %d: %v, want ErrInvalid", f, err)
		}
		if _, err := dlocksql.Claim(ctx, db, 1, f); !errors.Is(err, fenced.ErrInvalid) {
			t.Errorf("Claim, fence %d: %v, want ErrInvalid", f, err)
		}
	}
	wantBalance(t, db, 1, 100, 0)
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
				if err != nil && !(errors.As(err, &se) && se.Seen > fence) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	wantBalance(t, dbs[0], 1, int64(uint64(math.MaxInt64)%1000), math.MaxInt64)
}

// TestConcurrentHolders: workers, each with a Locker and a database handle
// of its own, take the lock in turn and add 1, half with Claim and Update
// (read, compute, write back), half with Add: no update is lost, and none
// is refused.
func TestConcurrentHolders(t *testing.T) {
	const workers, each = 4, 10
	dbs := openDB(t, workers)
	srv := dlocktest.Start(t)
	ctx := ctxTimeout(t, 60*time.Second)
	var wg sync.WaitGroup
	for w, db := range dbs {
		c := srv.Client()
		l := dlock.New(c)
		t.Cleanup(func() {
			if err := l.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			c.Close()
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := l.Do(ctx, "account:1", func(ctx context.Context) error {
					lock, _ := dlock.LockFromContext(ctx)
					if w%2 == 0 {
						return dlocksql.Add(ctx, db, 1, 1, lock.Fence())
					}
					b, err := dlocksql.Claim(ctx, db, 1, lock.Fence())
					if err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
					return dlocksql.Update(ctx, db, 1, b+1, lock.Fence())
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b, _, err := dlocksql.Balance(ctx, dbs[0], 1)
	if err != nil || b != 100+workers*each {
		t.Fatalf("balance %d, %v; want %d", b, err, 100+workers*each)
	}
}
