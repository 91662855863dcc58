// SPDX-License-Identifier: Apache-2.0

// Command ratelimit puts a distributed semaphore in front of an API that
// allows a few calls at a time: every caller, in every process, holds one
// of the semaphore's permits (dlock.WithLimit) while it calls, so that the
// fleet as a whole never makes more calls at once than the API allows.
//
// It runs two instances (each with a client and a Locker of its own, as
// separate processes would have) of four workers each against a fake API
// that refuses a fourth call in flight, and shows that at most three calls
// were ever in flight and none was refused.
//
// Run it against a Redis on 127.0.0.1:6379, or the one in $REDIS_ADDR:
//
//	cd examples && go run ./ratelimit
//	cd examples && REDIS_ADDR=127.0.0.1:6380 go run ./ratelimit
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

const (
	// limit is the API's: calls in flight at once. Every holder of the
	// semaphore must give the same limit.
	limit = 3
	// key is the semaphore's name: one per API (or per API key).
	key = "example:ratelimit:partner-api"

	instances      = 2
	workersPerInst = 4
	callDuration   = 150 * time.Millisecond
	waitForPermit  = 5 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := run(ctx, redisAddr(), os.Stdout)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
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

func run(ctx context.Context, addr string, w io.Writer) error {
	out := &printer{w: w}
	api := &fakeAPI{limit: limit}
	out.printf("%d workers call an API that allows %d calls at once, each holding a permit of the semaphore %q\n",
		instances*workersPerInst, limit, key)

	// One client and Locker per instance, shared by its workers.
	lockers := make([]*dlock.Locker, instances)
	for i := range lockers {
		client, err := connect(ctx, addr)
		if err != nil {
			return err
		}
		defer client.Close()
		lockers[i] = dlock.New(client)
		defer lockers[i].Close()
	}

	var wg sync.WaitGroup
	errs := make(chan error, instances*workersPerInst)
	for i, locker := range lockers {
		for j := range workersPerInst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("worker-%d.%d", i+1, j+1)
				if err := worker(ctx, locker, api, name, out); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}

	calls, most, refused := api.stats()
	out.printf("%d calls, at most %d at once (limit %d), %d refused by the API\n", calls, most, limit, refused)
	if most > limit || refused > 0 {
		return fmt.Errorf("the semaphore let %d calls in at once", most)
	}
	return nil
}

// worker makes one call to the API under a permit.
func worker(ctx context.Context, locker *dlock.Locker, api *fakeAPI, name string, out *printer) error {
	// Wait for a permit, but not forever. A release wakes the next waiter;
	// waiters do not poll. The TTL is how long a permit outlives a worker
	// that died holding it; it is renewed while held.
	wctx, cancel := context.WithTimeout(ctx, waitForPermit)
	permit, err := locker.Acquire(wctx, key, dlock.WithLimit(limit), dlock.WithTTL(5*time.Second))
	cancel()
	if err != nil {
		return err // ErrNotAcquired (and ctx's error) when the wait ran out
	}

	n, err := api.begin()
	if err == nil {
		out.printf("%s: got a permit, calling the API: %d of %d in flight\n", name, n, limit)
		err = api.wait(ctx, permit)
		api.end()
		if err == nil {
			out.printf("%s: call done, releasing the permit\n", name)
		}
	}
	// Release also when the call failed, and promptly: a permit held
	// longer than the call is a call the fleet cannot make.
	if rerr := permit.Release(ctx); err == nil && rerr != nil {
		// ErrNotHeld: the permit expired or was taken while held, and
		// the call may have been one too many.
		err = fmt.Errorf("release: %w", rerr)
	}
	return err
}

// fakeAPI stands for a remote API that allows limit calls in flight at
// once and answers 429 to one more.
type fakeAPI struct {
	limit int

	mu                             sync.Mutex
	inFlight, most, calls, refused int
}

var errTooManyRequests = errors.New("429 too many requests")

// begin starts a call: n is the number of calls in flight, this one
// included. One call more than the limit is refused.
func (a *fakeAPI) begin() (n int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.most = max(a.most, a.inFlight+1)
	if a.inFlight >= a.limit {
		a.refused++
		return a.inFlight + 1, errTooManyRequests
	}
	a.inFlight++
	return a.inFlight, nil
}

// wait waits for the API's answer. It gives up if the permit is lost: from
// then on the call may be one too many.
func (a *fakeAPI) wait(ctx context.Context, permit *dlock.Lock) error {
	select {
	case <-time.After(callDuration):
		return nil
	case <-permit.Lost():
		return fmt.Errorf("permit lost during the call: %w", dlock.ErrLockLost)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// end ends a call that begin started.
func (a *fakeAPI) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inFlight--
}

func (a *fakeAPI) stats() (calls, most, refused int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, a.most, a.refused
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

// printer writes whole lines from several goroutines.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}
