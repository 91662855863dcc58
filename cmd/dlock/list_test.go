package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestList: dlock list on one Redis, a Redlock of 3 and a Cluster: one line
// per lock with its shape, holders and waiters by their metadata, and a
// pending request; --json; --watch; a Redlock node down (the locks found,
// exit 69); usage errors.
func TestList(t *testing.T) {
	t.Parallel()
	single := dlocktest.Start(t)
	masters := dlocktest.StartN(t, 3)
	cl := dlocktest.StartCluster(t, 3)
	for _, tc := range []struct {
		name   string
		args   []string
		locker func(t *testing.T) *dlock.Locker
	}{
		{"one Redis", []string{"--redis", single.URL()}, func(t *testing.T) *dlock.Locker { return newLocker(t, single) }},
		{"Redlock", []string{"--redis", masters[0].URL() + "," + masters[1].URL() + "," + masters[2].URL()},
			func(t *testing.T) *dlock.Locker { return newLocker(t, masters...) }},
		{"Cluster", []string{"--cluster", "--redis", cl.Servers[0].URL()}, func(t *testing.T) *dlock.Locker {
			c := cl.Client()
			l := dlock.New(c)
			t.Cleanup(func() { l.Close(); c.Close() })
			return l
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a, b := tc.locker(t), tc.locker(t)
			k, err := a.TryAcquire(ctx, "job/a", dlock.WithMetadata("host-a"))
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(ctx)
			p, err := a.TryAcquire(ctx, "job/b", dlock.WithLimit(2), dlock.WithMetadata("p1"))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Release(ctx)
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			go b.Acquire(wctx, "job/a", dlock.WithMetadata("next"))
			for st, _ := a.Status(ctx, "job/a"); len(st.Queue) == 0; st, _ = a.Status(ctx, "job/a") {
				time.Sleep(5 * time.Millisecond)
			}
			if err := b.RequestRelease(ctx, "job/a", "deploy"); err != nil {
				t.Fatal(err)
			}

			code, stdout, _ := dlockRun(t, append([]string{"list"}, append(tc.args, "job/*")...)...)
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if code != exitOK || len(lines) != 4 || !strings.HasPrefix(lines[0], "LOCK ") ||
				!strings.HasPrefix(lines[1], "job/a ") || !strings.Contains(lines[1], " lock ") || !strings.Contains(lines[1], " host-a ") ||
				!strings.Contains(lines[1], " 1: next ") || !strings.Contains(lines[1], `"deploy" by `) ||
				!strings.HasPrefix(lines[2], "job/b ") || !strings.Contains(lines[2], " semaphore of 2 ") || !strings.Contains(lines[2], " 1: p1 ") ||
				lines[3] != `2 locks matching "job/*"` {
				t.Errorf("dlock list: exit %d:\n%s", code, stdout)
			}

			code, stdout, _ = dlockRun(t, append([]string{"list", "--json"}, tc.args...)...)
			var out listJSON
			if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != exitOK {
				t.Fatalf("dlock list --json: exit %d, %v:\n%s", code, err, stdout)
			}
			if len(out.Locks) != 2 || !out.Complete || out.Pattern != "*" || out.Locks[0].Key != "job/a" || len(out.Locks[0].Queue) != 1 ||
				out.Locks[0].Queue[0].Metadata != "next" || out.Locks[0].Asked == nil || out.Locks[1].Permits[0].Fence != p.Fence() {
				t.Errorf("dlock list --json: %+v", out)
			}

			w := startWatchOf(t, "list", append([]string{"--json", "--interval", "50ms"}, tc.args...)...)
			for range 2 {
				var out listJSON
				if err := json.Unmarshal([]byte(w.next(t)), &out); err != nil || len(out.Locks) != 2 || out.Time == "" {
					t.Errorf("dlock list --watch --json: %+v, %v", out, err)
				}
			}
			if code := w.interrupt(t); code != exitOK {
				t.Errorf("the watch ended with exit %d", code)
			}
		})
	}

	t.Run("node down", func(t *testing.T) {
		ctx := context.Background()
		servers := dlocktest.StartN(t, 3)
		k, err := newLocker(t, servers...).TryAcquire(ctx, "held", dlock.WithMetadata("host-a"))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx)
		servers[2].Kill()
		code, stdout, stderr := dlockRun(t, "list", "--redis", servers[0].URL()+","+servers[1].URL()+","+servers[2].URL())
		if code != exitUnavailable || !strings.Contains(stdout, "held ") || !strings.Contains(stdout, "incomplete") ||
			!strings.Contains(stderr, servers[2].Addr()) {
			t.Errorf("dlock list with a node down: exit %d, want %d with the lock listed:\n%s\n%s", code, exitUnavailable, stdout, stderr)
		}
	})

	for _, args := range [][]string{{"list", "a*", "b*"}, {"list", "--interval", "1s"}, {"list", "--watch", "--interval", "0s"}} {
		if code, _, stderr := dlockRun(t, args...); code != exitUsage || !strings.HasPrefix(stderr, "dlock: ") {
			t.Errorf("dlock %s: exit %d, %q; want a usage error", strings.Join(args, " "), code, stderr)
		}
	}
}
