package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// askedTopologies build Lockers on one Redis, a 5-node Redlock and a
// 3-master Cluster: each call of the function returned is a new Locker (a
// process of its own) on the same deployment.
var askedTopologies = []struct {
	name  string
	start func(t *testing.T) func() *dlock.Locker
}{
	{"single", func(t *testing.T) func() *dlock.Locker {
		c := dlocktest.Start(t).Client()
		t.Cleanup(func() { c.Close() })
		return func() *dlock.Locker { return newLocker(t, c) }
	}},
	{"redlock", func(t *testing.T) func() *dlock.Locker {
		clients := dlocktest.Clients(t, dlocktest.StartN(t, 5)...)
		return func() *dlock.Locker {
			l, err := dlock.NewRedlock(clients)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		}
	}},
	{"cluster", func(t *testing.T) func() *dlock.Locker {
		cl := dlocktest.StartCluster(t, 3)
		cc := cl.Client()
		t.Cleanup(func() { cc.Close() })
		return func() *dlock.Locker { return newLocker(t, cc) }
	}},
}

// askedWithin waits for k's Asked channel to close.
func askedWithin(t *testing.T, k *dlock.Lock, what string) {
	t.Helper()
	select {
	case <-k.Asked():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Asked did not close", what)
	}
}

// TestAsked: a holder's Asked closes at another Locker's RequestRelease,
// with the reason and the asking process readable, whether its Locker
// listened when the request came or began to listen after (a Locker that
// never waited); the first request counts; a free key is ErrNotHeld and
// bad input ErrInvalid; every permit of a semaphore and every shared hold
// is asked; a request is for the holders at the time, never a later one.
func TestAsked(t *testing.T) {
	for _, tp := range askedTopologies {
		t.Run(tp.name, func(t *testing.T) {
			mk := tp.start(t)
			holder, other, asker := mk(), mk(), mk()
			from := fmt.Sprintf(":%d", os.Getpid())

			k, err := holder.TryAcquire(ctx(t), "job")
			if err != nil {
				t.Fatal(err)
			}
			k.Asked() // the Locker listens from now on
			if err := asker.RequestRelease(ctx(t), "job", "deploy v2"); err != nil {
				t.Fatal(err)
			}
			askedWithin(t, k, "a listening holder")
			if k.AskedReason() != "deploy v2" || !strings.HasSuffix(k.AskedBy(), from) {
				t.Errorf("asked %q by %q, want %q by …%s", k.AskedReason(), k.AskedBy(), "deploy v2", from)
			}
			if err := asker.RequestRelease(ctx(t), "job", "second"); err != nil || k.AskedReason() != "deploy v2" {
				t.Errorf("a second request: %v, reason now %q (the first one counts)", err, k.AskedReason())
			}
			if st, err := asker.Status(ctx(t), "job"); err != nil || st.Asked == nil || st.Asked.Reason != "deploy v2" {
				t.Errorf("Status: %+v, %v: want the pending request", st.Asked, err)
			}

			// A Locker that never waited nor listened: the request is kept,
			// and heard once it listens.
			k2, err := other.TryAcquire(ctx(t), "early")
			if err != nil {
				t.Fatal(err)
			}
			if err := asker.RequestRelease(ctx(t), "early", "before"); err != nil {
				t.Fatal(err)
			}
			askedWithin(t, k2, "a holder that listens after the request")
			if k2.AskedReason() != "before" {
				t.Errorf("reason %q", k2.AskedReason())
			}

			// A request is for the holders at the time.
			if err := k.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if err := asker.RequestRelease(ctx(t), "job", "late"); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("a request for a free key: %v, want ErrNotHeld", err)
			}
			// A Locker that begins to listen while the request for the
			// earlier holder is still kept.
			next, err := mk().TryAcquire(ctx(t), "job")
			if err != nil {
				t.Fatal(err)
			}
			next.Asked()
			if st, err := asker.Status(ctx(t), "job"); err != nil || st.Asked != nil {
				t.Errorf("Status of the next holder: %+v, %v: want no request", st.Asked, err)
			}
			if err := asker.RequestRelease(ctx(t), "job", "for next"); err != nil {
				t.Fatal(err)
			}
			askedWithin(t, next, "the next holder")
			if next.AskedReason() != "for next" {
				t.Errorf("the next holder heard %q, want only its own request", next.AskedReason())
			}

			// Every permit, every shared hold.
			for _, opt := range []dlock.LockOption{dlock.WithLimit(2), dlock.WithShared()} {
				p1, err := holder.TryAcquire(ctx(t), "many", opt)
				if err != nil {
					t.Fatal(err)
				}
				p2, err := other.TryAcquire(ctx(t), "many", opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := asker.RequestRelease(ctx(t), "many", "all"); err != nil {
					t.Fatal(err)
				}
				askedWithin(t, p1, "a holder of many")
				askedWithin(t, p2, "another holder of many")
				p1.Release(ctx(t))
				p2.Release(ctx(t))
			}

			for _, tc := range []struct {
				key, reason string
				want        error
			}{
				{"nobody", "", dlock.ErrNotHeld},
				{"", "r", dlock.ErrInvalid},
				{"job", strings.Repeat("r", dlock.MaxMetadata+1), dlock.ErrInvalid},
			} {
				if err := asker.RequestRelease(ctx(t), tc.key, tc.reason); !errors.Is(err, tc.want) {
					t.Errorf("RequestRelease(%q, %d bytes): %v, want %v", tc.key, len(tc.reason), err, tc.want)
				}
			}
		})
	}
}

// TestAskedIdleCost: nothing is sent or stored for release requests while
// nobody asks: a Locker that never calls Asked never subscribes, and one
// that listens sends no command once its subscription is confirmed (and
// the requests kept for its locks read, once).
func TestAskedIdleCost(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := newLocker(t, c)
	calls := func(name string) int64 { return commandCalls(t, c)["cmdstat_"+name] }

	for range 3 {
		k, err := l.TryAcquire(ctx(t), "idle", dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		k.Extend(ctx(t), time.Second)
		k.Release(ctx(t))
	}
	if n := calls("subscribe"); n != 0 {
		t.Errorf("%d SUBSCRIBE without a call of Asked", n)
	}
	k, err := l.TryAcquire(ctx(t), "idle", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	k.Asked()
	waitFor(t, func() bool { return calls("hget") >= 1 }, "the read of the requests kept")
	before := commandCalls(t, c)
	time.Sleep(time.Second) // idle: a measurement, not a synchronisation
	after := commandCalls(t, c)
	for name, n := range after {
		if n != before[name] {
			t.Errorf("idle: %s ran %d times", name, n-before[name])
		}
	}
	if ks, err := c.Keys(ctx(t), "*asked*").Result(); err != nil || len(ks) != 0 {
		t.Errorf("keys stored without a request: %v, %v", ks, err)
	}
	select {
	case <-k.Asked():
		t.Error("Asked closed without a request")
	default:
	}
}

// commandCalls is the calls per command of INFO commandstats, less INFO's.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	stats, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		var n int64
		fmt.Sscanf(rest, "%d", &n)
		out[name] = n
	}
	return out
}

// TestAskedRedlockQuorum: on a 5-node Redlock a request succeeds when a
// quorum of nodes found the holder (two frozen nodes do not stop it, and
// the holder is told by the others); a key held on a minority only is
// ErrNotHeld, and three frozen nodes make it ErrUnavailable.
func TestAskedRedlockQuorum(t *testing.T) {
	servers := dlocktest.StartN(t, 5)
	clients := dlocktest.Clients(t, servers...)
	mk := func() *dlock.Locker {
		l, err := dlock.NewRedlock(clients)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	holder, asker := mk(), mk()
	k, err := holder.TryAcquire(ctx(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	k.Asked()
	for _, c := range clients[:2] {
		if err := c.Set(ctx(t), "dlock:{minority}", "someone", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := asker.RequestRelease(ctx(t), "minority", ""); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("held on two of five: %v, want ErrNotHeld", err)
	}
	freeze(t, servers[3], servers[4])
	if err := asker.RequestRelease(ctx(t), "q", "two down"); err != nil {
		t.Fatalf("two of five frozen: %v", err)
	}
	askedWithin(t, k, "a holder told by three of five")

	freeze(t, servers[2])
	if err := asker.RequestRelease(ctx(t), "q", ""); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("three of five frozen: %v, want ErrUnavailable", err)
	}
}

// TestAskedLeader: a leader (Campaign) hears a request like any holder;
// when it resigns (Release), the waiting candidate leads.
func TestAskedLeader(t *testing.T) {
	c := dlocktest.Start(t).Client()
	defer c.Close()
	a, b, asker := newLocker(t, c), newLocker(t, c), newLocker(t, c)
	leader, err := a.Campaign(ctx(t), "election", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *dlock.Lock, 1)
	go func() {
		k, err := b.Campaign(ctx(t), "election", "node-b")
		if err != nil {
			t.Error(err)
		}
		next <- k
	}()
	waitFor(t, func() bool { st, _ := asker.Status(ctx(t), "election"); return st.Waiters == 1 }, "the candidate")
	if err := asker.RequestRelease(ctx(t), "election", "maintenance of node-a"); err != nil {
		t.Fatal(err)
	}
	askedWithin(t, leader, "the leader")
	if err := leader.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	k := <-next
	if ld, err := asker.Leader(ctx(t), "election"); err != nil || ld.Value != "node-b" || k == nil || ld.Term != k.Fence() {
		t.Errorf("leader after the resignation: %+v, %v", ld, err)
	}
}

// TestRequestLeadership: a waiting candidate that asks for the leadership
// is served first when the leader resigns, before a candidate that waited
// longer; on one Redis, a 5-node Redlock and a Cluster. A Locker without a waiting
// Campaign gets ErrInvalid.
func TestRequestLeadership(t *testing.T) {
	for _, tp := range askedTopologies {
		t.Run(tp.name, func(t *testing.T) {
			mk := tp.start(t)
			a, b, c := mk(), mk(), mk()
			leader, err := a.Campaign(ctx(t), "election", "node-a")
			if err != nil {
				t.Fatal(err)
			}
			campaign := func(l *dlock.Locker, value string) <-chan *dlock.Lock {
				got := make(chan *dlock.Lock, 1)
				go func() {
					k, err := l.Campaign(ctx(t), "election", value)
					if err != nil {
						t.Error(err)
					}
					got <- k
				}()
				return got
			}
			waiters := func(n int64) func() bool {
				return func() bool { st, _ := a.Status(ctx(t), "election"); return st.Waiters == n }
			}
			gotB := campaign(b, "node-b")
			waitFor(t, waiters(1), "the first candidate")
			if err := c.RequestLeadership(ctx(t), "election", "c first"); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("RequestLeadership without a Campaign: %v, want ErrInvalid", err)
			}
			gotC := campaign(c, "node-c")
			waitFor(t, waiters(2), "the second candidate")
			if err := c.RequestLeadership(ctx(t), "election", "hand over to c"); err != nil {
				t.Fatal(err)
			}
			askedWithin(t, leader, "the leader")
			if leader.AskedReason() != "hand over to c" {
				t.Errorf("reason %q", leader.AskedReason())
			}
			if err := leader.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			kc := <-gotC
			if ld, err := a.Leader(ctx(t), "election"); err != nil || kc == nil || ld.Value != "node-c" || ld.Term != kc.Fence() {
				t.Fatalf("leader after the hand-over: %+v, %v; want node-c", ld, err)
			}
			kc.Release(ctx(t))
			if kb := <-gotB; kb != nil {
				kb.Release(ctx(t))
			}
		})
	}
}
