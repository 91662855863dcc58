package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

// aclLine returns the ACL SETUSER line of docs/operations.md with pw as the
// password.
func aclLine(t *testing.T, pw string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "ACL SETUSER dlock ") && strings.Contains(l, ">PASSWORD ") {
			return strings.Replace(l, ">PASSWORD ", ">"+pw+" ", 1)
		}
	}
	t.Fatal("no ACL SETUSER line with >PASSWORD in docs/operations.md")
	return ""
}

// aclUser makes the ACL user of docs/operations.md on each server (as its default user), and
// checks in the test's Cleanup, before the servers stop, that their ACL logs
// have no denials (but for the CLIENT subcommands that go-redis sends on
// connect and does without when refused: SETINFO, which the CLI turns off,
// and MAINT_NOTIFICATIONS).
func aclUser(t *testing.T, line string, addrs ...string) {
	t.Helper()
	var args []any
	for _, f := range strings.Fields(line) {
		args = append(args, f)
	}
	for _, addr := range addrs {
		admin := redis.NewClient(&redis.Options{Addr: addr})
		err := admin.Do(context.Background(), args...).Err()
		admin.Close()
		if err != nil {
			t.Fatalf("%s on %s: %v", line, addr, err)
		}
	}
	t.Cleanup(func() {
		for _, addr := range addrs {
			// The raw reply: go-redis v9.7's ACLLog refuses the client
			// info of Valkey 8 and Redis 8 (fields it does not know).
			admin := redis.NewClient(&redis.Options{Addr: addr})
			v, err := admin.Do(context.Background(), "acl", "log", "100").Result()
			admin.Close()
			if err != nil {
				t.Errorf("ACL LOG on %s: %v", addr, err)
			}
			entries, _ := v.([]any)
			for _, entry := range entries {
				e := map[string]string{}
				switch x := entry.(type) {
				case map[any]any:
					for k, v := range x {
						e[fmt.Sprint(k)] = fmt.Sprint(v)
					}
				case []any:
					for i := 0; i+1 < len(x); i += 2 {
						e[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
					}
				}
				if e["object"] != "client|setinfo" && e["object"] != "client|maint_notifications" {
					t.Errorf("ACL LOG on %s: %s refused %s %q (%s) %s times", addr, e["username"], e["reason"], e["object"], e["context"], e["count"])
				}
			}
		}
	})
}

// TestACLCLI runs every command of the CLI that talks to Redis as a user made
// with exactly the ACL line of docs/operations.md: a holder (dlock run, renewing), status
// and status --json of the held lock, dlock list, dlock run on the busy lock, a dlock run
// --wait that the holder's end wakes, release --force (the holder loses its
// lock), a --limit run; on one Redis, one Redis with a database other than
// 0, a Redlock (which asks each server its run id) and a Cluster.
func TestACLCLI(t *testing.T) {
	t.Parallel()
	const pw = "acl-cli"
	line := aclLine(t, pw)
	userURL := func(addr string) string { return "redis://dlock:" + pw + "@" + addr }

	one := dlocktest.Start(t)
	redlock := dlocktest.StartN(t, 3)
	cluster := dlocktest.StartCluster(t, 1)
	aclUser(t, line, one.Addr())
	var rlURLs []string
	for _, s := range redlock {
		aclUser(t, line, s.Addr())
		rlURLs = append(rlURLs, userURL(s.Addr()))
	}
	aclUser(t, line, cluster.Addrs()...)
	cc := cluster.Client()
	defer cc.Close()

	for _, tc := range []struct {
		name  string
		flags []string              // --redis and the topology
		admin redis.UniversalClient // to see the waiters, as the default user
	}{
		{"one Redis", []string{"--redis", userURL(one.Addr())}, one.Client()},
		{"database 1", []string{"--redis", userURL(one.Addr()) + "/1"}, redis.NewClient(&redis.Options{Addr: one.Addr(), DB: 1})},
		{"Redlock", []string{"--redis", strings.Join(rlURLs, ",")}, redlock[0].Client()},
		{"Cluster", []string{"--cluster", "--redis", userURL(cluster.Servers[0].Addr())}, cc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.admin != cc {
				defer tc.admin.Close()
			}
			var mu sync.Mutex // for stderrs: one dlock run runs on a goroutine
			var stderrs []string
			cli := func(want int, args ...string) string {
				t.Helper()
				args = append(append([]string{args[0]}, tc.flags...), args[1:]...)
				code, stdout, stderr := dlockRun(t, args...)
				mu.Lock()
				stderrs = append(stderrs, stderr)
				mu.Unlock()
				if code != want {
					t.Errorf("dlock %s as the ACL user of docs/operations.md: exit %d, want %d; stderr: %s", strings.Join(args, " "), code, want, stderr)
				}
				return stdout
			}
			defer func() {
				for _, s := range stderrs {
					if strings.Contains(s, "NOPERM") {
						t.Errorf("a refusal: %s", s)
					}
				}
			}()

			holder := startDlock(t, append(append([]string{"run"}, tc.flags...), "--ttl", "1s", "--metadata", "the holder", "job", "--", "sh", "-c", "echo started; sleep 30")...)
			holder.waitLine(t, "started")
			time.Sleep(500 * time.Millisecond) // a renewal or two
			if out := cli(exitOK, "status", "job"); !strings.Contains(out, "held:     yes") || !strings.Contains(out, "the holder") {
				t.Errorf("status of the held lock:\n%s", out)
			}
			if out := cli(exitOK, "status", "--json", "job"); !strings.Contains(out, `"metadata": "the holder"`) {
				t.Errorf("status --json of the held lock:\n%s", out)
			}
			cli(exitNotAcquired, "run", "-q", "job", "--", "true")
			if out := cli(exitOK, "list", "jo*"); !strings.HasPrefix(out, "LOCK ") || !strings.Contains(out, "the holder") {
				t.Errorf("list of the held lock:\n%s", out)
			}

			waited := make(chan struct{})
			go func() {
				defer close(waited)
				cli(exitOK, "run", "--wait", "20s", "job", "--", "true")
			}()
			deadline := time.Now().Add(10 * time.Second)
			for tc.admin.ZCard(context.Background(), "dlock:{job}:waiters").Val() != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the waiting dlock run did not register")
				}
				time.Sleep(5 * time.Millisecond)
			}
			cli(exitOK, "release", "--force", "job") // wakes the waiter
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting dlock run was not woken by release --force")
			}
			if code := holder.exitCode(t); code != exitLockLost {
				t.Errorf("the holder after release --force: exit %d, want %d; stderr: %s", code, exitLockLost, holder.stderr.String())
			}
			mu.Lock()
			stderrs = append(stderrs, holder.stderr.String())
			mu.Unlock()
			cli(exitOK, "run", "--limit", "2", "sem", "--", "true")
			cli(exitOK, "release", "--force", "nobody")
		})
	}
}
