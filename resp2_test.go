package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestStatusResp2: a Locker whose client speaks RESP2 (Protocol: 2) reads
// the same Status as one on RESP3 (go-redis' default): the replies of
// HGETALL (metadata, release requests) and ZRANGE … WITHSCORES (permits)
// differ in shape between the two, and commands go through one node.Conn
// that gives them as plain values.
func TestStatusResp2(t *testing.T) {
	s := dlocktest.Start(t)
	mk := func(protocol int) *dlock.Locker {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: protocol})
		l := dlock.New(c)
		t.Cleanup(func() { l.Close(); c.Close() })
		return l
	}
	l2, l3 := mk(2), mk(3)

	k, err := l2.TryAcquire(ctx(t), "job", dlock.WithMetadata("host-a"), dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	if err := l3.RequestRelease(ctx(t), "job", "deploy"); err != nil {
		t.Fatal(err)
	}
	var permits []*dlock.Lock
	for i, md := range []string{"p0", "p1"} {
		p, err := []*dlock.Locker{l2, l3}[i].TryAcquire(ctx(t), "sem", dlock.WithLimit(3), dlock.WithMetadata(md), dlock.WithTTL(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	defer func() {
		for _, p := range permits {
			p.Release(ctx(t))
		}
	}()

	for _, key := range []string{"job", "sem"} {
		st2, err2 := l2.Status(ctx(t), key)
		st3, err3 := l3.Status(ctx(t), key)
		if err2 != nil || err3 != nil {
			t.Fatalf("%s: RESP2 %v, RESP3 %v", key, err2, err3)
		}
		if !st2.Held || st2.Metadata != st3.Metadata || st2.Fence != st3.Fence || st2.Limit != st3.Limit ||
			len(st2.Permits) != len(st3.Permits) || (st2.Asked == nil) != (st3.Asked == nil) || st2.TTL <= 0 {
			t.Errorf("%s: RESP2 %+v, RESP3 %+v", key, st2, st3)
		}
	}
	st, _ := l2.Status(ctx(t), "job")
	if st.Metadata != "host-a" || st.Asked == nil || st.Asked.Reason != "deploy" {
		t.Errorf("job on RESP2: metadata %q, asked %+v", st.Metadata, st.Asked)
	}
	st, _ = l2.Status(ctx(t), "sem")
	if st.Limit != 3 || len(st.Permits) != 2 {
		t.Fatalf("sem on RESP2: limit %d, %d permits", st.Limit, len(st.Permits))
	}
	for _, p := range st.Permits {
		if p.Metadata != "p0" && p.Metadata != "p1" || p.TTL <= 0 || p.Fence == 0 {
			t.Errorf("a permit on RESP2: %+v", p)
		}
	}
}

// TestClosedClientError: a go-redis client closed under its Locker gives
// an error that still matches redis.ErrClosed (as it did before commands
// went through node.Conn), besides ErrUnavailable.
func TestClosedClientError(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	l := dlock.New(c)
	defer l.Close()
	c.Close()
	_, err := l.TryAcquire(ctx(t), "k")
	if !errors.Is(err, redis.ErrClosed) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryAcquire with a closed client: %v, want redis.ErrClosed and ErrUnavailable", err)
	}
}
