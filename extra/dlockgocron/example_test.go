package dlockgocron_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/extra/dlockgocron"
)

func ExampleNewLocker() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close() // after the scheduler's shutdown: gives back the locks still held

	// Every instance of the service runs the same scheduler; each run of a
	// job happens on one of them.
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(dlockgocron.NewLocker(locker)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Shutdown() }()

	done := make(chan struct{})
	_, err = s.NewJob(
		gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(func() {
			fmt.Println("sending the report")
			close(done)
		}),
		gocron.WithName("send-report"), // the lock's name: unique per job
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	<-done
	// Output: sending the report
}

func ExampleLocker_Held() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()
	jobs := dlockgocron.NewLocker(locker)

	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(jobs))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Shutdown() }()

	done := make(chan struct{})
	_, err = s.NewJob(
		gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(func() {
			defer close(done)
			lock := jobs.Held("reindex")
			for batch := 1; batch <= 3; batch++ {
				select {
				case <-lock.Lost():
					return // another instance may run the job now: stop
				default:
				}
				// Pass lock.Fence() with each write to storage that checks it.
			}
			fmt.Println("reindexed under the lock")
		}),
		gocron.WithName("reindex"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	<-done
	// Output: reindexed under the lock
}

func ExampleNewElector() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker := dlock.New(client)
	defer locker.Close()

	// Every instance campaigns; the leader runs the jobs.
	elector, err := dlockgocron.NewElector(context.Background(), locker, "billing-cron", "host-a")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer elector.Close() // resigns: another instance takes over at once

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = s.Shutdown() }()

	var once sync.Once
	done := make(chan struct{})
	_, err = s.NewJob(
		gocron.DurationJob(100*time.Millisecond),
		gocron.NewTask(func() {
			once.Do(func() {
				fmt.Println("the leader runs the job")
				close(done)
			})
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	<-done
	// Output: the leader runs the job
}
