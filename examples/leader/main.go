// SPDX-License-Identifier: Apache-2.0

// Command leader elects a leader among candidates (Locker.Campaign) and
// follows the election from an observer (Locker.Observe), as a dashboard or
// a router that sends work to the leader would.
//
// Two candidates campaign; candidate-a wins and candidate-b waits. The
// leader works as long as its leadership holds (Lost), passing its term to
// storage as a fence, then resigns (Release); candidate-b takes over at once,
// with a larger term. The observer prints each change as it is announced.
//
// Run it against a Redis on 127.0.0.1:6379, or the one in $REDIS_ADDR:
//
//	cd examples && go run ./leader
//	cd examples && REDIS_ADDR=127.0.0.1:6380 go run ./leader
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// election is the election's name: every candidate and observer uses it.
const election = "example:leader:scheduler"

// ttl is how long the election goes without a leader when the leader dies
// without resigning; the leadership is renewed while held.
const ttl = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := run(ctx, redisAddr(), os.Stdout)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
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

	// A Locker per participant, as separate processes would have.
	observer := dlock.New(client)
	defer observer.Close()
	lockerA := dlock.New(client)
	defer lockerA.Close()
	lockerB := dlock.New(client)
	defer lockerB.Close()

	octx, stopObserving := context.WithCancel(ctx)
	changes := observer.Observe(octx, election)
	defer func() {
		// The channel closes once the observer has let go of its
		// subscription: wait for that before closing the client.
		stopObserving()
		for range changes {
		}
	}()
	// next prints the observer's next change.
	next := func() (dlock.Leader, error) {
		select {
		case ld, ok := <-changes:
			if !ok {
				return dlock.Leader{}, errors.New("the observer stopped")
			}
			if ld.Value == "" {
				fmt.Fprintln(out, "observer: no leader")
			} else {
				fmt.Fprintf(out, "observer: leader is %s (term %d)\n", ld.Value, ld.Term)
			}
			return ld, nil
		case <-ctx.Done():
			return dlock.Leader{}, ctx.Err()
		}
	}
	// until prints the observer's changes until the leader is value.
	until := func(value string) error {
		for {
			ld, err := next()
			if err != nil || ld.Value == value {
				return err
			}
		}
	}

	// The current leader first: none, unless an earlier run died leading.
	if err := until(""); err != nil {
		return err
	}

	a, err := lockerA.Campaign(ctx, election, "candidate-a", dlock.WithTTL(ttl))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "candidate-a: elected, term %d\n", a.Fence())
	if err := until("candidate-a"); err != nil {
		return err
	}

	// candidate-b campaigns too, and waits: candidates queue in order of
	// arrival and are woken by a resignation, not by polling.
	type result struct {
		lock *dlock.Lock
		err  error
	}
	elected := make(chan result, 1)
	go func() {
		b, err := lockerB.Campaign(ctx, election, "candidate-b", dlock.WithTTL(ttl))
		elected <- result{b, err}
	}()
	select {
	case r := <-elected:
		if r.err == nil {
			r.lock.Release(ctx)
		}
		return fmt.Errorf("candidate-b was elected while candidate-a led: %v", r.err)
	case <-time.After(300 * time.Millisecond):
		fmt.Fprintln(out, "candidate-b: campaigning, waits while candidate-a leads")
	}

	// The leader's work: each write carries the term, which storage checks
	// (refusing a term lower than the largest it has seen), and the leader
	// stops as soon as its leadership can no longer be guaranteed.
	for job := 1; job <= 3; job++ {
		select {
		case <-a.Lost():
			return fmt.Errorf("candidate-a lost the leadership: %w", dlock.ErrLockLost)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
			fmt.Fprintf(out, "candidate-a: scheduled job %d as leader of term %d\n", job, a.Fence())
		}
	}
	if err := a.Release(ctx); err != nil {
		return fmt.Errorf("candidate-a: resign: %w", err)
	}
	fmt.Fprintln(out, "candidate-a: resigned")

	// The observer sees the vacancy (unless it is folded into the next
	// term) and candidate-b's term.
	if err := until("candidate-b"); err != nil {
		return err
	}
	var r result
	select {
	case r = <-elected:
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.err != nil {
		return fmt.Errorf("candidate-b: %w", r.err)
	}
	b := r.lock
	fmt.Fprintf(out, "candidate-b: took over, term %d (after %d)\n", b.Fence(), a.Fence())
	if b.Fence() <= a.Fence() {
		return fmt.Errorf("candidate-b's term %d is not larger than %d", b.Fence(), a.Fence())
	}

	// Anyone can ask who leads.
	ld, err := observer.Leader(ctx, election)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Leader: %s, term %d\n", ld.Value, ld.Term)

	if err := b.Release(ctx); err != nil {
		return fmt.Errorf("candidate-b: resign: %w", err)
	}
	fmt.Fprintln(out, "candidate-b: resigned")
	if err := until(""); err != nil {
		return err
	}
	fmt.Fprintln(out, "the leadership passed from candidate-a to candidate-b")
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
