// SPDX-License-Identifier: Apache-2.0

// Package dlocksql shows fenced writes to a SQL database: the check that
// makes a dlock fencing token protect the data, done by the database in
// the UPDATE itself. Each row carries the fence of its last write (or
// claim), and a statement goes through only if the writer's fence is not
// older; one that changes no row tells a stale writer (a holder that lost
// its lock, paused past its lease, and came back with its old fence) or a
// missing row, and the functions read the row's fence to say which.
//
// # A change the database can compute: one statement
//
// When the new value follows from the row itself, the write is one
// statement, with no read before it ([Add]):
//
//	UPDATE accounts SET balance = balance + $1, fence = $2 WHERE id = $3 AND fence < $2
//
// The condition, the computation and the write are one statement, so no
// other writer comes between them, at any isolation level. A former
// holder's statement is refused once a newer holder's has run; one that
// ran before it is not lost, since the newer holder's adds to the balance
// as it is then. The fence must be strictly smaller: a dlock fence is
// issued to one acquisition and later acquisitions of the key get larger
// ones, so an equal fence in the row is this holder's own earlier write,
// and the condition makes a retry of a statement whose reply was lost
// harmless (refused, with Seen equal to Fence: the first try was done, and
// the delta is not applied twice). It also means one Add per row and
// holding: combine the deltas, or use Claim and Update.
//
// # Read, compute, write back: claim first
//
// A plain read followed by a fenced write is not safe, and the check does
// not notice. The row's fence is 4. B, the new holder (fence 6), reads
// balance 100. A, a former holder paused past its lease (fence 5), writes
// 70: accepted, 4 < 5. B writes 150: accepted, 5 < 6. A's withdrawal is
// lost, and A was told nothing. The fences order the writes, not a read
// against a write.
//
// So a holder records its fence in the row before it reads ([Claim]), and
// writes back under <= ([Update]):
//
//	UPDATE accounts SET fence = $1 WHERE id = $2 AND fence <= $1   -- 0 rows: stale (or no row)
//	SELECT balance, fence FROM accounts WHERE id = $1             -- fence > $1: stale
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// From the claim on, A's write is refused and A is told; a write of A's
// that ran before the claim is what B reads. The write back accepts an
// equal fence because the row now holds B's own: fences strictly increase
// per lock key across holders, so an equal fence is the same holder, and a
// newer holder's claim (a larger fence) refuses B's write as it should. The
// statements need no transaction; run them in one (db a *sql.Tx) to commit
// the write together with other changes.
//
// # Blind writes
//
// [Update] alone suits a write that does not depend on what the row holds
// (a value computed from elsewhere): a stale write is refused once a newer
// holder has written or claimed, and one that runs before is overwritten by
// the newer holder's, as it would have been had it come in time. It sets a
// value, so a retry is harmless, and a holder may write a row several times
// under one lock. After a plain read ([Balance]) it is the unsafe pattern
// above.
//
// The check does not order one holder's Updates against each other (their
// fences are equal): an Update whose outcome is unknown (a timeout, a
// broken connection) may still run in the database after the holder's next
// statement, and overwrite it. After such an error, retry the same Update
// before writing the row otherwise; where a late run must be ruled out,
// make the next write under a new acquisition of the lock, whose larger
// fence refuses the late one. (A late Add is refused once the row holds its
// fence; a late Claim changes nothing.)
//
// # What the guarantee needs
//
// Every writer of the rows holds the same dlock key (one lock per row, or
// one per table: fences of different keys are not comparable) and writes
// through these statements; rows start with fence 0 (dlock's fences start
// at 1). The column is a signed 64-bit integer, which holds every dlock
// fence (no dlock fence exceeds 2^63-1).
//
// The package is an example, on the table in [Schema]; its test runs it on
// SQLite (modernc.org/sqlite, in pure Go) with real dlock locks on a real
// redis-server. The same statements run on PostgreSQL. MySQL writes the
// placeholders as ? (and repeats the fence argument), and by default counts
// a row that an UPDATE matched but left as it was (a repeated claim) as not
// affected; the functions read the fence back then, and see it done. For
// data kept in Redis the same check is github.com/dlock-dev/dlock/fenced.
package dlocksql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/dlock-dev/dlock/fenced"
)

// Schema creates the example's table: every row carries the fence of its
// last write or claim, 0 before the first.
const Schema = `CREATE TABLE IF NOT EXISTS accounts (
	id      INTEGER PRIMARY KEY,
	balance INTEGER NOT NULL,
	fence   INTEGER NOT NULL DEFAULT 0
)`

// ErrNoAccount is returned (wrapped) for an account that does not exist.
var ErrNoAccount = errors.New("dlocksql: no such account")

// DB is what the functions run on: a *sql.DB, *sql.Tx or *sql.Conn.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Add adds delta to the balance of account id in one statement, if fence is
// larger than the fence of the account's last write or claim, and records
// fence. Otherwise it changes nothing and returns a [*fenced.StaleError]
// (matching [fenced.ErrStale], Key the account's id in decimal, Seen the
// row's fence), or [ErrNoAccount].
//
// Seen larger than Fence: a newer holder has written or claimed the row;
// the lock was lost. Seen equal to Fence: this holder's own earlier Add,
// Update or Claim of the row under this lock; for a retry of an Add whose
// outcome was unknown, the first try was done. A fence of 0 or above
// 2^63-1 is an error wrapping [fenced.ErrInvalid], and nothing is sent.
func Add(ctx context.Context, db DB, id, delta int64, fence uint64) error {
	f, err := column(fence)
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = balance + $1, fence = $2 WHERE id = $3 AND fence < $2`,
		delta, f, id)
	return checked(ctx, db, "add to", id, fence, false, res, err)
}

// Claim records fence as the fence of account id, if it is not smaller than
// the row's, and returns the balance, read after the claim: the read of a
// read-modify-write, to be written back with [Update] and the same fence.
// From the claim on, writes and claims with a smaller fence are refused, so
// that no former holder's write can land between the read and the write
// back, and be lost under it.
//
// It returns a [*fenced.StaleError] (Seen larger than Fence) if the row has
// seen a larger fence, at the claim or by the read, and [ErrNoAccount] for
// a missing account. Claiming again with the same fence is not an error.
func Claim(ctx context.Context, db DB, id int64, fence uint64) (balance int64, err error) {
	f, err := column(fence)
	if err != nil {
		return 0, err
	}
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET fence = $1 WHERE id = $2 AND fence <= $1`, f, id)
	if err := checked(ctx, db, "claim", id, fence, true, res, err); err != nil {
		return 0, err
	}
	balance, seen, err := Balance(ctx, db, id)
	if err != nil {
		return 0, err
	}
	if seen != fence {
		// A newer holder claimed or wrote between the two statements: what
		// was read is theirs, and a write back would be refused.
		return 0, refused("claim", id, fence, seen)
	}
	return balance, nil
}

// Update sets the balance of account id, if fence is not smaller than the
// fence of the account's last write or claim, and records fence.
// Otherwise it changes nothing and returns a [*fenced.StaleError] (Seen
// larger than Fence: the lock was lost), or [ErrNoAccount]. A fence of 0 or
// above 2^63-1 is an error wrapping [fenced.ErrInvalid], and nothing is
// sent.
//
// Update is safe as the write back after a [Claim] with the same fence, and
// as a blind write, whose balance does not depend on what the row held. It
// is not safe after a plain read ([Balance]): a former holder's write
// between the read and the Update is accepted, then overwritten, and nobody
// is told (see the package documentation).
func Update(ctx context.Context, db DB, id, balance int64, fence uint64) error {
	f, err := column(fence)
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
		balance, f, id)
	return checked(ctx, db, "update", id, fence, true, res, err)
}

// Balance returns the balance of account id and the fence of its last
// write or claim (0 if none), or ErrNoAccount. It checks nothing: it suits
// readers that do not hold the lock. A holder that will write back what it
// computes from the balance reads it with [Claim].
func Balance(ctx context.Context, db DB, id int64) (balance int64, fence uint64, err error) {
	var f int64
	err = db.QueryRowContext(ctx, `SELECT balance, fence FROM accounts WHERE id = $1`, id).Scan(&balance, &f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, fmt.Errorf("%w: %d", ErrNoAccount, id)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("dlocksql: read account %d: %w", id, err)
	}
	return balance, uint64(f), nil
}

// checked returns the outcome of a fenced UPDATE of account id: nil if it
// changed the row, otherwise why not. equal tells whether the statement
// accepts a fence equal to the row's (fence <= $f).
func checked(ctx context.Context, db DB, op string, id int64, fence uint64, equal bool, res sql.Result, err error) error {
	if err != nil {
		return fmt.Errorf("dlocksql: %s account %d: %w", op, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("dlocksql: %s account %d: %w", op, id, err)
	}
	if n == 1 {
		return nil
	}
	// No row changed: say why. This read comes after the UPDATE, so the
	// fence it sees is at least the one that refused it (fences in a row
	// only grow).
	_, seen, err := Balance(ctx, db, id)
	if err != nil {
		return err
	}
	if equal && seen == fence {
		// The row matched but was left as it was: MySQL does not count it
		// unless the connection sets clientFoundRows.
		return nil
	}
	return refused(op, id, fence, seen)
}

// refused returns the error for an account whose fence, seen, refuses
// fence: a [*fenced.StaleError], unless seen is smaller, which only a
// writer outside the check can have done.
func refused(op string, id int64, fence, seen uint64) error {
	if seen < fence {
		return fmt.Errorf("dlocksql: %s account %d: refused, yet its fence is now %d, below %d: written outside the check", op, id, seen, fence)
	}
	return &fenced.StaleError{Key: strconv.FormatInt(id, 10), Fence: fence, Seen: seen}
}

// column converts a fence for a signed 64-bit column.
func column(fence uint64) (int64, error) {
	if fence == 0 || fence > math.MaxInt64 {
		return 0, fmt.Errorf("%w: fence %d is not in 1..2^63-1", fenced.ErrInvalid, fence)
	}
	return int64(fence), nil
}
