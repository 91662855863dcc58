package fenced_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/fenced"
)

func ExampleStore_Set() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	store := fenced.New(client)
	ctx := context.Background()

	// Every writer of "report" holds the lock "report" and writes with its
	// fence.
	lock, err := locker.Acquire(ctx, "report")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	if err := store.Set(ctx, "report", "v2", lock.Fence()); err != nil {
		fmt.Println(err)
		return
	}

	// A former holder, paused past its lease, comes back with its older
	// fence: refused, and the value is kept.
	err = store.Set(ctx, "report", "v1", lock.Fence()-1)
	var stale *fenced.StaleError
	if errors.As(err, &stale) {
		fmt.Println("refused:", errors.Is(err, fenced.ErrStale), stale.Seen == lock.Fence())
	}
	value, _, _ := store.Get(ctx, "report")
	fmt.Println(value)
	// Output:
	// refused: true true
	// v2
}

func ExampleStore_Claim() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	store := fenced.New(client)
	ctx := context.Background()

	lock, err := locker.Acquire(ctx, "balance:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)

	// Add 10 to a balance: read, compute, write back. Claim reads it and
	// shuts out every older holder at once, so that no write of theirs can
	// land between the read and the write, and be lost.
	v, found, err := store.Claim(ctx, "balance:7", lock.Fence())
	if err != nil {
		fmt.Println(err)
		return
	}
	balance := 0
	if found {
		balance, _ = strconv.Atoi(v)
	}
	if err := store.Set(ctx, "balance:7", strconv.Itoa(balance+10), lock.Fence()); err != nil {
		fmt.Println(err)
		return
	}
	v, _, _ = store.Get(ctx, "balance:7")
	fmt.Println(v)
	// Output: 10
}
