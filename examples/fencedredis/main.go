// SPDX-License-Identifier: Apache-2.0

// Command fencedredis writes a value kept in Redis under a lock, through the
// package fenced, which refuses a write whose fence is older than one the
// value has seen. A writer that lost its lock without knowing it (a GC pause
// or a VM stall past its lease) and comes back with its old fence is
// refused, and the newer holder's value is kept.
//
// Writer A takes the lock and writes; it pauses past its lease; writer B
// takes the lock and writes; A wakes and writes again: refused. Then B
// updates a counter with a read-modify-write (Store.Claim, then Store.Set).
//
// Run it against a Redis on 127.0.0.1:6379, or the one in $REDIS_ADDR:
//
//	cd examples && go run ./fencedredis
//	cd examples && REDIS_ADDR=127.0.0.1:6380 go run ./fencedredis
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/fenced"
)

// report is the name of both the lock and the value it guards: every writer
// of the value holds this lock, so that their fences are comparable.
const report = "example:fencedredis:report"

// counter is another value, with a lock of the same name.
const counter = "example:fencedredis:counter"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := run(ctx, redisAddr(), os.Stdout)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencedredis:", err)
		os.Exit(1)
	}
}

// redisAddr is $REDIS_ADDR, or 127.0.0.1:6379.
func redisAddr() string {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

func run(ctx context.Context, addr string, out io.Writer) error {
	client, err := connect(ctx, addr)
	if err != nil {
		return err
	}
	defer client.Close()
	// The example leaves nothing behind. A real program never deletes a
	// fenced value's hash with DEL: its fence would be forgotten, and a
	// stale writer let in again (Store.Delete keeps it).
	store := fenced.New(client)
	defer client.Del(context.WithoutCancel(ctx), store.Key(report), store.Key(counter))

	// A Locker per writer, as separate processes would have.
	lockerA := dlock.New(client)
	defer lockerA.Close()
	lockerB := dlock.New(client)
	defer lockerB.Close()

	// Writer A's lock is a fixed lease (no renewal), so that the pause
	// below outlives it.
	a, err := lockerA.Acquire(ctx, report, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		return err
	}
	defer a.Release(context.WithoutCancel(ctx)) // ErrNotHeld by then: it only cleans up
	if err := store.Set(ctx, report, "draft by writer-a", a.Fence()); err != nil {
		return err
	}
	fmt.Fprintf(out, "writer-a: took the lock (fence %d), wrote %q\n", a.Fence(), "draft by writer-a")
	fmt.Fprintln(out, "writer-a: pauses past its lease")
	select {
	case <-a.Lost(): // a paused writer would not even notice this
	case <-ctx.Done():
		return ctx.Err()
	}

	// Writer B waits for the lock, which Redis expires, and writes with its
	// own, larger fence.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	b, err := lockerB.Acquire(wctx, report, dlock.WithTTL(5*time.Second))
	cancel()
	if err != nil {
		return err
	}
	if err := store.Set(ctx, report, "final by writer-b", b.Fence()); err != nil {
		return err
	}
	fmt.Fprintf(out, "writer-b: took the lock (fence %d), wrote %q\n", b.Fence(), "final by writer-b")

	// Writer A wakes up and writes, with its old fence.
	err = store.Set(ctx, report, "draft by writer-a, amended", a.Fence())
	var stale *fenced.StaleError
	if !errors.As(err, &stale) {
		return fmt.Errorf("writer-a's stale write was not refused: %v", err)
	}
	fmt.Fprintf(out, "writer-a: refused stale write: fence %d, the value has seen %d\n", stale.Fence, stale.Seen)
	value, _, err := store.Get(ctx, report)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the report is %q\n", value)
	if value != "final by writer-b" {
		return fmt.Errorf("the report is %q, want writer-b's", value)
	}
	if err := b.Release(ctx); err != nil {
		return err
	}

	// A read-modify-write: Claim reads the value and records the fence at
	// once, so that no older holder's write lands between the read and the
	// write back (and is lost).
	for range 2 {
		err := lockerB.Do(ctx, counter, func(ctx context.Context) error {
			lock, _ := dlock.LockFromContext(ctx)
			v, found, err := store.Claim(ctx, counter, lock.Fence())
			if err != nil {
				return err // ErrStale: the lock was lost, stop
			}
			n := 0
			if found {
				if n, err = strconv.Atoi(v); err != nil {
					return err
				}
			}
			if err := store.Set(ctx, counter, strconv.Itoa(n+1), lock.Fence()); err != nil {
				return err
			}
			fmt.Fprintf(out, "writer-b: counter %d -> %d (fence %d)\n", n, n+1, lock.Fence())
			return nil
		}, dlock.WithTTL(5*time.Second))
		if err != nil {
			return err
		}
	}
	return nil
}

// connect returns a client of the Redis at addr, once it answers PING.
func connect(ctx context.Context, addr string) (*redis.Client, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("no Redis at %s (set REDIS_ADDR to its host:port): %w", addr, err)
	}
	return client, nil
}
