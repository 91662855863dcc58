package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestMissingScripting: a server whose EVALSHA (and EVAL) is renamed away,
// as a managed service or a build without Lua ships it, refuses every
// acquisition at once with ErrMisconfigured that says what the server lacks
// and what to do, without Redis' raw words and the lock's key names; nothing
// is written.
func TestMissingScripting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"EVALSHA and EVAL", []string{"--rename-command", "EVALSHA", "", "--rename-command", "EVAL", ""}},
		{"EVALSHA", []string{"--rename-command", "EVALSHA", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dlocktest.Start(t, dlocktest.WithArgs(tc.args...))
			c := s.Client()
			defer c.Close()
			l := newLocker(t, c)
			start := time.Now()
			_, err := l.TryAcquire(ctx(t), "k")
			t.Logf("%v (after %s)", err, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, dlock.ErrMisconfigured) || errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("%v, want ErrMisconfigured alone", err)
			}
			msg := err.Error()
			for _, want := range []string{"has no EVALSHA", "a server without scripting cannot run dlock"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, "dlock:{k}") || strings.Contains(msg, "with args beginning with") {
				t.Errorf("%q repeats Redis' raw words and the lock's keys", msg)
			}
			if n := c.DBSize(ctx(t)).Val(); n != 0 {
				t.Errorf("%d keys written, want none", n)
			}
		})
	}
}

// TestMissingWait: with WithReplicaAck(1) on a server whose WAIT is renamed
// away (as ElastiCache Serverless lacks it), the acquisition fails with
// ErrMisconfigured that names WithReplicaAck and WAIT, and leaves nothing
// on the server: the lock the script wrote before WAIT was refused is
// released before TryAcquire returns, so another Locker takes it at once.
func TestMissingWait(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t, dlocktest.WithArgs("--rename-command", "WAIT", ""))
	c := s.Client()
	defer c.Close()
	acked := newLocker(t, c, dlock.WithReplicaAck(1))
	for _, key := range []string{"nowait", "nowait-meta"} {
		var opts []dlock.LockOption
		if key == "nowait-meta" {
			opts = append(opts, dlock.WithMetadata("m"))
		}
		_, err := acked.TryAcquire(ctx(t), key, opts...)
		t.Log(err)
		if !errors.Is(err, dlock.ErrMisconfigured) || errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("%v, want ErrMisconfigured alone", err)
		}
		for _, want := range []string{"WithReplicaAck needs WAIT", "ElastiCache Serverless"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		if left := c.Keys(ctx(t), "dlock:{"+key+"}*").Val(); len(left) != 1 || left[0] != "dlock:{"+key+"}:fence" {
			t.Errorf("left on the server after the refused WAIT: %v, want only the fence counter", left)
		}
		k, err := newLocker(t, c).TryAcquire(ctx(t), key)
		if err != nil {
			t.Fatalf("another Locker, at once: %v", err)
		}
		k.Release(ctx(t))
	}
}

// TestClusterWithoutSpublish: on a Cluster whose SPUBLISH is renamed away
// (SSUBSCRIBE kept: the waiter subscribes sharded), a release still wakes
// the waiter at once, through the classic channel that release.lua falls
// back to.
func TestClusterWithoutSpublish(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartClusterWith(t, 1, 0, dlocktest.WithArgs("--rename-command", "SPUBLISH", ""))
	cc := cl.Client()
	defer cc.Close()
	admin := cl.Servers[0].Client()
	defer admin.Close()
	if err := admin.Do(ctx(t), "SPUBLISH", "x", "y").Err(); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("SPUBLISH on the test's server: %v, want an unknown command", err)
	}
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	for _, key := range []string{"nospub0", "nospub1"} {
		k, err := a.TryAcquire(ctx(t), key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		handoff(t, k, queued(t, b, admin, key, 1), "a waiter on a Cluster without SPUBLISH")
	}
}

// TestOneShardCluster: a Cluster of one master that serves all 16384 slots
// (the shape of ElastiCache Serverless behind its one endpoint) works
// through a redis.ClusterClient: acquisitions, renewals, and a waiter woken
// by the release.
func TestOneShardCluster(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	cc := cl.Client()
	defer cc.Close()
	admin := cl.Servers[0].Client()
	defer admin.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	k, err := a.TryAcquire(ctx(t), "oneshard", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := queued(t, b, admin, "oneshard", 1)
	select { // renewed past two TTLs
	case <-k.Lost():
		t.Fatal("lost while renewing on a one-shard Cluster")
	case <-time.After(2 * time.Second):
	}
	handoff(t, k, got, "a waiter on a one-shard Cluster")
	for i := range 20 { // keys of many slots, one endpoint
		key := "slot" + strings.Repeat("x", i)
		k, err := a.TryAcquire(ctx(t), key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := k.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}
