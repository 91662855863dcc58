package dlocktest_test

import (
	"context"
	"testing"
	"time"

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
