package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestTransitionsOutliveRetention, on one Redis and on a Redlock of three:
// a leader that holds (renewed) for several times the fence counter's
// retention keeps the election's count of terms: Leader reports
// Transitions 1 all along, and the next leader's term is counted as the
// second, also by an observer.
func TestTransitionsOutliveRetention(t *testing.T) {
	const (
		retention = 300 * time.Millisecond
		ttl       = time.Second // the count lives max(retention, ttl) after a use
		hold      = 3 * ttl
	)
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "single", 3: "redlock3"}[n], func(t *testing.T) {
			servers := dlocktest.StartN(t, n)
			mk := func() *dlock.Locker {
				clients := dlocktest.Clients(t, servers...)
				if n == 1 {
					l := dlock.New(clients[0], dlock.WithFenceRetention(retention))
					t.Cleanup(func() { l.Close() })
					return l
				}
				l, err := dlock.NewRedlock(clients, dlock.WithFenceRetention(retention))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				return l
			}
			a, b := mk(), mk()
			k, err := a.Campaign(ctx(t), "long", "a", dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			// Wall-clock time past the count's life is the subject: read
			// the leader all along.
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for end := time.Now().Add(hold); time.Now().Before(end); <-tick.C {
				ld, err := b.Leader(ctx(t), "long")
				if err != nil || ld.Term != k.Fence() || ld.Transitions != 1 {
					t.Fatalf("after %s of leadership: Leader %+v, %v; want term %d, 1 transition",
						hold-time.Until(end), ld, err, k.Fence())
				}
			}
			select {
			case <-k.Lost():
				t.Fatal("the leadership was lost")
			default:
			}

			obs := b.Observe(ctx(t), "long")
			if ld := next(t, obs, "the first term"); ld.Transitions != 1 {
				t.Fatalf("observed %+v, want 1 transition", ld)
			}
			if err := k.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			k2, err := b.Campaign(ctx(t), "long", "b", dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer k2.Release(ctx(t))
			want := dlock.Leader{Value: "b", Term: k2.Fence(), Transitions: 2}
			if ld, err := a.Leader(ctx(t), "long"); err != nil || ld != want {
				t.Fatalf("the second term: Leader %+v, %v; want %+v", ld, err, want)
			}
			for {
				ld := next(t, obs, "the second term")
				if ld == (dlock.Leader{}) {
					continue // the vacancy
				}
				if ld != want {
					t.Fatalf("observed %+v, want %+v", ld, want)
				}
				break
			}
		})
	}
}
