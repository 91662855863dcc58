// Code generated from extra/dlockrueidis/example_test.go by generated_test.go; DO NOT EDIT.

package dlockvalkey_test

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/extra/dlockvalkey"
)

// A Locker on a valkey-go client: the same Locker as dlock.New gives on a
// go-redis client.
func ExampleNew() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	locker := dlockvalkey.New(client)
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

// Over three independent masters (Redlock): one valkey client each.
func ExampleNewRedlock() {
	var clients []valkey.Client
	for _, addr := range []string{"127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"} {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := dlockvalkey.NewRedlock(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	if lock, err := locker.TryAcquire(context.Background(), "report"); err == nil {
		defer lock.Release(context.Background())
	}
}
