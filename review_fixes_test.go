package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// runLine runs a command given as one line (an ACL SETUSER line, say) with c.
func runLine(t *testing.T, c *redis.Client, line string) {
	t.Helper()
	var args []any
	for _, f := range strings.Fields(line) {
		args = append(args, f)
	}
	if err := c.Do(ctx(t), args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaAckWaitRefused: a user made with the ACL line of docs/operations.md less +wait
// with WithReplicaAck(1). WAIT is refused with NOPERM, a permanent error:
// the acquisition should be ErrMisconfigured, returned at once.
func TestReplicaAckWaitRefused(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	runLine(t, admin, "ACL SETUSER dlock on >PASSWORD resetkeys ~dlock:* resetchannels &dlock:inbox:* &dlock:leader:* -@all +evalsha +eval +subscribe +ping +get +set +del +incr +pexpire +pttl +time +zscore +hexists +zadd +hset +zrem +hdel +zpopmin +hget +publish +zrange +zcard +hgetall +pexpireat +zcount +zremrangebyscore +zrangebyscore +info")
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "dlock", Password: "PASSWORD"})
	defer c.Close()
	l := newLocker(t, c, dlock.WithReplicaAck(1))
	start := time.Now()
	_, err := l.Acquire(ctxTimeout(t, 3*time.Second), "k")
	t.Logf("Acquire after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, dlock.ErrMisconfigured) {
		t.Errorf("Acquire with WAIT refused by ACL: %v, want ErrMisconfigured at once", err)
	}
}

// TestReplicaAckAfterManualFailover: a Cluster with replicas, a
// Locker WithReplicaAck(1); a manual failover (CLUSTER FAILOVER on the
// replica) makes the old master a replica. The ClusterClient's slot map is
// stale, MasterForKey returns the old master, which answers MOVED: a
// topology change, not a misconfiguration. Without WithReplicaAck the
// ClusterClient follows the redirect.
func TestReplicaAckAfterManualFailover(t *testing.T) {
	cl := dlocktest.StartClusterWithReplicas(t, 3, 1)
	cc := cl.Client()
	defer cc.Close()
	acked := newLocker(t, cc, dlock.WithReplicaAck(1))
	key := keyOn(t, cc, cl.Servers[0].Addr(), "mf")
	k, err := acked.TryAcquire(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	r := cl.Replicas[0].Client()
	defer r.Close()
	if err := r.Do(ctx(t), "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return isMaster(cl.Replicas[0]) && !isMaster(cl.Servers[0]) }, "manual failover")
	start := time.Now()
	_, err = acked.Acquire(ctxTimeout(t, 5*time.Second), key)
	t.Logf("Acquire after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if errors.Is(err, dlock.ErrMisconfigured) {
		t.Errorf("Acquire of a free lock after a manual failover: %v (a MOVED is not a misconfiguration)", err)
	}
	_ = context.Background
}

// TestForeignValueWithoutExpiry: another program SET the lock key
// without an expiry (a dlock key always has one). No holder will ever let
// go; waiting cannot fix it, yet it is reported as a busy lock.
func TestForeignValueWithoutExpiry(t *testing.T) {
	l, _, c := single(t)
	if err := c.Set(ctx(t), "dlock:{foreign}", "some value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.TryAcquire(ctx(t), "foreign")
	t.Logf("TryAcquire: %v", err)
	if errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a value without expiry at the lock key reported as busy: %v", err)
	}
}

// With WAIT refused, the grant the script wrote is cleaned up.
func TestReplicaAckWaitRefusedCleansUp(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	if err := admin.Do(ctx(t), "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "nowait", Password: "pw"})
	defer c.Close()
	l := newLocker(t, c, dlock.WithReplicaAck(1))
	if _, err := l.TryAcquire(ctx(t), "k"); !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("TryAcquire with WAIT refused: %v", err)
	}
	waitFor(t, func() bool { return admin.Exists(ctx(t), "dlock:{k}").Val() == 0 }, "the unacknowledged grant to be cleaned up")
}

// A waiting set of another type is refused before anything is written (the
// registration's writes would fail after others).
func TestWrongTypedWaitingSet(t *testing.T) {
	l, s, c := single(t)
	k, err := l.TryAcquire(ctx(t), "wt")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	c.Set(ctx(t), "dlock:{wt}:waiters", "a string", 0)
	w := newLocker(t, s.Client())
	_, err = w.Acquire(ctxTimeout(t, 10*time.Second), "wt")
	isClass(t, "Acquire with a waiting set of another type", err, dlock.ErrMisconfigured)
	if n := c.Exists(ctx(t), "dlock:{wt}:wexp").Val(); n != 0 {
		t.Error("the refused registration wrote a lease")
	}
}
