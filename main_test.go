package dlock_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// redisAddr is the address of the redis-server that the examples use. TestMain
// starts one on a free loopback port.
var redisAddr = "127.0.0.1:6379"

// redlockAddrs are the addresses of the five independent masters the Redlock
// example uses.
var redlockAddrs []string

func TestMain(m *testing.M) {
	if os.Getenv("DLOCK_HISTORY_WORKER") == "1" {
		os.Exit(historyWorker()) // a worker process of TestHistory
	}
	s, err := dlocktest.NewServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = s.Addr()
	var servers []*dlocktest.Server
	for i := 0; i < 5; i++ {
		rs, err := dlocktest.NewServer()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		servers = append(servers, rs)
		redlockAddrs = append(redlockAddrs, rs.Addr())
	}
	code := m.Run()
	_ = s.Close()
	for _, rs := range servers {
		_ = rs.Close()
	}
	if code == 0 {
		// go-redis keeps retrying a failed dial on a goroutine of its own
		// for up to a second after the client is closed.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// single starts a redis-server for the test and returns a Locker on it.
func single(t *testing.T, opts ...dlock.Option) (*dlock.Locker, *dlocktest.Server, *redis.Client) {
	t.Helper()
	s := dlocktest.Start(t)
	c := s.Client()
	l := dlock.New(c, opts...)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		c.Close()
	})
	return l, s, c
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
