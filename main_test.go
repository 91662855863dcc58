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

func TestMain(m *testing.M) {
	if os.Getenv("DLOCK_HISTORY_WORKER") == "1" {
		os.Exit(historyWorker()) // a worker process of TestHistory
	}
	// The Examples' Redis, and the three independent masters of the
	// Redlock one, at the addresses they name.
	os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"))
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
