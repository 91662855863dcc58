package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestAcquireExtendRelease: dlock acquire prints "TOKEN FENCE" and leaves
// the lock held with no renewal; extend and release act on it by token,
// owner-checked (76 for a token that does not hold it), on one Redis, a
// Redlock and a Cluster, for a lock, a permit and a shared hold.
func TestAcquireExtendRelease(t *testing.T) {
	one := dlocktest.Start(t)
	three := dlocktest.StartN(t, 3)
	cluster := dlocktest.StartCluster(t, 3)
	var urls []string
	for _, s := range three {
		urls = append(urls, "redis://"+s.Addr())
	}
	for _, tc := range []struct {
		name  string
		redis []string
		shape []string
	}{
		{"one Redis", []string{"--redis", "redis://" + one.Addr()}, nil},
		{"Redlock", []string{"--redis", strings.Join(urls, ",")}, nil},
		{"permit", []string{"--redis", "redis://" + one.Addr()}, []string{"--limit", "2"}},
		{"shared", []string{"--redis", strings.Join(urls, ",")}, []string{"--shared"}},
		{"Cluster", []string{"--cluster", "--redis", "redis://" + cluster.Servers[0].Addr()}, nil},
		{"Cluster permit", []string{"--cluster", "--redis", "redis://" + cluster.Servers[0].Addr()}, []string{"--limit", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "job-" + strings.ReplaceAll(tc.name, " ", "-")
			flags := append(append([]string(nil), tc.redis...), tc.shape...)
			cmd := func(sub string, args ...string) (int, string) {
				code, out, _ := dlockRun(t, append(append([]string{sub}, flags...), args...)...)
				return code, out
			}
			code, out := cmd("acquire", "--ttl", "10s", key)
			fields := strings.Fields(out)
			if code != exitOK || len(fields) != 2 || len(fields[0]) != 32 {
				t.Fatalf("acquire: exit %d, %q", code, out)
			}
			token := fields[0]
			if f, err := strconv.ParseUint(fields[1], 10, 64); err != nil || f == 0 {
				t.Fatalf("acquire: fence %q", fields[1])
			}
			if tc.shape == nil {
				if code, _ := cmd("acquire", key); code != exitNotAcquired {
					t.Fatalf("acquire of a held lock: exit %d, want %d", code, exitNotAcquired)
				}
			}
			other := "0123456789abcdef0123456789abcdef"
			if code, _ := cmd("extend", "--token", other, key); code != exitLockLost {
				t.Fatalf("extend with another token: exit %d, want %d", code, exitLockLost)
			}
			if code, _ := cmd("release", "--token", other, key); code != exitLockLost {
				t.Fatalf("release with another token: exit %d, want %d", code, exitLockLost)
			}
			if code, _ := cmd("extend", "--token", token, "--ttl", "1m", key); code != exitOK {
				t.Fatalf("extend: exit %d", code)
			}
			st, err := newLocker(t, one).Status(context.Background(), key)
			if tc.redis[1] == "redis://"+one.Addr() && (err != nil || !st.Held || st.TTL < 50*time.Second) {
				t.Fatalf("after extend --ttl 1m: %+v, %v", st, err)
			}
			if code, _ := cmd("release", "--token", token, key); code != exitOK {
				t.Fatalf("release: exit %d", code)
			}
			if code, _ := cmd("release", "--token", token, key); code != exitLockLost {
				t.Fatalf("release again: exit %d, want %d", code, exitLockLost)
			}
			if code, out := cmd("acquire", key); code != exitOK {
				t.Fatalf("acquire after the release: exit %d, %q", code, out)
			}
		})
	}
}

// TestAcquireNotRenewed: the lock dlock acquire leaves is free once its
// TTL runs out: nothing renews it.
func TestAcquireNotRenewed(t *testing.T) {
	s := dlocktest.Start(t)
	url := "redis://" + s.Addr()
	if code, _, _ := dlockRun(t, "acquire", "--redis", url, "--ttl", "300ms", "short"); code != exitOK {
		t.Fatalf("acquire: exit %d", code)
	}
	l := newLocker(t, s)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := l.Status(context.Background(), "short")
		if err == nil && !st.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still held 10s after a TTL of 300ms: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTokenCommandsUsage: bad flags are usage errors (64), a Redis that
// does not answer is 69.
func TestTokenCommandsUsage(t *testing.T) {
	s := dlocktest.Start(t)
	url := "redis://" + s.Addr()
	token := "0123456789abcdef0123456789abcdef"
	for _, args := range [][]string{
		{"acquire", "--redis", url},
		{"acquire", "--redis", url, "--ttl", "1ms", "k"},
		{"acquire", "--redis", url, "--shared", "--limit", "2", "k"},
		{"acquire", "--redis", url, "--wait", "-1s", "k"},
		{"extend", "--redis", url, "k"},
		{"extend", "--redis", url, "--token", "xyz", "k"},
		{"extend", "--redis", url, "--token", strings.ToUpper(token), "k"},
		{"release", "--redis", url, "--token", token, "--force", "k"},
		{"release", "--redis", url, "--token", "", "k"},
		{"release", "--redis", url, "--limit", "2", "--force", "k"},
		{"release", "--redis", url, "k"},
	} {
		if code, _, stderr := dlockRun(t, args...); code != exitUsage || !strings.Contains(stderr, "dlock help") {
			t.Errorf("%q: exit %d, want %d with a hint", args, code, exitUsage)
		}
	}
	down := dlocktest.Start(t)
	downURL := "redis://" + down.Addr()
	down.Kill()
	for _, args := range [][]string{
		{"acquire", "--redis", downURL, "k"},
		{"extend", "--redis", downURL, "--token", token, "k"},
		{"release", "--redis", downURL, "--token", token, "k"},
	} {
		if code, _, _ := dlockRun(t, args...); code != exitUnavailable {
			t.Errorf("%q: exit %d, want %d", args, code, exitUnavailable)
		}
	}
}

// TestTokenCommandsShape: extend --token and release --token act on a hold
// only in the shape it has (docs/cli.md: 76 otherwise), on one Redis and a
// Redlock: a permit of --limit 3 is not a shared hold, nor one of --limit 2;
// a shared hold is no permit; and the hold is left as it was.
func TestTokenCommandsShape(t *testing.T) {
	one := dlocktest.Start(t)
	three := dlocktest.StartN(t, 3)
	var urls []string
	for _, s := range three {
		urls = append(urls, "redis://"+s.Addr())
	}
	for _, redis := range [][]string{{"--redis", "redis://" + one.Addr()}, {"--redis", strings.Join(urls, ",")}} {
		for _, tc := range []struct {
			held  []string
			wrong [][]string
		}{
			{[]string{"--limit", "3"}, [][]string{{"--shared"}, {"--limit", "2"}, {"--limit", "4"}, nil}},
			{[]string{"--shared"}, [][]string{{"--limit", "4"}, nil}},
			{nil, [][]string{{"--shared"}, {"--limit", "2"}}},
		} {
			key := "shape-" + strings.Join(tc.held, "") + strconv.Itoa(len(redis[1]))
			run := func(args ...string) (int, string) {
				code, out, _ := dlockRun(t, append(append([]string(nil), args...), redis...)...)
				return code, out
			}
			code, out := run(append(append([]string{"acquire", "--ttl", "10s"}, tc.held...), key)...)
			fields := strings.Fields(out)
			if code != exitOK || len(fields) != 2 {
				t.Fatalf("acquire %v: exit %d, %q", tc.held, code, out)
			}
			for _, w := range tc.wrong {
				for _, sub := range []string{"extend", "release"} {
					if code, _ := run(append(append([]string{sub, "--token", fields[0]}, w...), key)...); code != exitLockLost {
						t.Errorf("%s --token of a hold acquired with %v, given %v: exit %d, want %d", sub, tc.held, w, code, exitLockLost)
					}
				}
			}
			if code, _ := run(append(append([]string{"release", "--token", fields[0]}, tc.held...), key)...); code != exitOK {
				t.Errorf("release --token in its own shape %v: exit %d", tc.held, code)
			}
		}
	}
}
