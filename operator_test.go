package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// deployment is one of the three topologies of the operator's tests, with
// a way to make Lockers on it that share nothing (each its own clients, as
// separate processes would), and admin clients of each node (for a
// Cluster, one Cluster client).
type deployment struct {
	name   string
	locker func(t *testing.T) *dlock.Locker
	admins []redis.UniversalClient
}

// deployments starts one Redis, a Redlock of 3 and a Cluster of 3 masters.
func deployments(t *testing.T) []deployment {
	t.Helper()
	single := dlocktest.Start(t)
	masters := dlocktest.StartN(t, 3)
	cl := dlocktest.StartCluster(t, 3)
	cc := cl.Client()
	t.Cleanup(func() { cc.Close() })
	return []deployment{
		{name: "one Redis", admins: dlocktest.Clients(t, single), locker: func(t *testing.T) *dlock.Locker {
			return newLocker(t, dlocktest.Clients(t, single)[0])
		}},
		{name: "Redlock of 3", admins: dlocktest.Clients(t, masters...), locker: func(t *testing.T) *dlock.Locker {
			l, err := dlock.NewRedlock(dlocktest.Clients(t, masters...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		}},
		{name: "Cluster of 3", admins: []redis.UniversalClient{cc}, locker: func(t *testing.T) *dlock.Locker {
			c := cl.Client()
			t.Cleanup(func() { c.Close() })
			return newLocker(t, c)
		}},
	}
}

// queueOf is the metadata of a status's waiters, in queue order.
func queueOf(q []dlock.Waiter) []string {
	var out []string
	for _, w := range q {
		out = append(out, w.Metadata)
	}
	return out
}

// TestStatusNamesWaiters: a waiting Acquire's metadata (WithMetadata) is
// shown by Status, in queue order, with when each began to wait, on one
// Redis, a Redlock (every node's view) and a Cluster; a shared waiter says
// so; a waiter without metadata is listed with none; the metadata goes with
// the registration when the waiter gets the lock or gives up.
func TestStatusNamesWaiters(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			key := "named-waiters"
			a := d.locker(t)
			begin := time.Now()
			h, err := a.TryAcquire(ctx(t), key, dlock.WithMetadata("holder"))
			if err != nil {
				t.Fatal(err)
			}
			var got []<-chan *dlock.Lock
			for i, meta := range []string{"w1", "w2", ""} {
				opts := []dlock.LockOption{}
				if meta != "" {
					opts = append(opts, dlock.WithMetadata(meta))
				}
				got = append(got, acquireAsync(t, d.locker(t), key, opts...))
				waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return len(st.Queue) == i+1 }, fmt.Sprintf("waiter %d", i+1))
			}
			gctx, giveUp := context.WithCancel(ctx(t))
			gave := make(chan error, 1)
			go func() {
				_, err := d.locker(t).Acquire(gctx, key, dlock.WithMetadata("gives-up"))
				gave <- err
			}()
			waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return len(st.Queue) == 4 }, "the waiter that gives up")

			st, err := a.Status(ctx(t), key)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"w1", "w2", "", "gives-up"}; !slices.Equal(queueOf(st.Queue), want) || st.Waiters != 4 {
				t.Fatalf("Status.Queue %q (Waiters %d), want %q", queueOf(st.Queue), st.Waiters, want)
			}
			for i, w := range st.Queue {
				if w.Since.Before(begin.Add(-2*time.Second)) || w.Since.After(time.Now().Add(2*time.Second)) || w.Shared ||
					(i > 0 && w.Since.Before(st.Queue[i-1].Since)) {
					t.Errorf("waiter %d: %+v (began waiting after %s, in order)", i, w, begin)
				}
			}
			for _, ns := range st.Nodes {
				if !slices.Equal(queueOf(ns.Queue), queueOf(st.Queue)) {
					t.Errorf("node %s: queue %q", ns.Addr, queueOf(ns.Queue))
				}
			}

			giveUp()
			if err := <-gave; !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter that gave up: %v", err)
			}
			waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return len(st.Queue) == 3 }, "the registration of the waiter that gave up to go")
			h.Release(ctx(t))
			w1 := <-got[0]
			if w1 == nil || w1.Metadata() != "w1" {
				t.Fatalf("the first waiter did not get the lock: %v", w1)
			}
			st, _ = a.Status(ctx(t), key)
			if want := []string{"w2", ""}; !slices.Equal(queueOf(st.Queue), want) || st.Metadata != "w1" {
				t.Errorf("after the first waiter got the lock: holder %q, queue %q, want w1 and %q", st.Metadata, queueOf(st.Queue), want)
			}
			w1.Release(ctx(t))
			w2 := <-got[1]
			w2.Release(ctx(t))
			(<-got[2]).Release(ctx(t))
			for _, c := range d.admins {
				if m := metaFields(t, c, key); len(m) > 0 {
					t.Errorf("waiters' metadata left behind: %v", m)
				}
			}
		})
	}
}

// metaFields returns the waiters' metadata fields ("m:" ...) of key's
// leases on the admin client c.
func metaFields(t *testing.T, c redis.UniversalClient, key string) []string {
	t.Helper()
	fs, err := c.HKeys(ctx(t), "dlock:{"+key+"}:wexp").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		if strings.HasPrefix(f, "m:") {
			out = append(out, f)
		}
	}
	return out
}

// TestStatusNamesSharedWaiter: a shared acquisition that waits behind a
// lock is shown as shared, with its metadata; a semaphore's waiter too.
func TestStatusNamesSharedWaiter(t *testing.T) {
	l, s, _ := single(t)
	h, err := l.TryAcquire(ctx(t), "rw-named")
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, s.Client())
	got := acquireAsync(t, other, "rw-named", dlock.WithShared(), dlock.WithMetadata("reader"))
	waitFor(t, func() bool { st, _ := l.Status(ctx(t), "rw-named"); return len(st.Queue) == 1 }, "the shared waiter")
	st, _ := l.Status(ctx(t), "rw-named")
	if w := st.Queue[0]; !w.Shared || w.Metadata != "reader" {
		t.Errorf("the shared waiter: %+v", w)
	}
	handoff(t, h, got, "the shared waiter")

	p, err := l.TryAcquire(ctx(t), "sem-named", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := l.TryAcquire(ctx(t), "sem-named", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release(ctx(t))
	got = acquireAsync(t, other, "sem-named", dlock.WithLimit(2), dlock.WithMetadata("third"))
	waitFor(t, func() bool { st, _ := l.Status(ctx(t), "sem-named"); return len(st.Queue) == 1 }, "the semaphore's waiter")
	st, _ = l.Status(ctx(t), "sem-named")
	if w := st.Queue[0]; w.Shared || w.Metadata != "third" {
		t.Errorf("the semaphore's waiter: %+v", w)
	}
	handoff(t, p, got, "the semaphore's waiter")
}

// listed is what List says of each lock: its name, shape, holders and
// waiters.
func listedText(locks []dlock.Status) []string {
	var out []string
	for _, st := range locks {
		var holders []string
		for _, p := range st.Permits {
			holders = append(holders, p.Metadata)
		}
		slices.Sort(holders)
		s := fmt.Sprintf("%s held=%v limit=%d shared=%v meta=%q permits=%q queue=%q", st.Key, st.Held, st.Limit, st.Shared,
			st.Metadata, holders, queueOf(st.Queue))
		if st.Asked != nil {
			s += " asked=" + st.Asked.Reason
		}
		out = append(out, s)
	}
	return out
}

// TestList: List finds every lock under the prefix that matches the
// pattern, on one Redis, a Redlock (the union of the nodes, Held by their
// agreement) and a Cluster (every master): locks, a semaphore, shared
// holds, a lock with a waiter and a release request, names that need the
// hash tag's escape or look like globs; not a free lock, another prefix's
// locks or keys that are not dlock's.
func TestList(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			a, b := d.locker(t), d.locker(t)
			hold := func(l *dlock.Locker, key string, opts ...dlock.LockOption) *dlock.Lock {
				t.Helper()
				k, err := l.TryAcquire(ctx(t), key, opts...)
				if err != nil {
					t.Fatalf("%q: %v", key, err)
				}
				t.Cleanup(func() { k.Release(context.Background()) })
				return k
			}
			hold(a, "job/a", dlock.WithMetadata("host-a"))
			hold(a, "job/b", dlock.WithLimit(2), dlock.WithMetadata("p1"))
			hold(b, "job/b", dlock.WithLimit(2), dlock.WithMetadata("p2"))
			hold(a, "job/c", dlock.WithShared(), dlock.WithMetadata("r1"))
			hold(b, "job/c", dlock.WithShared(), dlock.WithMetadata("r2"))
			hold(a, "job/d", dlock.WithMetadata("host-d"))
			got := acquireAsync(t, b, "job/d", dlock.WithMetadata("next"))
			waitFor(t, func() bool { st, _ := a.Status(ctx(t), "job/d"); return len(st.Queue) == 1 }, "the waiter")
			if err := b.RequestRelease(ctx(t), "job/d", "deploy"); err != nil {
				t.Fatal(err)
			}
			free := hold(a, "job/free")
			free.Release(ctx(t)) // its fence counter stays: not listed
			for _, k := range []string{"}odd", "\x00odd", "a}b", "x*y", "other"} {
				hold(a, k)
			}
			other := newLockerOn(t, d, dlock.WithPrefix("other:"))
			hold(other, "job/z")
			for _, c := range d.admins {
				for _, k := range []string{"job/x", "dlock:job/y", "dlock:{job/w", "dlock:{job/v}:fence"} {
					c.Set(ctx(t), k, "not a lock", time.Minute)
				}
			}

			locks, err := a.List(ctx(t), "job/*")
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				`job/a held=true limit=0 shared=false meta="host-a" permits=[] queue=[]`,
				`job/b held=true limit=2 shared=false meta="" permits=["p1" "p2"] queue=[]`,
				`job/c held=true limit=0 shared=true meta="" permits=["r1" "r2"] queue=[]`,
				`job/d held=true limit=0 shared=false meta="host-d" permits=[] queue=["next"] asked=deploy`,
			}
			if g := listedText(locks); !slices.Equal(g, want) {
				t.Errorf("List(job/*):\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
			}
			for _, st := range locks {
				// A quorum of the nodes holds each lock (on a Redlock, the
				// last node's grant may come after TryAcquire returned, or
				// be cleaned up as late).
				held := 0
				for _, ns := range st.Nodes {
					if ns.Err != nil {
						t.Errorf("%s on %s: %v", st.Key, ns.Addr, ns.Err)
					}
					if ns.Held && ns.TTL > 0 && ns.Fence > 0 {
						held++
					}
				}
				if held < len(st.Nodes)/2+1 {
					t.Errorf("%s: %d of %d nodes hold it: %+v", st.Key, held, len(st.Nodes), st.Nodes)
				}
			}
			for pattern, want := range map[string][]string{
				"":           {"\x00odd", "a}b", "job/a", "job/b", "job/c", "job/d", "other", "x*y", "}odd"},
				"*odd":       {"\x00odd", "}odd"},
				"}*":         {"}odd"},
				"a}*":        {"a}b"},
				`x\*y`:       {"x*y"},
				"x?y":        {"x*y"},
				"job/[a-b]":  {"job/a", "job/b"},
				"job/[^a-c]": {"job/d"},
				"nothing*":   nil,
			} {
				locks, err := a.List(ctx(t), pattern)
				var names []string
				for _, st := range locks {
					names = append(names, st.Key)
				}
				if err != nil || !slices.Equal(names, want) {
					t.Errorf("List(%q): %q, %v; want %q", pattern, names, err, want)
				}
			}
			if cc, ok := d.admins[0].(*redis.ClusterClient); ok {
				masters := map[string]bool{}
				for _, st := range locks {
					m, err := cc.MasterForKey(ctx(t), "dlock:{"+st.Key+"}")
					if err != nil {
						t.Fatal(err)
					}
					masters[m.Options().Addr] = true
				}
				if len(masters) < 2 {
					t.Errorf("the locks listed are on %d masters; the test wants several", len(masters))
				}
			}
			if len(d.admins) > 1 {
				// A key one node of the Redlock holds (a failed attempt's
				// remnant): listed, not held by the quorum.
				d.admins[0].Set(ctx(t), "dlock:{job/one-node}", "token", time.Minute)
				locks, err := a.List(ctx(t), "job/one*")
				if err != nil || len(locks) != 1 || locks[0].Held || !locks[0].Nodes[0].Held || locks[0].Nodes[1].Held {
					t.Errorf("List of a key one node holds: %+v, %v", locks, err)
				}
			}
			expired, cancel := context.WithTimeout(ctx(t), -time.Second)
			defer cancel()
			if locks, err := a.List(expired, ""); !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("List with its context ended: %d locks, %v; want ErrUnavailable and the context's error", len(locks), err)
			}
			handoffOf(t, a, "job/d", got)
		})
	}
}

// newLockerOn is a Locker on d with opts.
func newLockerOn(t *testing.T, d deployment, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	if len(d.admins) > 1 {
		l, err := dlock.NewRedlock(d.admins, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	return newLocker(t, d.admins[0], opts...)
}

// handoffOf force-releases key and waits for the acquisition behind got,
// which it releases.
func handoffOf(t *testing.T, l *dlock.Locker, key string, got <-chan *dlock.Lock) {
	t.Helper()
	if _, err := l.ForceRelease(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	if k := <-got; k != nil {
		k.Release(ctx(t))
	}
}
