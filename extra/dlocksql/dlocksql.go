// Package dlocksql shows fenced writes to a SQL database: the check that
// makes a dlock fencing token protect the data, done by the database in
// the UPDATE itself. Each row carries the fence of its last write, and a
// write goes through only if the writer's fence is larger:
//
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2
//
// One row changed: the write is done. None: the row has seen a fence at
// least as large (a holder that lost its lock, paused past its lease, and
// came back with its old fence), or it does not exist; [Update] reads the
// row's fence to say which. The condition and the write are one statement,
// so no other writer can come between them, at any isolation level.
//
// Strictly smaller (fence < $2) accepts one write per holder and row: a
// dlock fence is issued to one acquisition, and later acquisitions of the
// same key get larger ones, so two holders never share one. A holder that
// writes the same row several times under one lock uses fence <= $2
// instead, and then only statements that can run twice (set a value, not
// add to it): a retried statement whose reply was lost is accepted again.
// With < a retry after a lost reply is refused as if stale when the first
// attempt was done; run the write in a transaction with whatever else
// depends on it, and treat an unknown outcome of the COMMIT as the
// database's documentation says.
//
// What the guarantee needs: every writer of the rows holds the same dlock
// key (one lock per row, or one per table: fences of different keys are not
// comparable) and writes with this condition; rows start with fence 0
// (dlock's fences start at 1). The column is a signed 64-bit integer, which
// holds every dlock fence (no dlock fence exceeds 2^63-1).
//
// The package is an example, on the table in [Schema]; its test runs it on
// SQLite (modernc.org/sqlite, in pure Go) with real dlock locks on a real
// redis-server. The same statements run on PostgreSQL; MySQL writes the
// placeholders as ? (and repeats the fence argument). For data kept in Redis
// the same check is github.com/dlock-dev/dlock/fenced.
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
// last write, 0 before the first.
const Schema = `CREATE TABLE IF NOT EXISTS accounts (
	id      INTEGER PRIMARY KEY,
	balance INTEGER NOT NULL,
	fence   INTEGER NOT NULL DEFAULT 0
)`

// ErrNoAccount is returned by [Update] and [Balance] for an account that
// does not exist.
var ErrNoAccount = errors.New("dlocksql: no such account")

// DB is what the functions run on: a *sql.DB, *sql.Tx or *sql.Conn.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Update sets the balance of account id, if fence is larger than the fence
// of the account's last write, and records fence. Otherwise it changes
// nothing and returns a [*fenced.StaleError] (matching [fenced.ErrStale],
// Key the account's id in decimal, Seen the row's fence), or
// [ErrNoAccount]. A fence of 0 or above 2^63-1 is an error wrapping
// [fenced.ErrInvalid], and nothing is sent.
func Update(ctx context.Context, db DB, id, balance int64, fence uint64) error {
	f, err := column(fence)
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2`,
		balance, f, id)
	if err != nil {
		return fmt.Errorf("dlocksql: update account %d: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("dlocksql: update account %d: %w", id, err)
	}
	if n == 1 {
		return nil
	}
	// Nothing changed: say why. This read comes after the UPDATE, so the
	// fence it sees is at least the one that refused it (fences in a row
	// only grow).
	_, seen, err := Balance(ctx, db, id)
	if err != nil {
		return err
	}
	return &fenced.StaleError{Key: strconv.FormatInt(id, 10), Fence: fence, Seen: seen}
}

// Balance returns the balance of account id and the fence of its last
// write (0 if none), or ErrNoAccount.
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

// column converts a fence for a signed 64-bit column.
func column(fence uint64) (int64, error) {
	if fence == 0 || fence > math.MaxInt64 {
		return 0, fmt.Errorf("%w: fence %d is not in 1..2^63-1", fenced.ErrInvalid, fence)
	}
	return int64(fence), nil
}
