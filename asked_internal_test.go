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
