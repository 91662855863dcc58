package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/contract"
)

// topology is a deployment for a table-driven test: Start starts its
// servers and returns a maker of Lockers on them (each closed, with its
// clients, when the test ends). The contract suite takes the same.
type topology = contract.Topology

// topologies are one Redis, a Redlock of five masters and a Cluster of
// three.
var topologies = []topology{
	{Name: "single", Start: func(t *testing.T) func() *dlock.Locker {
		s := dlocktest.Start(t)
		return func() *dlock.Locker {
			c := s.Client()
			l := dlock.New(c)
			t.Cleanup(func() { l.Close(); c.Close() })
			return l
		}
	}},
	{Name: "redlock5", Start: func(t *testing.T) func() *dlock.Locker {
		servers := dlocktest.StartN(t, 5)
		return func() *dlock.Locker {
			l, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		}
	}},
	{Name: "cluster3", Start: func(t *testing.T) func() *dlock.Locker {
		cl := dlocktest.StartCluster(t, 3)
		return func() *dlock.Locker {
			c := cl.Client()
			l := dlock.New(c)
			t.Cleanup(func() { l.Close(); c.Close() })
			return l
		}
	}},
}

// hold acquires n permits of key with limit, for a long TTL.
func hold(t *testing.T, l *dlock.Locker, key string, limit, n int) []*dlock.Lock {
	t.Helper()
	var ks []*dlock.Lock
	for range n {
		k, err := l.TryAcquire(ctx(t), key, dlock.WithLimit(limit), dlock.WithTTL(20*time.Second))
		if err != nil {
			t.Fatalf("a permit of %q (limit %d): %v", key, limit, err)
		}
		ks = append(ks, k)
	}
	return ks
}

// TestSetLimit, on each topology: a raise admits a waiter at once (woken,
// well before the holders' TTL could free a permit); a waiter that asked
// for the old limit is admitted against the new one; lowering admits no
// one until fewer permits than the new limit are held, and the holders keep
// theirs (renewed, released); a plain lock or shared holds are
// ErrMisconfigured, a free key ErrNotHeld, n < 2 ErrInvalid.
func TestSetLimit(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			mk := topo.Start(t)
			a, b := mk(), mk()

			// A raise wakes a waiter that asked for the old limit.
			held := hold(t, a, "raise", 2, 2)
			got := make(chan *dlock.Lock, 1)
			go func() {
				k, err := b.Acquire(ctx(t), "raise", dlock.WithLimit(2), dlock.WithTTL(20*time.Second))
				// On a Redlock the nodes change one by one: the waiter,
				// woken by the first, asks again with the new limit and
				// may meet a node not yet changed, which refuses it as
				// misconfigured; SetLimit's doc says to try again (one
				// Redis and a Cluster change atomically: no retry).
				for try := 0; topo.Name == "redlock5" && errors.Is(err, dlock.ErrMisconfigured) && try < 3; try++ {
					t.Logf("refused while the nodes disagree (tried again): %v", err)
					k, err = b.Acquire(ctx(t), "raise", dlock.WithLimit(2), dlock.WithTTL(20*time.Second))
				}
				if err != nil {
					t.Error(err)
				}
				got <- k
			}()
			waitFor(t, func() bool { st, _ := a.Status(ctx(t), "raise"); return st.Waiters == 1 }, "the waiter")
			if err := a.SetLimit(ctx(t), "raise", 3); err != nil {
				t.Fatal(err)
			}
			var k3 *dlock.Lock
			select {
			case k3 = <-got:
			case <-time.After(10 * time.Second): // the holders' TTL is 20s
				t.Fatal("the raise did not admit the waiter")
			}
			if k3 == nil {
				t.FailNow()
			}
			if st, err := a.Status(ctx(t), "raise"); err != nil || st.Limit != 3 || len(st.Permits) != 3 {
				t.Fatalf("after the raise: limit %d, %d permits, %v", st.Limit, len(st.Permits), err)
			}
			// The holders' renewals keep the new limit.
			if err := held[0].Extend(ctx(t), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if st, _ := a.Status(ctx(t), "raise"); st.Limit != 3 {
				t.Fatalf("a holder's renewal set the limit back to %d", st.Limit)
			}
			// Lower to 2: three holders keep their permits, and nobody
			// new is admitted until fewer than two are held.
			if err := a.SetLimit(ctx(t), "raise", 2); err != nil {
				t.Fatal(err)
			}
			for _, k := range append(held, k3) {
				if err := k.Extend(ctx(t), 20*time.Second); err != nil {
					t.Fatalf("a holder lost its permit to the lowered limit: %v", err)
				}
			}
			if _, err := b.TryAcquire(ctx(t), "raise", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("three holders, limit 2: %v, want ErrNotAcquired", err)
			}
			if err := k3.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryAcquire(ctx(t), "raise", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("two holders, limit 2: %v, want ErrNotAcquired", err)
			}
			held[1].Release(ctx(t))
			k, err := b.TryAcquire(ctx(t), "raise", dlock.WithLimit(2))
			if err != nil {
				t.Fatalf("one holder, limit 2: %v", err)
			}
			k.Release(ctx(t))
			held[0].Release(ctx(t))

			// Shapes without a limit, a free key, bad n.
			lk, err := a.TryAcquire(ctx(t), "plain")
			if err != nil {
				t.Fatal(err)
			}
			if err := a.SetLimit(ctx(t), "plain", 3); !errors.Is(err, dlock.ErrMisconfigured) {
				t.Errorf("SetLimit of a plain lock: %v, want ErrMisconfigured", err)
			}
			lk.Release(ctx(t))
			sh, err := a.TryAcquire(ctx(t), "shared", dlock.WithShared())
			if err != nil {
				t.Fatal(err)
			}
			if err := a.SetLimit(ctx(t), "shared", 3); !errors.Is(err, dlock.ErrMisconfigured) {
				t.Errorf("SetLimit of shared holds: %v, want ErrMisconfigured", err)
			}
			sh.Release(ctx(t))
			if err := a.SetLimit(ctx(t), "free", 3); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("SetLimit of a free key: %v, want ErrNotHeld", err)
			}
			for _, n := range []int{-1, 0, 1} {
				if err := a.SetLimit(ctx(t), "raise", n); !errors.Is(err, dlock.ErrInvalid) {
					t.Errorf("SetLimit(%d): %v, want ErrInvalid", n, err)
				}
			}
		})
	}
}

// TestSetLimitGrace: within the grace, an acquisition that asks for the
// previous limit is admitted against the new one (and renews with it);
// after the grace it is ErrMisconfigured, and so is a limit that is
// neither, at any time.
func TestSetLimitGrace(t *testing.T) {
	defer dlock.SetLimitGrace(time.Second)()
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			mk := topo.Start(t)
			a, b := mk(), mk()
			held := hold(t, a, "g", 2, 2)
			if err := a.SetLimit(ctx(t), "g", 4); err != nil {
				t.Fatal(err)
			}
			changed := time.Now()
			k, err := b.TryAcquire(ctx(t), "g", dlock.WithLimit(2))
			if err != nil {
				t.Fatalf("the old limit within the grace: %v", err)
			}
			if _, err := b.TryAcquire(ctx(t), "g", dlock.WithLimit(3)); !errors.Is(err, dlock.ErrMisconfigured) {
				t.Fatalf("a limit that is neither: %v, want ErrMisconfigured", err)
			}
			// Admitted against 4: a fourth permit with the old limit too.
			k4, err := b.Acquire(ctx(t), "g", dlock.WithLimit(2))
			if err != nil {
				t.Fatalf("the fourth permit, with the old limit: %v", err)
			}
			if _, err := b.TryAcquire(ctx(t), "g", dlock.WithLimit(4)); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("a fifth permit of 4: %v, want ErrNotAcquired", err)
			}
			if err := k.Extend(ctx(t), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if st, _ := a.Status(ctx(t), "g"); st.Limit != 4 {
				t.Fatalf("limit %d after a renewal of a permit taken with the old limit", st.Limit)
			}
			k4.Release(ctx(t))
			if d := time.Until(changed.Add(1200 * time.Millisecond)); d > 0 {
				time.Sleep(d) // the grace is a time: nothing to wait for but the clock
			}
			if _, err := b.TryAcquire(ctx(t), "g", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrMisconfigured) {
				t.Fatalf("the old limit after the grace: %v, want ErrMisconfigured", err)
			}
			k.Release(ctx(t))
			for _, h := range held {
				h.Release(ctx(t))
			}
		})
	}
}
