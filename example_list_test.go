package dlock_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

func ExampleLocker_List() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ctx := context.Background()
	locker := dlock.New(client)
	defer locker.Close()

	// Two jobs hold their locks (in a fleet, each on its own host).
	for _, job := range []string{"example:job/backup", "example:job/report"} {
		lock, err := locker.TryAcquire(ctx, job, dlock.WithMetadata("host-a pid 4242"))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer lock.Release(ctx)
	}

	// An operator's view: every lock whose name matches, found with SCAN.
	locks, err := locker.List(ctx, "example:job/*")
	if err != nil {
		fmt.Println(err) // the locks found are returned too; the list may miss some
	}
	for _, st := range locks {
		fmt.Printf("%s held=%v by %q, %d waiting\n", st.Key, st.Held, st.Metadata, st.Waiters)
	}
	// Output:
	// example:job/backup held=true by "host-a pid 4242", 0 waiting
	// example:job/report held=true by "host-a pid 4242", 0 waiting
}
