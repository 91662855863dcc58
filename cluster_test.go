package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/redisserver"
)

// keyOn returns a lock name whose keys the master at addr serves.
func keyOn(t *testing.T, cc *redis.ClusterClient, addr, prefix string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		m, err := cc.MasterForKey(ctx(t), "dlock:{"+k+"}")
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr {
			return k
		}
	}
	t.Fatalf("no key on %s", addr)
	return ""
}

// settled calls fn until it returns something else than ErrUnavailable
// (the Cluster client finds the new master a moment after a failover), for
// up to 10s, and returns that.
func settled(t *testing.T, fn func() error) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if !errors.Is(err, dlock.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isMaster reports whether the server answers ROLE with master.
func isMaster(s *dlocktest.Server) bool {
	c := s.Client()
	defer c.Close()
	role, err := c.Do(context.Background(), "ROLE").Slice()
	return err == nil && len(role) > 0 && role[0] == "master"
}

// TestClusterSlots: locks on keys of every master, waiting and wake-up
// across nodes (each node's pub/sub), Status and ForceRelease.
func TestClusterSlots(t *testing.T) {
	cl := dlocktest.StartCluster(t, 3)
	cc := cl.Client()
	defer cc.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	for i, s := range cl.Servers {
		key := keyOn(t, cc, s.Addr(), fmt.Sprintf("slot%d-", i))
		k, err := a.TryAcquire(ctx(t), key, dlock.WithMetadata("a"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.Status(ctx(t), key)
		if err != nil || !st.Held || st.Metadata != "a" || st.Fence != k.Fence() {
			t.Fatalf("Status(%q) on %s = %+v, %v", key, s.Addr(), st, err)
		}
		got := acquireAsync(t, b, key)
		waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return st.Waiters == 1 }, "the waiter on "+s.Addr())
		handoff(t, k, got, "a waiter for a key on "+s.Addr())
		k, err = a.TryAcquire(ctx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := b.ForceRelease(ctx(t), key); err != nil || n != 1 {
			t.Fatalf("ForceRelease(%q) = %d, %v", key, n, err)
		}
		if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Release after ForceRelease: %v", err)
		}
	}
}

// TestClusterFailover: a master is killed and its replica promoted while
// locks are held. A lock the replica had received survives; a lock it had
// not is lost, its holder learns it through Lost, and the next fence is
// still larger (the promoted replica missed the last increment of the
// counter); with WithReplicaAck, a lock is granted only once a replica has
// it, so that window is closed.
func TestClusterFailover(t *testing.T) {
	cl := dlocktest.StartClusterWithReplicas(t, 3, 1)
	cc := cl.Client()
	defer cc.Close()
	l := newLocker(t, cc)
	other := newLocker(t, cl.Client())
	promoted := func(s *dlocktest.Server) {
		t.Helper()
		waitFor(t, func() bool { return isMaster(s) }, "the replica "+s.Addr()+" to be promoted")
	}
	onReplica := func(s *dlocktest.Server, key string) bool {
		c := s.Client()
		defer c.Close()
		c.Do(ctx(t), "READONLY")
		return c.Exists(ctx(t), "dlock:{"+key+"}").Val() == 1
	}

	t.Run("a replicated lock survives", func(t *testing.T) {
		key := keyOn(t, cc, cl.Servers[0].Addr(), "kept")
		k, err := l.Acquire(ctx(t), key, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx(t))
		waitFor(t, func() bool { return onReplica(cl.Replicas[0], key) }, "the lock to reach the replica")
		cl.Servers[0].Kill()
		promoted(cl.Replicas[0])
		if err := settled(t, func() error { return k.Extend(ctx(t), 10*time.Second) }); err != nil {
			t.Fatalf("Extend after the failover: %v", err)
		}
		select {
		case <-k.Lost():
			t.Fatal("a replicated lock was lost in the failover")
		default:
		}
		if err := settled(t, func() error { _, err := other.TryAcquire(ctx(t), key); return err }); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("another process after the failover: %v, want ErrNotAcquired", err)
		}
	})

	t.Run("a lock the replica missed is lost, fences still grow", func(t *testing.T) {
		key := keyOn(t, cc, cl.Servers[1].Addr(), "missed")
		// A first acquisition the replica receives: it has the counter.
		k1, err := l.Acquire(ctx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		k1.Release(ctx(t))
		waitFor(t, func() bool {
			c := cl.Replicas[1].Client()
			defer c.Close()
			c.Do(ctx(t), "READONLY")
			return c.Exists(ctx(t), "dlock:{"+key+"}:fence").Val() == 1
		}, "the counter to reach the replica")
		// The replica stops receiving: frozen (it could not reconnect),
		// and its link cut by the master (a frozen process's kernel would
		// still buffer what the master sends).
		thaw := freeze(t, cl.Replicas[1])
		m := cl.Servers[1].Client()
		defer m.Close()
		if err := m.Do(ctx(t), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
			t.Fatal(err)
		}
		k2, err := l.Acquire(ctx(t), key, dlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer k2.Release(ctx(t))
		cl.Servers[1].Kill()
		thaw()
		promoted(cl.Replicas[1])
		select {
		case <-k2.Lost():
		case <-time.After(15 * time.Second):
			t.Fatal("the holder of a lock lost in the failover was not told")
		}
		k3, err := other.Acquire(ctxTimeout(t, 15*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		defer k3.Release(ctx(t))
		if k3.Fence() <= k2.Fence() {
			t.Errorf("fence %d after the failover, not above the %d the lost holder had", k3.Fence(), k2.Fence())
		}
	})

	t.Run("WithReplicaAck closes the window", func(t *testing.T) {
		acked := newLocker(t, cl.Client(), dlock.WithReplicaAck(1))
		key := keyOn(t, cc, cl.Servers[2].Addr(), "acked")
		// The fault that lost the lock above: not granted now.
		thaw := freeze(t, cl.Replicas[2])
		m := cl.Servers[2].Client()
		defer m.Close()
		if err := m.Do(ctx(t), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := acked.TryAcquire(ctx(t), key)
		isClass(t, "TryAcquire with the replica cut off", err, dlock.ErrUnavailable)
		thaw()
		k, err := acked.Acquire(ctxTimeout(t, 10*time.Second), key, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx(t))
		if !onReplica(cl.Replicas[2], key) {
			t.Fatal("Acquire with WithReplicaAck(1) returned before the replica had the lock")
		}
		cl.Servers[2].Kill()
		promoted(cl.Replicas[2])
		if err := settled(t, func() error { _, err := other.TryAcquire(ctx(t), key); return err }); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("another process after the failover: %v, want ErrNotAcquired", err)
		}
		select {
		case <-k.Lost():
			t.Error("an acknowledged lock was lost in the failover")
		default:
		}
	})
}

// TestClusterSemaphoreAndElection: a semaphore (awkward names included) and
// an election on a real Cluster: permits, a waiter woken by a release,
// Status's permits; a leader announced to an observer, and its resignation.
func TestClusterSemaphoreAndElection(t *testing.T) {
	cl := dlocktest.StartCluster(t, 3)
	cc := cl.Client()
	defer cc.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	for _, key := range []string{"sem", "}sem{", "\x00sem"} {
		p1, err := a.TryAcquire(ctx(t), key, dlock.WithLimit(2), dlock.WithMetadata("p1"))
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		p2, err := b.TryAcquire(ctx(t), key, dlock.WithLimit(2))
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		if st, err := a.Status(ctx(t), key); err != nil || st.Limit != 2 || len(st.Permits) != 2 {
			t.Fatalf("%q: Status %+v, %v", key, st, err)
		}
		got := acquireAsync(t, b, key, dlock.WithLimit(2))
		waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return st.Waiters == 1 }, "the waiter for "+key)
		handoff(t, p1, got, "a waiter for a permit of "+key)
		p2.Release(ctx(t))
	}

	octx, stop := context.WithCancel(ctx(t))
	defer stop()
	obs := b.Observe(octx, "leader")
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("first: %+v", ld)
	}
	k, err := a.Campaign(ctx(t), "leader", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld.Value != "node-a" || ld.Term != k.Fence() {
		t.Fatalf("observed %+v", ld)
	}
	if ld, err := b.Leader(ctx(t), "leader"); err != nil || ld.Term != k.Fence() {
		t.Fatalf("Leader: %+v, %v", ld, err)
	}
	k.Release(ctx(t))
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("after the resignation: %+v", ld)
	}
}

// TestPlainClientToClusterNode: a plain client to a node of a Cluster gets
// ErrMisconfigured for a key of another node's slot, and the error says
// what to do (a Cluster client), not only MOVED.
func TestPlainClientToClusterNode(t *testing.T) {
	cluster := dlocktest.StartCluster(t, 3)
	cc := cluster.Client()
	defer cc.Close()
	other := keyOn(t, cc, cluster.Servers[1].Addr(), "elsewhere")
	plain := cluster.Servers[0].Client()
	defer plain.Close()
	_, err := newLocker(t, plain).TryAcquire(ctx(t), other)
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrMisconfigured) || !errors.As(err, &ne) {
		t.Fatalf("TryAcquire of a key on another node: %v, want ErrMisconfigured naming the node", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "MOVED") || !strings.Contains(msg, "redis.ClusterClient") {
		t.Errorf("the error does not say to use a Cluster client: %q", msg)
	}
}

// TestClusterStatusBesideFrozenMaster: Status and Leader on a Cluster read
// everything from the key's own master, the server's time included: a
// frozen master that serves other slots fails none of them (a keyless TIME
// went to a random master, so about one call in three waited out the node
// timeout and failed with ErrUnavailable).
func TestClusterStatusBesideFrozenMaster(t *testing.T) {
	t.Parallel()
	// Without full coverage the healthy masters keep serving their slots
	// once the frozen one is marked failed (it has no replica).
	cl, err := redisserver.NewClusterWith(3, 0, redisserver.WithArgs("--cluster-require-full-coverage", "no"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	cc := cl.Client()
	defer cc.Close()
	l := newLocker(t, cc, dlock.WithNodeTimeout(300*time.Millisecond))
	key := keyOn(t, cc, cl.Servers[0].Addr(), "beside")
	k, err := l.Campaign(ctx(t), key, "leader", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	freeze(t, cl.Servers[1])
	// A keyless command goes to one of three masters at random: 20 calls
	// of each all miss the frozen one once in 3,000 runs.
	failed := 0
	for range 20 {
		if st, err := l.Status(ctx(t), key); err != nil || !st.Held || st.Fence != k.Fence() {
			failed++
			t.Logf("Status: %+v, %v", st, err)
		}
		if ld, err := l.Leader(ctx(t), key); err != nil || ld.Term != k.Fence() || ld.Value != "leader" {
			failed++
			t.Logf("Leader: %+v, %v", ld, err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of 40 calls of Status and Leader failed while a master that does not serve the key was frozen", failed)
	}
}

// TestClusterFrozenFailoverRenewed: a lock of the default TTL (30s) on a
// Cluster survives its master's freeze (SIGSTOP: its connections stay open
// and silent) and its replica's takeover (a Cluster node timeout of 1s),
// with the freeze just before a renewal was due (its validity then is at
// most 2/3 of the TTL plus 2s; 2/3 of the TTL is the least it can be):
// go-redis sends the renewals to the new master in time. The test logs when the first renewal was confirmed
// (docs/reliability.md: what a lock's TTL must exceed).
func TestClusterFrozenFailoverRenewed(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartClusterWithReplicas(t, 3, 1)
	cc := cl.Client()
	defer cc.Close()
	l := newLocker(t, cc)
	master, replica := cl.Servers[0], cl.Replicas[0]
	key := keyOn(t, cc, master.Addr(), "renewed")
	k, err := l.Acquire(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	rc := replica.Client()
	defer rc.Close()
	waitFor(t, func() bool {
		rc.Do(ctx(t), "READONLY")
		return rc.Exists(ctx(t), "dlock:{"+key+"}").Val() == 1
	}, "the lock to reach the replica")
	// Just before a renewal, sent to the frozen master: a renewal is due
	// TTL/3 after the last (validity 2/3 TTL - drift left), at the instant
	// of the Locker's grid (2048ms for a TTL of 30s) before that.
	waitWithin(t, dlock.DefaultTTL, func() bool { return time.Until(k.ValidUntil()) < 2*dlock.DefaultTTL/3+2150*time.Millisecond }, "the next renewal to come near")
	valid := k.ValidUntil()
	frozen := time.Now()
	freeze(t, master)
	waitFor(t, func() bool { return isMaster(replica) }, "the replica to take over")
	promoted := time.Now()
	for !k.ValidUntil().After(valid) {
		select {
		case <-k.Lost():
			t.Fatalf("the lock was lost %s after the freeze (its validity then: %s; the replica took over %s after the freeze)",
				time.Since(frozen).Round(10*time.Millisecond), valid.Sub(frozen).Round(10*time.Millisecond), promoted.Sub(frozen).Round(10*time.Millisecond))
		case <-time.After(10 * time.Millisecond): // ValidUntil is read, not waited on
		}
	}
	t.Logf("validity left at the freeze %s; the replica took over %s after it; the first renewal confirmed %s after it (%s after the takeover)",
		valid.Sub(frozen).Round(10*time.Millisecond), promoted.Sub(frozen).Round(10*time.Millisecond),
		time.Since(frozen).Round(10*time.Millisecond), time.Since(promoted).Round(10*time.Millisecond))
}
