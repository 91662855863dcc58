// SPDX-License-Identifier: Apache-2.0

// Command cron runs a scheduled job once per fleet: every instance of a
// service fires the same tick, and only the one that gets the job's lock
// runs the job; the others skip that tick.
//
// It starts a fleet of three instances (goroutines here, each with a client
// and a Locker of its own, as separate processes would have), fires three
// ticks half a second apart, and checks in Redis that the job ran once per
// tick. The ticks are aligned to the wall clock, so copies of the program
// started at the same time form one fleet too.
//
// Run it against a Redis on 127.0.0.1:6379, or the one in $REDIS_ADDR:
//
//	cd examples && go run ./cron
//	cd examples && REDIS_ADDR=127.0.0.1:6380 go run ./cron
//
// For gocron (github.com/go-co-op/gocron/v2), the module
// github.com/dlock-dev/dlock/extra/dlockgocron does the same as a
// gocron.Locker.
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
	instances = 3
	ticks     = 3
	interval  = 500 * time.Millisecond

	// Every instance fires a tick at its own moment (clock skew between
	// hosts, scheduling delays); here up to 2×skew after the others.
	skew = 40 * time.Millisecond

	// minHold is how long the winner of a tick holds the lock at least,
	// counted from its acquisition. A run that ended and released the lock
	// before a later instance fired the same tick would let that instance
	// run the tick again; holding the lock for minHold covers a skew of up
	// to minHold. It must be shorter than the interval, or the winner's
	// hold would make everyone skip the next tick. (The job here is
	// shorter than the skew: set minHold to 0 to see a tick run three
	// times.)
	minHold = 250 * time.Millisecond

	// jobKey is the job's lock: one per job, not per tick, so that a run
	// that outlasts the interval makes the next tick skipped, not doubled.
	jobKey = "example:cron:nightly-report"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := run(ctx, redisAddr(), os.Stdout)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cron:", err)
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
	client, err := connect(ctx, addr)
	if err != nil {
		return err
	}
	defer client.Close()

	first := time.Now().Truncate(interval).Add(interval)
	out.printf("%d instances run the job %q every %s, from %s\n", instances, jobKey, interval, first.Format("15:04:05.000"))

	var wg sync.WaitGroup
	errs := make([]error, instances)
	for i := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = instance(ctx, addr, i, first, out)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	// Each run of the job counted itself in Redis: exactly one per tick.
	for t := range ticks {
		tick := first.Add(time.Duration(t) * interval)
		n, err := client.Get(ctx, runsKey(tick)).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		out.printf("tick %d: the job ran %d time(s)\n", t+1, n)
		if n != 1 {
			return fmt.Errorf("tick %d: the job ran %d times, not once", t+1, n)
		}
	}
	out.printf("ran the job once per tick\n")
	return nil
}

// instance is one member of the fleet: its own client and Locker, as a
// separate process would have.
func instance(ctx context.Context, addr string, i int, first time.Time, out *printer) error {
	name := fmt.Sprintf("instance-%d", i+1)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	for t := range ticks {
		tick := first.Add(time.Duration(t) * interval)
		// A different instance is first at each tick.
		late := time.Duration((i+instances-t%instances)%instances) * skew
		if err := sleepUntil(ctx, tick.Add(late)); err != nil {
			return err
		}

		// One attempt, no waiting: busy means another instance has this
		// tick. The TTL is how long the fleet goes without the job if the
		// winner dies while running it; the lock is renewed meanwhile.
		lock, err := locker.TryAcquire(ctx, jobKey, dlock.WithTTL(10*time.Second), dlock.WithMetadata(name))
		if errors.Is(err, dlock.ErrNotAcquired) {
			out.printf("%s: tick %d: skipped, another instance runs it\n", name, t+1)
			continue
		} else if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		acquired := time.Now()
		out.printf("%s: tick %d: got the lock (fence %d), running the job\n", name, t+1, lock.Fence())

		jobErr := job(ctx, lock, client, tick)
		if jobErr == nil {
			jobErr = sleepUntil(ctx, acquired.Add(minHold))
		}
		relErr := lock.Release(ctx)
		if jobErr != nil {
			return fmt.Errorf("%s: tick %d: %w", name, t+1, jobErr)
		}
		if relErr != nil {
			// ErrNotHeld: the lock expired or was taken while held, and
			// another instance may have run the job at the same time.
			return fmt.Errorf("%s: tick %d: release: %w", name, t+1, relErr)
		}
		out.printf("%s: tick %d: job done, lock released\n", name, t+1)
	}
	return nil
}

// job is the scheduled work: it counts its run in Redis (so that run can
// check), then takes a while. It stops if the lock is lost: from then on
// another instance may run the job too.
func job(ctx context.Context, lock *dlock.Lock, client *redis.Client, tick time.Time) error {
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, runsKey(tick))
		p.Expire(ctx, runsKey(tick), time.Minute)
		return nil
	})
	if err != nil {
		return err
	}
	select {
	case <-time.After(20 * time.Millisecond): // writing the report
		return nil
	case <-lock.Lost():
		return fmt.Errorf("lost the lock while running the job: %w", dlock.ErrLockLost)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runsKey counts the runs of the job for one tick.
func runsKey(tick time.Time) string {
	return fmt.Sprintf("example:cron:runs:%d", tick.UnixMilli())
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

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
