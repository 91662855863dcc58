package dlock_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// A leader changes the value its observers see (here, the address it
// serves on) without a new election: the term stays.
func ExampleLock_Proclaim() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	leadership, err := locker.Campaign(ctx, "example:proclaim", "host-a:8080")
	if err != nil {
		fmt.Println("not elected:", err)
		return
	}
	defer leadership.Release(ctx)
	if err := leadership.Proclaim(ctx, "host-a:9090"); err != nil {
		fmt.Println("proclaim:", err) // ErrNotHeld: no longer the leader
		return
	}
	ld, err := locker.Leader(ctx, "example:proclaim")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ld.Value, ld.Term == leadership.Fence())
	// Output:
	// host-a:9090 true
}

// A semaphore's limit raised while it is held: the waiter is admitted at
// once, although it asked for the old limit (within LimitGrace).
func ExampleLocker_SetLimit() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	const key = "example:workers"
	var held []*dlock.Lock
	for range 2 {
		k, err := locker.TryAcquire(ctx, key, dlock.WithLimit(2))
		if err != nil {
			fmt.Println(err)
			return
		}
		held = append(held, k)
	}
	got := make(chan *dlock.Lock)
	go func() {
		k, _ := locker.Acquire(ctx, key, dlock.WithLimit(2)) // waits: both permits are held
		got <- k
	}()
	time.Sleep(100 * time.Millisecond) // let it wait (an example; tests use channels)
	if err := locker.SetLimit(ctx, key, 3); err != nil {
		fmt.Println(err)
		return
	}
	third := <-got
	st, _ := locker.Status(ctx, key)
	fmt.Println("limit", st.Limit, "permits", len(st.Permits))
	for _, k := range append(held, third) {
		k.Release(ctx)
	}
	// Output:
	// limit 3 permits 3
}

// A leader's readiness probe: 200 while it leads, 503 once it resigned.
func ExampleHealth() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	var health dlock.Health // http.Handle("/leader", &health)
	probe := func() int {
		rec := httptest.NewRecorder()
		health.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/leader", nil))
		return rec.Code
	}
	leadership, err := locker.Campaign(ctx, "example:health", "host-a")
	if err != nil {
		fmt.Println(err)
		return
	}
	health.Set(leadership)
	fmt.Println("leading:", probe())
	leadership.Release(ctx)
	fmt.Println("resigned:", probe())
	// Output:
	// leading: 200
	// resigned: 503
}
