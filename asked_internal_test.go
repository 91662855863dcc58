package dlock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRequestLeadershipKeepsPlace: the candidate put first keeps that place
// in its later registrations: the position it sends is the one the node
// gave it, even when an attempt that was under way answers with the old
// one afterwards.
func TestRequestLeadershipKeepsPlace(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, first, second := New(c), New(c), New(c)
	defer holder.Close()
	defer first.Close()
	defer second.Close()
	k, err := holder.TryAcquire(ctx, "place")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	wait := func(l *Locker) {
		go func() {
			if _, err := l.Acquire(ctx, "place"); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}()
	}
	queued := func(n int64) {
		t.Helper()
		for c.ZCard(ctx, "dlock:{place}:waiters").Val() != n {
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait(first)
	queued(1)
	wait(second)
	queued(2)
	if err := second.RequestLeadership(ctx, "place", ""); err != nil {
		t.Fatal(err)
	}
	second.mu.Lock()
	ks := second.keys[waitSlot{key: "place"}]
	second.mu.Unlock()
	ks.mu.Lock()
	member, pos := ks.member, ks.nodes[0].pos
	ks.mu.Unlock()
	head := c.ZRangeWithScores(ctx, "dlock:{place}:waiters", 0, 0).Val()
	if len(head) != 1 || head[0].Member != member {
		t.Fatalf("head of the queue %v, want %s", head, member)
	}
	if want := int64(head[0].Score); pos != formatInt(want) {
		t.Errorf("the waiter's position %s, the node's %d", pos, want)
	}
	// A late answer of an attempt sent before the move does not move it back.
	ks.registered(0, nodeReg{member: member, pos: "0"}, formatInt(int64(head[0].Score)+10), false)
	ks.mu.Lock()
	if ks.nodes[0].pos != pos {
		t.Errorf("position after an older answer: %s, want %s", ks.nodes[0].pos, pos)
	}
	ks.mu.Unlock()
	cancel()
}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }

// TestRequestLeadershipWaitsForRegistration: a RequestLeadership made while
// its Campaign is registered on some nodes only (its registration on the
// others has not landed yet: an inbox subscribed late there, an attempt
// still on its way) waits for the rest, and asks the leader only once the
// candidate is first on every node. Otherwise the other candidate, first
// where this one was missing, is woken there when the leader resigns, and
// may take the leadership (on a Redlock a release reserves nothing). The
// test removes the registration from three of five nodes, and has the
// Campaign attempt again (which writes it back) once the request has moved
// it on the other two: before the fix, the request returned then, and the
// candidate was first on two nodes.
func TestRequestLeadershipWaitsForRegistration(t *testing.T) {
	servers := dlocktest.StartN(t, 5)
	clients := dlocktest.Clients(t, servers...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	redlock := func() *Locker {
		l, err := NewRedlock(clients)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b, c := redlock(), redlock(), redlock()
	const key, waiters = "election", "dlock:{election}:waiters"
	leader, err := a.Campaign(ctx, key, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	queued := func(n int64, nodes ...int) func() bool {
		return func() bool {
			for _, i := range nodes {
				if clients[i].ZCard(ctx, waiters).Val() != n {
					return false
				}
			}
			return true
		}
	}
	head := func(i int) string {
		if h := clients[i].ZRange(ctx, waiters, 0, 0).Val(); len(h) == 1 {
			return h[0]
		}
		return ""
	}
	campaign := func(l *Locker, value string) <-chan *Lock {
		got := make(chan *Lock, 1)
		go func() {
			k, err := l.Campaign(ctx, key, value)
			if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled) {
				t.Errorf("Campaign(%s): %v", value, err)
			}
			got <- k
		}()
		return got
	}
	gotB := campaign(b, "node-b")
	until("node-b's registration", queued(1, 0, 1, 2, 3, 4))
	gotC := campaign(c, "node-c")
	until("node-c's registration", queued(2, 0, 1, 2, 3, 4))
	c.mu.Lock()
	ks := c.keys[waitSlot{key: key}]
	c.mu.Unlock()
	ks.mu.Lock()
	member := ks.member
	ks.mu.Unlock()
	for _, i := range []int{2, 3, 4} {
		if err := clients[i].ZRem(ctx, waiters, member).Err(); err != nil {
			t.Fatal(err)
		}
	}

	asked := make(chan error, 1)
	go func() { asked <- c.RequestLeadership(ctx, key, "hand over to c") }()
	until("node-c put first on nodes 0 and 1", func() bool { return head(0) == member && head(1) == member })
	ks.signal() // the Campaign attempts again: its registration comes back
	if err := <-asked; err != nil {
		t.Fatal(err)
	}
	for i := range servers {
		if h := head(i); h != member {
			t.Errorf("node %d: %q first after RequestLeadership returned, want node-c's %q", i, h, member)
		}
	}
	if err := leader.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case kb := <-gotB:
		kb.Release(ctx)
		t.Fatal("node-b leads after the hand-over to node-c")
	case kc := <-gotC:
		if kc == nil {
			t.Fatal("node-c's Campaign failed")
		}
		kc.Release(ctx)
	}
	if kb := <-gotB; kb != nil {
		kb.Release(ctx)
	}
}
