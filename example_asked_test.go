package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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

func ExampleLocker_RequestLeadership() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ctx := context.Background()

	// The leader, and a candidate that waits (each in its own process).
	a, b := dlock.New(client), dlock.New(client)
	defer a.Close()
	defer b.Close()
	leader, err := a.Campaign(ctx, "example:scheduler", "host-a")
	if err != nil {
		fmt.Println(err)
		return
	}
	elected := make(chan *dlock.Lock)
	go func() {
		k, _ := b.Campaign(ctx, "example:scheduler", "host-b")
		elected <- k
	}()

	// host-b asks for the leadership once its Campaign waits.
	for {
		err := b.RequestLeadership(ctx, "example:scheduler", "host-a is being drained")
		if err == nil {
			break
		} else if !errors.Is(err, dlock.ErrInvalid) { // not waiting yet
			fmt.Println(err)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}

	<-leader.Asked() // host-a resigns at a safe point
	fmt.Println("host-a asked:", leader.AskedReason())
	leader.Release(ctx)

	k := <-elected
	defer k.Release(ctx)
	ld, _ := b.Leader(ctx, "example:scheduler")
	fmt.Println("leader:", ld.Value)
	// Output:
	// host-a asked: host-a is being drained
	// leader: host-b
}
