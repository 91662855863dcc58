package dlockrueidis_test

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/dlock-dev/dlock/extra/dlockrueidis"
)

// A Locker on a rueidis client: the same Locker as dlock.New gives on a
// go-redis client.
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	locker := dlockrueidis.New(client)
	defer locker.Close() // before the client

	ctx := context.Background()
	lock, err := locker.Acquire(ctx, "payout:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	fmt.Println("fence", lock.Fence())
}

// Over three independent masters (Redlock): one rueidis client each.
func ExampleNewRedlock() {
	var clients []rueidis.Client
	for _, addr := range []string{"127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"} {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := dlockrueidis.NewRedlock(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	if lock, err := locker.TryAcquire(context.Background(), "report"); err == nil {
		defer lock.Release(context.Background())
	}
}
