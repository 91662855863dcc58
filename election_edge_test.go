package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// An election has one leader: Campaign refuses WithLimit, and Leader a
// semaphore (found by a review: two leaders at once).
func TestElectionEdgeCampaignWithLimit(t *testing.T) {
	l, _, _ := single(t)
	if _, err := l.Campaign(ctx(t), "el", "a", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Campaign with WithLimit(2): %v, want ErrInvalid", err)
	}
	if _, err := l.Acquire(ctx(t), "sem", dlock.WithLimit(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Leader(ctx(t), "sem"); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Leader of a semaphore: %v, want ErrInvalid", err)
	}
}

// An observer that reads the election while one node of the leader's bare
// quorum is slow reports a vacancy, and never reports the same leader again.
func TestElectionEdgeObserverStuckVacant(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other waiting tests
	l, servers, clients := redlock(t, 3)
	ctx := ctxTimeout(t, 60*time.Second)
	// Node 3 is held by someone else (a contender's leftover, or the leader
	// could not reach it): the leader holds exactly a quorum {1,2}.
	if err := clients[2].Set(ctx, "dlock:{el}", "foreign", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	k, err := l.Campaign(ctx, "el", "a", dlock.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())
	ol, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Close()
	ch := ol.Observe(ctx, "el")
	first := <-ch
	t.Logf("observer first: %+v (leader fence %d)", first, k.Fence())
	var last dlock.Leader = first
	got := make(chan dlock.Leader, 100)
	go func() {
		for ld := range ch {
			got <- ld
		}
	}()
	time.Sleep(5 * time.Second)
	_ = servers[1].Freeze()
	time.Sleep(2500 * time.Millisecond)
	_ = servers[1].Thaw()
	deadline := time.After(20 * time.Second)
loop:
	for {
		select {
		case ld := <-got:
			t.Logf("observer: %+v", ld)
			last = ld
		case <-deadline:
			break loop
		case <-k.Lost():
			t.Fatal("leader lost its lock; test setup")
		}
	}
	ld, err := ol.Leader(ctx, "el")
	t.Logf("Leader(): %+v, %v", ld, err)
	if err == nil && ld.Term == k.Fence() && last != ld {
		t.Errorf("observer stuck on %+v while the leader is %+v", last, ld)
	}
}

// The metadata of a semaphore's permits shares one hash whose TTL each
// acquisition sets to its own TTL: a short permit deletes a long one's.
func TestElectionEdgeSemaphoreMetadataTTL(t *testing.T) {
	l, _, _ := single(t)
	ctx := ctxTimeout(t, 10*time.Second)
	a, err := l.TryAcquire(ctx, "sm", dlock.WithLimit(3), dlock.WithTTL(10*time.Second), dlock.WithMetadata("A"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := l.TryAcquire(ctx, "sm", dlock.WithLimit(3), dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(false), dlock.WithMetadata("B"))
	if err != nil {
		t.Fatal(err)
	}
	_ = b
	time.Sleep(600 * time.Millisecond)
	st, err := l.Status(ctx, "sm")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st.Permits)
	if len(st.Permits) != 1 || st.Permits[0].Metadata != "A" {
		t.Errorf("A's metadata lost: %+v", st.Permits)
	}
}

// A leader that regains a node whose counter went further (split votes of
// contenders there) is emitted a second time, under another term than its
// fence; its resignation "V fence" is then ignored.
func TestElectionEdgeObserverSameLeaderTwice(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other waiting tests
	l, servers, clients := redlock(t, 3)
	ctx := ctxTimeout(t, 60*time.Second)
	if err := clients[2].Set(ctx, "dlock:{el}", "foreign", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	k, err := l.Campaign(ctx, "el", "a", dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ol, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Close()
	ch := ol.Observe(ctx, "el")
	t.Logf("observer first: %+v (leader fence %d)", <-ch, k.Fence())
	// Node 3 becomes free; two contenders' split votes count there.
	clients[2].Del(ctx, "dlock:{el}")
	cl, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 2 {
		_, err := cl.TryAcquire(ctx, "el")
		t.Logf("contender: %v", err)
	}
	var seen []dlock.Leader
	timeout := time.After(12 * time.Second)
loop:
	for {
		select {
		case ld := <-ch:
			t.Logf("observer: %+v", ld)
			seen = append(seen, ld)
		case <-timeout:
			break loop
		}
	}
	ld, err := ol.Leader(ctx, "el")
	t.Logf("Leader(): %+v, %v; lock fence %d", ld, err, k.Fence())
	_ = k.Release(ctx)
	for _, s := range seen {
		if s.Value == "a" {
			t.Errorf("leader a emitted again as %+v (its fence is %d)", s, k.Fence())
		}
	}
	select {
	case ld := <-ch:
		t.Logf("after release: %+v", ld)
	case <-time.After(time.Second):
		t.Errorf("resignation not reported within 1s")
	}
}
