package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	lock, err := locker.Acquire(context.Background(), "example:new")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	fmt.Println("holding", lock.Key())
	if err := lock.Release(context.Background()); err != nil {
		fmt.Println("release:", err)
	}
	// Output: holding example:new
}

func ExampleNewRedlock() {
	// Three independent masters; a lock needs two of them.
	var clients []redis.UniversalClient
	for _, addr := range []string{"127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"} {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := dlock.NewRedlock(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	lock, err := locker.TryAcquire(context.Background(), "example:redlock")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Release(context.Background())
	fmt.Println("holding", lock.Key(), "on a quorum of", len(clients))
	// Output: holding example:redlock on a quorum of 3
}

func ExampleLocker_Acquire() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	// Wait at most five seconds for the lock.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locker.Acquire(ctx, "example:report", dlock.WithTTL(10*time.Second))
	if errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("someone else is writing the report")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(context.Background())

	// Work under the lock, and stop if it is lost. The fence goes with every
	// write to storage that can reject a stale holder.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lock.Fence() // e.g. UPDATE ... WHERE fence < $1
	}()
	select {
	case <-done:
		fmt.Println("report written")
	case <-lock.Lost():
		fmt.Println("lock lost: abandon the work")
	}
	// Output: report written
}

func ExampleLocker_TryAcquire() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	first, err := locker.TryAcquire(context.Background(), "example:cron")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer first.Release(context.Background())

	// Another instance of the cron job finds the lock held and skips its run.
	_, err = locker.TryAcquire(context.Background(), "example:cron")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	// Output: true
}

func ExampleLocker_Do() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	err := locker.Do(context.Background(), "example:payout:42", func(ctx context.Context) error {
		// ctx is cancelled, with cause dlock.ErrLockLost, if the lock is lost.
		fmt.Println("paying account 42")
		return nil
	}, dlock.WithTTL(5*time.Second))
	if errors.Is(err, dlock.ErrLockLost) {
		fmt.Println("the lock was lost during the payout: check it")
	}
	fmt.Println("done:", err)
	// Output:
	// paying account 42
	// done: <nil>
}

func ExampleLock_Fence() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	ctx := context.Background()
	a, _ := locker.Acquire(ctx, "example:fence")
	fa := a.Fence()
	a.Release(ctx)
	b, _ := locker.Acquire(ctx, "example:fence")
	defer b.Release(ctx)
	fmt.Println(b.Fence() > fa)
	// Output: true
}

// The three ways an acquisition fails, each a class of its own to check
// with errors.Is: the lock is busy (ErrNotAcquired), Redis refuses the
// commands for good (ErrMisconfigured), or too few Redis nodes answered
// (ErrUnavailable).
func ExampleLocker_Acquire_errors() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	classify := func(err error) string {
		switch {
		case err == nil:
			return "acquired"
		case errors.Is(err, dlock.ErrNotAcquired):
			return "busy: another process holds it; try later"
		case errors.Is(err, dlock.ErrUnavailable):
			return "unavailable: too few Redis nodes answered; transient"
		case errors.Is(err, dlock.ErrMisconfigured):
			return "misconfigured: waiting will not help; fix it"
		}
		return err.Error()
	}

	held, _ := locker.TryAcquire(ctx, "example:classes")
	_, err := locker.TryAcquire(ctx, "example:classes")
	fmt.Println(classify(err))
	held.Release(ctx)

	// Another program stored a hash under the lock's key.
	client.HSet(ctx, "dlock:{example:hash}", "field", "value")
	_, err = locker.Acquire(ctx, "example:hash") // returns at once
	fmt.Println(classify(err))
	client.Del(ctx, "dlock:{example:hash}")

	// Nothing listens on port 1.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	unreachable := dlock.New(down)
	defer unreachable.Close()
	_, err = unreachable.TryAcquire(ctx, "example:down")
	fmt.Println(classify(err))
	// Output:
	// busy: another process holds it; try later
	// misconfigured: waiting will not help; fix it
	// unavailable: too few Redis nodes answered; transient
}

// ExampleLocker_Campaign: a leader works under Lost, passes its term to
// storage as a fence, and resigns; an observer sees the leadership come and
// go.
func ExampleLocker_Campaign() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := locker.Observe(octx, "example:scheduler")
	fmt.Printf("leader at first: %q\n", (<-changes).Value)

	leadership, err := locker.Campaign(ctx, "example:scheduler", "host-a:8080")
	if err != nil {
		fmt.Println("not elected:", err)
		return
	}
	fmt.Printf("observed: %q\n", (<-changes).Value)

	// The work of a leader: each write carries the term, which storage
	// checks (it refuses a term lower than the largest it has seen), and the
	// leader stops as soon as leadership can no longer be guaranteed.
	term := leadership.Fence()
	for range 3 {
		select {
		case <-leadership.Lost():
			fmt.Println("lost the leadership: stop")
			return
		default:
		}
		_ = term // e.g. UPDATE jobs SET ..., term = $term WHERE term <= $term
	}

	if ld, err := locker.Leader(ctx, "example:scheduler"); err == nil && ld.Term == term {
		fmt.Println("Leader agrees:", ld.Value)
	}
	if err := leadership.Release(ctx); err != nil {
		fmt.Println("resign:", err)
	}
	fmt.Printf("after resigning: %q\n", (<-changes).Value)
	// Output:
	// leader at first: ""
	// observed: "host-a:8080"
	// Leader agrees: host-a:8080
	// after resigning: ""
}

// ExampleWithLimit: at most two exports at once; each holder has a permit,
// a *Lock of its own.
func ExampleWithLimit() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	a, _ := locker.Acquire(ctx, "example:export", dlock.WithLimit(2))
	b, _ := locker.Acquire(ctx, "example:export", dlock.WithLimit(2))
	_, err := locker.TryAcquire(ctx, "example:export", dlock.WithLimit(2))
	fmt.Println("a third permit:", errors.Is(err, dlock.ErrNotAcquired))
	fmt.Println("fences increase:", b.Fence() > a.Fence())

	a.Release(ctx) // the next waiter, if any, is woken
	c, err := locker.TryAcquire(ctx, "example:export", dlock.WithLimit(2))
	fmt.Println("after a release:", err == nil)
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// a third permit: true
	// fences increase: true
	// after a release: true
}

// printHook prints the events of locks.
type printHook struct{}

func (printHook) Start(ctx context.Context, key string) context.Context {
	fmt.Println("start", key)
	return ctx
}

func (printHook) Event(_ context.Context, e dlock.Event) {
	switch e.Kind {
	case dlock.EventAcquired:
		fmt.Println(e.Kind, e.Key, "after", e.Attempt, "attempt(s)")
	case dlock.EventReleased, dlock.EventAttempt:
		fmt.Println(e.Kind, e.Key, "error:", e.Err)
	default:
		fmt.Println(e.Kind, e.Key)
	}
}

func ExampleWithHook() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client, dlock.WithHook(printHook{}))
	defer locker.Close()

	lock, err := locker.Acquire(context.Background(), "example:hook")
	if err != nil {
		return
	}
	_ = lock.Release(context.Background())
	// Output:
	// start example:hook
	// attempt example:hook error: <nil>
	// acquired example:hook after 1 attempt(s)
	// released example:hook error: <nil>
}

func ExampleWithLogger() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	// Lost locks, failing nodes and a refused subscription at Warn and
	// Error; acquisitions and releases at Debug.
	locker := dlock.New(client, dlock.WithLogger(slog.Default()))
	defer locker.Close()

	err := locker.Do(context.Background(), "example:logger", func(ctx context.Context) error {
		return nil // the work
	})
	fmt.Println(err)
	// Output: <nil>
}

func ExampleLockFromContext() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	err := locker.Do(context.Background(), "example:row:7", func(ctx context.Context) error {
		lock, _ := dlock.LockFromContext(ctx)
		// Pass lock.Fence() to storage that checks it (see the fenced package).
		fmt.Println("writing with a fence:", lock.Fence() > 0)
		return nil
	})
	fmt.Println("done:", err)
	_, ok := dlock.LockFromContext(context.Background())
	fmt.Println("outside Do:", ok)
	// Output:
	// writing with a fence: true
	// done: <nil>
	// outside Do: false
}

func ExampleWithShared() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx := context.Background()

	// Two readers of the price list hold it at once.
	r1, err := locker.Acquire(ctx, "example:prices", dlock.WithShared())
	if err != nil {
		fmt.Println(err)
		return
	}
	r2, err := locker.Acquire(ctx, "example:prices", dlock.WithShared())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("two readers; fences differ:", r1.Fence() != r2.Fence())

	// A writer is an exclusive lock of the same key: it waits for the
	// readers, and new readers wait for it.
	written := make(chan struct{})
	go func() {
		defer close(written)
		err := locker.Do(ctx, "example:prices", func(ctx context.Context) error {
			fmt.Println("writing, alone")
			return nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}()
	fmt.Println("readers done")
	r1.Release(ctx)
	r2.Release(ctx) // the last reader's release wakes the writer, if it waits
	<-written
	// Output:
	// two readers; fences differ: true
	// readers done
	// writing, alone
}

func ExampleLocker_AcquireAll() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Move money from account 7 to account 3: both accounts or neither. A
	// transfer the other way names them in the other order, and the two
	// never deadlock.
	locks, err := locker.AcquireAll(ctx, []string{"example:account:7", "example:account:3"})
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer func() {
		for _, k := range locks {
			k.Release(context.Background())
		}
	}()
	fmt.Println("holding", locks[0].Key(), "and", locks[1].Key())
	// Output: holding example:account:7 and example:account:3
}

func ExampleLocker_Adopt() {
	// Two processes: an API that takes the lock and a worker that holds it
	// until the job is done (here two Lockers, each with its own client).
	api := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer api.Close()
	apiLocker := dlock.New(api)
	defer apiLocker.Close()
	lock, err := apiLocker.TryAcquire(context.Background(), "example:job")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	h := lock.Detach() // stops renewing here, releases nothing: send h to the worker

	worker := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer worker.Close()
	workerLocker := dlock.New(worker)
	defer workerLocker.Close()
	adopted, err := workerLocker.Adopt(context.Background(), h.Key, h.Token)
	if err != nil {
		fmt.Println("not adopted:", err) // ErrNotHeld: it expired or was taken meanwhile
		return
	}
	defer adopted.Release(context.Background())
	fmt.Println("the worker holds", adopted.Key(), "with the same fence:", adopted.Fence() == h.Fence)
	// Output: the worker holds example:job with the same fence: true
}
