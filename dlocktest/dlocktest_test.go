package dlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

func TestServerFaults(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	fc := s.Client()
	defer fc.Close()
	errc := make(chan error, 1)
	go func() { errc <- fc.Ping(tctx).Err() }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a frozen server answered PING")
		}
	case <-time.After(100 * time.Millisecond):
		// No answer while frozen, as expected.
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("after thaw: %q", v)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a killed server answered PING")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if v := c.Exists(ctx, "k").Val(); v != 0 {
		t.Error("a restarted server kept its data")
	}
	<-errc
}

func TestCluster(t *testing.T) {
	cl := dlocktest.StartCluster(t, 3)
	c := cl.Client()
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := c.Set(ctx, k, 1, 0).Err(); err != nil {
			t.Fatalf("SET %s on the cluster: %v", k, err)
		}
	}
}

func TestProxy(t *testing.T) {
	s := dlocktest.Start(t)
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.SetLatency(200 * time.Millisecond)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil || time.Since(start) < 400*time.Millisecond {
		t.Errorf("with 200ms latency each way: %v after %s", err, time.Since(start))
	}
	p.SetLatency(0)
	p.BlackHole(true)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := c.Ping(sctx).Err(); err == nil {
		t.Error("a PING crossed a black hole")
	}
	cancel()
	p.BlackHole(false)
	p.Reset()
	if err := c.Ping(ctx).Err(); err == nil {
		// The first command after a reset may find its pooled connection
		// closed; the next one dials again.
		t.Log("the pool's connection survived the reset")
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("after the reset: %v", err)
	}
}

// TestProxyHoldNext: a copy held back runs after the client's retry, which
// go-redis (default options) sends on a new connection once the proxy reset
// the first: INCR runs twice, answered once.
func TestProxyHoldNext(t *testing.T) {
	s := dlocktest.Start(t)
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	admin := s.Client()
	defer admin.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.HoldNext(50 * time.Millisecond)
	if n, err := c.Incr(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("INCR: %d, %v; want 1 (the retry, answered)", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, err := admin.Get(ctx, "k").Int()
		if err == nil && v == 2 {
			return // the copy held back ran too
		}
		if time.Now().After(deadline) {
			t.Fatalf("k = %d (%v): the copy held back never ran", v, err)
		}
	}
}
