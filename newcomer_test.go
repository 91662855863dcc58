package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRedlockSameServer: a Redlock whose clients reach one server twice is
// one point of failure, not a quorum, and is refused as ErrMisconfigured
// naming the server: two client objects of one address by NewRedlock; two
// addresses of one server (127.0.0.1:P and localhost:P, or a proxy in
// front of it), which only the server's run id tells, by the first
// acquisition, which leaves nothing behind.
func TestRedlockSameServer(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	other := dlocktest.Start(t)
	client := func(addr string) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return c
	}

	_, err := dlock.NewRedlock([]redis.UniversalClient{client(s.Addr()), client(other.Addr()), client(s.Addr())})
	t.Log(err)
	if !errors.Is(err, dlock.ErrMisconfigured) || !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "clients 0 and 2 both reach "+s.Addr()) {
		t.Errorf("two clients of one address: %v, want ErrMisconfigured naming %s", err, s.Addr())
	}

	proxy, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	localhost := "localhost:" + s.Addr()[strings.LastIndexByte(s.Addr(), ':')+1:]
	for _, addr := range []string{localhost, proxy.Addr()} {
		t.Run(addr, func(t *testing.T) {
			// Two nodes, so that the first round has both answers.
			l, err := dlock.NewRedlock([]redis.UniversalClient{client(s.Addr()), client(addr)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, acquire := range []func() (*dlock.Lock, error){
				func() (*dlock.Lock, error) { return l.TryAcquire(ctx(t), "job") },
				func() (*dlock.Lock, error) { return l.Acquire(ctxTimeout(t, time.Minute), "job") },
			} {
				k, err := acquire()
				t.Log(err)
				if k != nil {
					k.Release(ctx(t))
				}
				if !errors.Is(err, dlock.ErrMisconfigured) || !strings.Contains(err.Error(), "are the same Redis server") ||
					!strings.Contains(err.Error(), s.Addr()) || !strings.Contains(err.Error(), addr) {
					t.Errorf("%s and %s: %v, want ErrMisconfigured naming both", s.Addr(), addr, err)
				}
			}
			l.Close() // waits for the clean-up of what the refused round set
			if n, err := client(s.Addr()).Exists(ctx(t), "dlock:{job}").Result(); n != 0 || err != nil {
				t.Errorf("the refused acquisition left its key: %d, %v", n, err)
			}
		})
	}
}
