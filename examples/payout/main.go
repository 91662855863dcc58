// SPDX-License-Identifier: Apache-2.0

// Command payout pays accounts out, each under a lock of its own, and has
// the database check the lock's fence in the UPDATE itself, so that a
// worker that lost its lock without knowing it cannot pay an account twice.
//
// A lock alone does not protect the data: a worker can pause (a GC pause,
// a VM stall, a slow disk) past its lease, another worker takes the lock
// and pays, and the first one wakes and pays again. The fence (Lock.Fence)
// goes with each write, and the database refuses a write whose fence is
// older than the row's: see the module
// github.com/dlock-dev/dlock/extra/dlocksql, whose statements this program
// runs on an in-memory SQLite database (modernc.org/sqlite, pure Go).
//
// Run it against a Redis on 127.0.0.1:6379, or the one in $REDIS_ADDR:
//
//	cd examples && go run ./payout
//	cd examples && REDIS_ADDR=127.0.0.1:6380 go run ./payout
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/extra/dlocksql"
	"github.com/dlock-dev/dlock/fenced"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := run(ctx, redisAddr(), os.Stdout)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "payout:", err)
		os.Exit(1)
	}
}

// redisAddr is $REDIS_ADDR, or 127.0.0.1:6379.
func redisAddr() string {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// payouts are the amounts to pay out, by account.
var payouts = []struct{ account, amount int64 }{{1, 30}, {2, 45}, {3, 20}}

func run(ctx context.Context, addr string, out io.Writer) error {
	client, err := connect(ctx, addr)
	if err != nil {
		return err
	}
	defer client.Close()
	db, err := openBank(ctx)
	if err != nil {
		return err
	}
	defer db.Close()

	// A Locker per worker, as separate processes would have.
	lockerA := dlock.New(client)
	defer lockerA.Close()
	lockerB := dlock.New(client)
	defer lockerB.Close()

	fmt.Fprintln(out, "accounts 1, 2 and 3 hold 100 each; each payout holds the account's lock and writes with its fence")
	for _, p := range payouts {
		err := lockerA.Do(ctx, accountKey(p.account), func(ctx context.Context) error {
			// ctx ends, with cause dlock.ErrLockLost, if the lock is lost.
			lock, _ := dlock.LockFromContext(ctx)
			return dlocksql.Add(ctx, db, p.account, -p.amount, lock.Fence())
		}, dlock.WithTTL(5*time.Second))
		if err != nil {
			return fmt.Errorf("account %d: %w", p.account, err)
		}
		balance, fence, err := dlocksql.Balance(ctx, db, p.account)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "worker-a: account %d: paid %d, balance %d (fence %d)\n", p.account, p.amount, balance, fence)
	}

	// Worker A takes account 2's lock for a second payout run, on a fixed
	// lease (no renewal, so that the pause below outlives it).
	const account, amount = 2, 25
	a, err := lockerA.Acquire(ctx, accountKey(account), dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		return err
	}
	defer a.Release(context.WithoutCancel(ctx)) // ErrNotHeld by then: it only cleans up
	fmt.Fprintf(out, "worker-a: account %d: took the lock (fence %d) to pay %d, then paused past its lease\n", account, a.Fence(), amount)
	select {
	case <-a.Lost(): // a paused worker would not even notice this
	case <-ctx.Done():
		return ctx.Err()
	}

	// Worker B waits for the lock, which Redis expires, and makes the
	// payout with its own, larger fence.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	b, err := lockerB.Acquire(wctx, accountKey(account), dlock.WithTTL(5*time.Second))
	cancel()
	if err != nil {
		return err
	}
	if err := dlocksql.Add(ctx, db, account, -amount, b.Fence()); err != nil {
		return err
	}
	fmt.Fprintf(out, "worker-b: account %d: took the lock (fence %d > %d), paid %d\n", account, b.Fence(), a.Fence(), amount)

	// Worker A wakes up and makes its payout, with its old fence.
	err = dlocksql.Add(ctx, db, account, -amount, a.Fence())
	var stale *fenced.StaleError
	if !errors.As(err, &stale) {
		return fmt.Errorf("worker-a's stale payout was not refused: %v", err)
	}
	fmt.Fprintf(out, "worker-a: account %d: refused stale write: fence %d, the row has seen %d; the payout is not made twice\n", account, stale.Fence, stale.Seen)
	if err := b.Release(ctx); err != nil {
		return err
	}

	for _, id := range []int64{1, 2, 3} {
		balance, _, err := dlocksql.Balance(ctx, db, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "account %d: balance %d\n", id, balance)
	}
	if balance, _, _ := dlocksql.Balance(ctx, db, account); balance != 100-45-amount {
		return fmt.Errorf("account %d: balance %d, want %d", account, balance, 100-45-amount)
	}
	fmt.Fprintln(out, "paid each payout once")
	return nil
}

// accountKey is the lock of an account: every writer of the account's row
// holds it, so that their fences are comparable.
func accountKey(id int64) string { return fmt.Sprintf("example:payout:account:%d", id) }

// openBank returns an in-memory database with the accounts 1, 2 and 3,
// holding 100 each.
func openBank(ctx context.Context) (*sql.DB, error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one in-memory database, not one per connection
	for _, q := range []string{
		dlocksql.Schema,
		`INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 100), (3, 100)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

// connect returns a client of the Redis at addr, once it answers PING.
func connect(ctx context.Context, addr string) (*redis.Client, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("no Redis at %s (set REDIS_ADDR to its host:port): %w", addr, err)
	}
	return client, nil
}
