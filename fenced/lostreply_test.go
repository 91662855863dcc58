package fenced_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// lossyConn loses the next reply once armed: it reads it off the
// connection, runs the armed function, and fails with io.EOF, a broken
// connection as go-redis sees it (which it retries).
type lossyConn struct {
	net.Conn
	armed *atomic.Pointer[func()]
}

func (c *lossyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == nil {
		if f := c.armed.Swap(nil); f != nil {
			(*f)()
			c.Conn.Close()
			return 0, io.EOF
		}
	}
	return n, err
}

// TestStaleAfterLostReply: A's Set is done in Redis, but its reply is lost;
// before go-redis retries it, B claims the resource with a larger fence.
// The retry is refused, and Set returns ErrStale, although its first try
// wrote: ErrStale says what the last try did, not that nothing was written.
func TestStaleAfterLostReply(t *testing.T) {
	srv := dlocktest.Start(t)
	var armed atomic.Pointer[func()]
	ca := redis.NewClient(&redis.Options{
		Addr: srv.Addr(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: c, armed: &armed}, nil
		},
	})
	cb := srv.Client()
	t.Cleanup(func() {
		ca.Close()
		cb.Close()
	})
	sa, sb := fenced.New(ca), fenced.New(cb)
	ctx := ctxTimeout(t, 10*time.Second)
	mustSet(t, sa, "k", "before", 5) // loads the script: the next EVALSHA runs it

	claim := func() {
		if _, _, err := sb.Claim(ctx, "k", 7); err != nil {
			t.Errorf("B's Claim: %v", err)
		}
	}
	armed.Store(&claim)
	err := sa.Set(ctx, "k", "A", 6)
	if armed.Load() != nil {
		t.Fatal("no reply was lost")
	}
	wantStale(t, err, "k", 6, 7)
	wantValue(t, sa, "k", "A", 7) // A's value, written by the first try
}
