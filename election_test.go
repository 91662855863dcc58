package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestElection: three candidates, ten successive leaderships ended by a
// resignation or by the leader's process dying (its client closed: it can
// neither renew nor resign). Exactly one leader at a time (a leader stops at
// Lost), terms strictly increase, Leader agrees with the holder, and two
// observers see every leadership in the same order.
func TestElection(t *testing.T) {
	s := dlocktest.Start(t)
	const key, rounds = "election", 10
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	type term struct {
		value string
		term  uint64
	}
	var (
		mu      sync.Mutex
		winners []term
		acting  atomic.Int32 // leaders acting now
		wins    atomic.Int32
		done    = make(chan struct{})
		once    sync.Once
	)

	// Observers first, so that they see every leadership.
	obsCtx, stopObs := context.WithTimeout(context.Background(), 90*time.Second)
	defer stopObs()
	seen := make([][]dlock.Leader, 2)
	var obsMu sync.Mutex // guards seen
	var obsWG sync.WaitGroup
	for i := range seen {
		l := newLocker(t, s.Client())
		ch := l.Observe(obsCtx, key)
		first, ok := <-ch
		if !ok || first != (dlock.Leader{}) {
			t.Fatalf("observer %d: first %v, %v; want the zero Leader", i, first, ok)
		}
		obsWG.Add(1)
		go func() {
			defer obsWG.Done()
			for ld := range ch {
				obsMu.Lock()
				seen[i] = append(seen[i], ld)
				obsMu.Unlock()
			}
		}()
	}

	candidate := func(c int) {
		for gen := 0; ; gen++ {
			cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
			l := dlock.New(cl)
			value := fmt.Sprintf("candidate-%d/%d", c, gen)
			k, err := l.Campaign(ctx, key, value, dlock.WithTTL(400*time.Millisecond))
			if err != nil {
				_ = l.Close()
				_ = cl.Close()
				select {
				case <-done:
				default:
					t.Errorf("%s: %v", value, err)
				}
				return
			}
			if !acting.CompareAndSwap(0, 1) {
				t.Errorf("%s: leader while another one acts", value)
			}
			n := wins.Add(1)
			mu.Lock()
			if len(winners) > 0 && winners[len(winners)-1].term >= k.Fence() {
				t.Errorf("%s: term %d after term %d", value, k.Fence(), winners[len(winners)-1].term)
			}
			winners = append(winners, term{value, k.Fence()})
			mu.Unlock()
			if ld, err := l.Leader(obsCtx, key); err != nil || ld.Value != value || ld.Term != k.Fence() {
				t.Errorf("%s (term %d): Leader says %+v, %v", value, k.Fence(), ld, err)
			}
			last := n >= rounds
			if last {
				once.Do(func() { close(done) })
			}
			if n%3 == 0 && !last {
				// Dies: stops acting when its lock is lost, and nobody
				// resigns for it.
				_ = cl.Close()
				<-k.Lost()
				acting.Store(0)
				_ = l.Close()
				continue
			}
			acting.Store(0)
			if err := k.Release(obsCtx); err != nil {
				t.Errorf("%s: resign: %v", value, err)
			}
			_ = l.Close()
			_ = cl.Close()
			if last {
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}
	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); candidate(c) }()
	}
	<-done
	// The other candidates wait in Campaign: end it.
	cancel()
	wg.Wait()

	// Let the observers catch up with the last resignation.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		obsMu.Lock()
		for i := range seen {
			if countLeaders(seen[i]) < len(winners) {
				ok = false
			}
		}
		obsMu.Unlock()
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopObs()
	obsWG.Wait()

	if len(winners) < rounds {
		t.Fatalf("%d leaderships, want %d", len(winners), rounds)
	}
	for i, obs := range seen {
		var got []term
		var last dlock.Leader
		for _, ld := range obs {
			if ld == (dlock.Leader{}) {
				continue
			}
			if ld.Term == last.Term && ld.Value == last.Value && ld.Transitions > last.Transitions {
				// The same term with its count: a read found the term
				// before its node counted it (see Observe).
				last = ld
				continue
			}
			if ld.Term <= last.Term {
				t.Errorf("observer %d: %+v after %+v", i, ld, last)
			}
			last = ld
			got = append(got, term{ld.Value, ld.Term})
		}
		if fmt.Sprint(got) != fmt.Sprint(winners) {
			t.Errorf("observer %d saw %v\nleaders were %v", i, got, winners)
		}
	}
}

func countLeaders(ls []dlock.Leader) int {
	n := 0
	for _, l := range ls {
		if l != (dlock.Leader{}) {
			n++
		}
	}
	return n
}

// TestLeaderNone: an election without a leader says so.
func TestLeaderNone(t *testing.T) {
	s := dlocktest.Start(t)
	l := newLocker(t, s.Client())
	if _, err := l.Leader(ctx(t), "nobody"); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader: %v, want ErrNoLeader", err)
	}
	if _, err := l.Campaign(ctx(t), "nobody", ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Campaign with an empty value: %v, want ErrInvalid", err)
	}
}

// TestElectionRedlock: over three masters, the leader is the holder of a
// quorum, with the term its Campaign returned; observers see it come and go,
// also with one node frozen.
func TestElectionRedlock(t *testing.T) {
	a, servers, _ := redlock(t, 3)
	octx, stop := context.WithCancel(ctx(t))
	defer stop()
	obs := a.Observe(octx, "el")
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("first: %+v", ld)
	}
	thaw := freeze(t, servers[2])
	defer thaw()
	k, err := a.Campaign(ctx(t), "el", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld.Value != "node-a" || ld.Term != k.Fence() {
		t.Fatalf("observed %+v, want node-a at term %d", ld, k.Fence())
	}
	if ld, err := a.Leader(ctx(t), "el"); err != nil || ld.Value != "node-a" || ld.Term != k.Fence() {
		t.Fatalf("Leader: %+v, %v", ld, err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("after the resignation: %+v", ld)
	}
	if _, err := a.Leader(ctx(t), "el"); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader after the resignation: %v", err)
	}
}

// TestCloseAnnouncesVacancy: a leader's Locker closed gives the leadership
// back, and observers hear of the vacancy at once, not after the TTL.
func TestCloseAnnouncesVacancy(t *testing.T) {
	s := dlocktest.Start(t)
	obs := newLocker(t, s.Client())
	octx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch := obs.Observe(octx, "vacate")
	if first := <-ch; first != (dlock.Leader{}) {
		t.Fatalf("first %v, want vacant", first)
	}
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	k, err := l.Campaign(ctx(t), "vacate", "a", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.Value != "a" || got.Term != k.Fence() {
		t.Fatalf("leader %v, want a at term %d", got, k.Fence())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ch:
		if got != (dlock.Leader{}) {
			t.Errorf("after Close: %v, want vacant", got)
		}
	case <-time.After(10 * time.Second): // far below the TTL of a minute
		t.Fatal("the vacancy was not announced when the leader's Locker closed")
	}
}
