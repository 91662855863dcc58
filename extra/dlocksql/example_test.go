package dlocksql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/extra/dlocksql"
	"github.com/dlock-dev/dlock/fenced"
)

func ExampleUpdate() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database, not one per connection
	if _, err := db.ExecContext(ctx, dlocksql.Schema); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (42, 100)`); err != nil {
		fmt.Println(err)
		return
	}

	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	// The writers of account 42 hold the lock "account:42" and write with
	// its fence.
	lock, err := locker.Acquire(ctx, "account:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	if err := dlocksql.Update(ctx, db, 42, 150, lock.Fence()); err != nil {
		fmt.Println(err)
		return
	}

	// A former holder, paused past its lease, writes with its older fence:
	// the database refuses it.
	err = dlocksql.Update(ctx, db, 42, 0, lock.Fence()-1)
	fmt.Println("stale:", errors.Is(err, fenced.ErrStale))

	balance, fence, _ := dlocksql.Balance(ctx, db, 42)
	fmt.Println("balance:", balance, "fence is the lock's:", fence == lock.Fence())
	// Output:
	// stale: true
	// balance: 150 fence is the lock's: true
}
