package fenced_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

func TestMain(m *testing.M) {
	// The Examples' Redis, at the address they name.
	os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379"))
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
