package dlock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	// One Redis for the Examples, five independent masters for the Redlock
	// one.
	os.Exit(dlocktest.Main(m, 6, func(s []*dlocktest.Server) {
		redisAddr = s[0].Addr()
		for _, rs := range s[1:] {
			redlockAddrs = append(redlockAddrs, rs.Addr())
		}
	}))
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
