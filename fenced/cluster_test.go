package fenced_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// TestCluster runs the checks on a real Redis Cluster of three masters, with
// names whose braces make hash tags (or do not) of every kind: each
// resource is one key, so each call goes to one slot, whatever the name.
func TestCluster(t *testing.T) {
	cl := dlocktest.StartClusterWithReplicas(t, 3, 0)
	c := cl.Client()
	defer c.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	names := []string{
		"{", "}", "{}", "}{", "{{}}", "{a}b", "a{b}c", "{a}", "{b}", "x{}y",
		"user:{42}:balance", "user:{43}:balance", "{user:42}", "\x00", "名前{",
		"plain", "another", "yet another",
	}
	for _, prefix := range []string{fenced.DefaultPrefix, "", "{app}:"} {
		s := fenced.New(c, fenced.WithPrefix(prefix))
		slots := map[int64]bool{}
		for _, name := range names {
			slots[c.ClusterKeySlot(ctx, s.Key(name)).Val()] = true
			mustSet(t, s, name, "new", 1<<53+1)
			wantStale(t, s.Set(ctx, name, "old", 1<<53), name, 1<<53, 1<<53+1)
			wantValue(t, s, name, "new", 1<<53+1)
			mustSet(t, s, name, "again", 1<<53+1)
			if v, ok, err := s.Claim(ctx, name, 1<<53+2); err != nil || !ok || v != "again" {
				t.Fatalf("Claim(%q) = %q, %v, %v", name, v, ok, err)
			}
			if err := s.Delete(ctx, name, 1<<53+2); err != nil {
				t.Fatalf("Delete(%q): %v", name, err)
			}
			if _, f, err := s.Get(ctx, name); !errors.Is(err, fenced.ErrNotFound) || f != 1<<53+2 {
				t.Fatalf("Get(%q) after Delete: %d, %v", name, f, err)
			}
			if n := c.Exists(ctx, s.Key(name)).Val(); n != 1 {
				t.Fatalf("key %q: EXISTS = %d", s.Key(name), n)
			}
		}
		if prefix == "{app}:" {
			if len(slots) != 1 {
				t.Errorf("prefix %q: keys in %d slots, want 1", prefix, len(slots))
			}
		} else if len(slots) < 3 {
			t.Errorf("prefix %q: keys in %d slots only; the test wants several nodes", prefix, len(slots))
		}
	}
	// Every master loads the script on its first NOSCRIPT.
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	s := fenced.New(c)
	for _, name := range names {
		mustSet(t, s, name, "after flush", 1<<60)
		wantValue(t, s, name, "after flush", 1<<60)
	}
}
