package dlock_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

func ExampleLocker_RequestRelease() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ctx := context.Background()

	// The holder: a long job that can stop at a safe point when asked.
	worker := dlock.New(client)
	defer worker.Close()
	lock, err := worker.TryAcquire(ctx, "example:reindex")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	asked := lock.Asked() // from here on its Locker listens for requests

	// Another process (here another Locker) asks it to let go.
	admin := dlock.New(client)
	defer admin.Close()
	if err := admin.RequestRelease(ctx, "example:reindex", "deploying v2"); err != nil {
		fmt.Println("request:", err)
		return
	}

	<-asked // in a real job: a select beside the work and lock.Lost()
	fmt.Println("asked to release:", lock.AskedReason())
	if err := lock.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	// Output: asked to release: deploying v2
}
