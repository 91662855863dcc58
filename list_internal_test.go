package dlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
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

// clusterFamily is ctxFamily as a Cluster client of another family.
type clusterFamily struct{ ctxFamily }

func (f clusterFamily) Describe() node.Description {
	return node.Description{Addr: f.addr, Cluster: true}
}

// TestListFamily: List on a client of another family than go-redis (as
// rueidis' and valkey-go's, through node.Client): one Redis is scanned
// through its Conn; a Cluster client, whose masters dlock cannot reach one
// by one, is refused as misconfigured, saying why.
func TestListFamily(t *testing.T) {
	s := dlocktest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	l, err := newFamilyLocker([]node.Client{ctxFamily{c, s.Addr()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k, err := l.TryAcquire(ctx, "family", WithMetadata("rueidis-like"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	if locks, err := l.List(ctx, "fam*"); err != nil || len(locks) != 1 || locks[0].Metadata != "rueidis-like" {
		t.Errorf("List through another family's client: %+v, %v", locks, err)
	}
	cl, err := newFamilyLocker([]node.Client{clusterFamily{ctxFamily{c, s.Addr()}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.List(ctx, ""); !errors.Is(err, ErrMisconfigured) || !strings.Contains(err.Error(), "ClusterClient") {
		t.Errorf("List through another family's Cluster client: %v, want ErrMisconfigured saying why", err)
	}
}

// TestDialCauseClusterName: the name of a Cluster node ("cluster(ADDR,...)")
// is not dialed: SplitHostPort cut it at its last colon, and the dial's
// "unknown port" replaced the node's own error (a slot on the move, seen on
// TestSlotMigrationUnderLoad's releases).
func TestDialCauseClusterName(t *testing.T) {
	for _, addr := range []string{"cluster(127.0.0.1:1,...)", "sentinel(mymaster@127.0.0.1:1)", "/tmp/redis.sock"} {
		if err := dialCause(addr, 10*time.Millisecond); err != nil {
			t.Errorf("dialCause(%q) = %v, want nil: not a TCP address", addr, err)
		}
	}
	if err := dialCause("127.0.0.1:1", 100*time.Millisecond); err == nil {
		t.Error("dialCause of a closed loopback port: nil, want its error")
	}
}
