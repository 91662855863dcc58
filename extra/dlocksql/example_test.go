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

// exampleBank returns an in-memory database with account 42 (balance 100)
// and a Locker, and a function that closes them.
func exampleBank(ctx context.Context) (*sql.DB, *dlock.Locker, func(), error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, nil, nil, err
	}
	db.SetMaxOpenConns(1) // one in-memory database, not one per connection
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	locker := dlock.New(client)
	closeAll := func() {
		locker.Close()
		client.Close()
		db.Close()
	}
	for _, q := range []string{dlocksql.Schema, `INSERT INTO accounts (id, balance) VALUES (42, 100)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
	}
	return db, locker, closeAll, nil
}

// A change that the database computes from the row is one statement: no
// read, so nothing to lose between a read and a write.
func ExampleAdd() {
	ctx := context.Background()
	db, locker, closeAll, err := exampleBank(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll()

	// The writers of account 42 hold the lock "account:42" and write with
	// its fence.
	err = locker.Do(ctx, "account:42", func(ctx context.Context) error {
		lock, _ := dlock.LockFromContext(ctx)
		if err := dlocksql.Add(ctx, db, 42, 50, lock.Fence()); err != nil {
			return err // ErrStale: the lock was lost, stop
		}

		// A former holder, paused past its lease, comes back with an
		// older fence: the database refuses it, and it is told.
		err := dlocksql.Add(ctx, db, 42, -30, lock.Fence()-1)
		fmt.Println("former holder stale:", errors.Is(err, fenced.ErrStale))
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	balance, _, _ := dlocksql.Balance(ctx, db, 42)
	fmt.Println("balance:", balance)
	// Output:
	// former holder stale: true
	// balance: 150
}

// A read-modify-write: Claim records the holder's fence as it reads, so that
// a former holder's write cannot land between the read and the write back.
func ExampleClaim() {
	ctx := context.Background()
	db, locker, closeAll, err := exampleBank(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll()

	lock, err := locker.Acquire(ctx, "account:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	balance, err := dlocksql.Claim(ctx, db, 42, lock.Fence())
	if err != nil {
		fmt.Println(err)
		return
	}

	// A former holder writes with its older fence between the read and the
	// write back: refused, since the row holds the claim.
	err = dlocksql.Update(ctx, db, 42, 70, lock.Fence()-1)
	fmt.Println("former holder stale:", errors.Is(err, fenced.ErrStale))

	// Double it, if it is under 1000 (not one statement's work).
	if balance < 1000 {
		balance *= 2
	}
	if err := dlocksql.Update(ctx, db, 42, balance, lock.Fence()); errors.Is(err, fenced.ErrStale) {
		fmt.Println("the lock was lost: stop")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	balance, fence, _ := dlocksql.Balance(ctx, db, 42)
	fmt.Println("balance:", balance, "fence is the lock's:", fence == lock.Fence())
	// Output:
	// former holder stale: true
	// balance: 200 fence is the lock's: true
}
