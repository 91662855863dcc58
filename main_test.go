package dlock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/history"
)

func TestMain(m *testing.M) {
	if history.IsWorker() {
		os.Exit(history.Worker(history.GoRedis)) // a worker process of TestHistory
	}
	// The Examples' Redis, and the three independent masters of the
	// Redlock one, at the addresses they name.
	os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"))
}

// TestHistory runs the history checker (internal/history) on go-redis
// clients: on one Redis and a 5-node Redlock, 30s each unless
// $DLOCK_HISTORY_DURATION says otherwise (make soak).
func TestHistory(t *testing.T) {
	// Beside the other parallel tests, which mostly wait: the history's
	// checks are of safety and of what is left once its workers stopped,
	// which load does not change.
	t.Parallel()
	history.Test(t, 30*time.Second, false)
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
