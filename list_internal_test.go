package dlock

import (
	"context"
	"slices"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
)

// TestGlobMatchAsRedis: globMatch matches as Redis matches keys against a
// pattern (KEYS, SCAN's MATCH), special characters and unfinished sets
// and escapes included.
func TestGlobMatchAsRedis(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	names := []string{"a", "ab", "abc", "a*c", "a]b", `a\b`, "[x", "x-y", "}k", "\x00k", "-", "]", "ba", "aXbYc", "a.b", "ß", "aaa"}
	for _, n := range names {
		c.Set(ctx, n, "", 0)
	}
	for _, p := range []string{"*", "a*", "*c", "a?c", "[a-c]*", "[^a]*", "a\\*c", `[\]]*`, "*[", "[a-]*", `\`, `a\`, "[z-a]",
		"**", "*a*b*", "a[", "[", "[]]", "?", "??", "*?*?", "[!a]*", "a*b*c", "}*", "\x00*", "*-*", "a[*]c", `a[\\]b`, "[^]]", "?ß"} {
		want, err := c.Keys(ctx, p).Result()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range names {
			if globMatch(p, n) {
				got = append(got, n)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("pattern %q: globMatch matches %q, Redis %q", p, got, want)
		}
	}
}

// TestLockName: the names of locks from their keys, and what is not one.
func TestLockName(t *testing.T) {
	for _, name := range []string{"a", "}x", "\x00x", "a}b", "x}:waiters", "{", "a:fence"} {
		nm := keys.Make("dlock:", name)
		for _, k := range []string{nm.Lock(), nm.Waiters()} {
			if got, ok := lockName("dlock:", k); !ok || got != name {
				t.Errorf("lockName(%q) = %q, %v; want %q", k, got, ok, name)
			}
		}
		for _, k := range []string{nm.Fence(), nm.Meta(), nm.Leases(), "other:" + nm.Lock()} {
			if got, ok := lockName("dlock:", k); ok && got != "" {
				t.Errorf("lockName(%q) = %q: not a lock's key or waiting set", k, got)
			}
		}
	}
	for _, k := range []string{"dlock:{}", "dlock:{\x00}", "dlock:x", "dlock:{x", "dlock:{x}y"} {
		if got, ok := lockName("dlock:", k); ok {
			t.Errorf("lockName(%q) = %q: not a lock's key", k, got)
		}
	}
	if got := scanMatch("a*b?[c]\\:", "job/*"); got != `a\*b\?\[c\]\\:{job/*}*` {
		t.Errorf("scanMatch: %q", got)
	}
}
