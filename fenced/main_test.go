package fenced_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// redisAddr is the address of the redis-server that the examples use.
// TestMain starts one on a free loopback port.
var redisAddr = "127.0.0.1:6379"

func TestMain(m *testing.M) {
	s, err := dlocktest.NewServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = s.Addr()
	code := m.Run()
	_ = s.Close()
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

// newStore starts a redis-server for the test and returns a Store on it and
// a client of its own.
func newStore(t *testing.T, opts ...fenced.Option) (*fenced.Store, *redis.Client) {
	t.Helper()
	c := dlocktest.Start(t).Client()
	t.Cleanup(func() { c.Close() })
	return fenced.New(c, opts...), c
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
