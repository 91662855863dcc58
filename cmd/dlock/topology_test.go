package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestTLS: rediss:// with the CA of the server, a client certificate for a
// server that requires one (mutual TLS, Redis' tls-auth-clients yes), and
// what a user sees without them.
func TestTLS(t *testing.T) {
	t.Parallel()
	files, err := dlocktest.NewTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plain := dlocktest.Start(t, dlocktest.WithTLS(files, false))
	mutual := dlocktest.Start(t, dlocktest.WithTLS(files, true))
	url := func(s *dlocktest.Server) string { return "rediss://" + s.TLSAddr() }
	cert := []string{"--tls-cert", files.ClientCert, "--tls-key", files.ClientKey}
	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		says  string
	}{
		{"trusted CA", []string{"--redis", url(plain), "--tls-ca", files.CA}, exitOK, ""},
		{"untrusted certificate", []string{"--redis", url(plain)}, exitConfig, "certificate"},
		{"insecure skip verify", []string{"--redis", url(plain), "--tls-insecure-skip-verify"}, exitOK, ""},
		{"mutual TLS with a client certificate", append([]string{"--redis", url(mutual), "--tls-ca", files.CA}, cert...), exitOK, ""},
		// The server's alert (78) or, with TLS 1.3, a reset before it is
		// read (69): both say what to do.
		{"mutual TLS without a client certificate", []string{"--redis", url(mutual), "--tls-ca", files.CA}, exitConfig, "client certificate"},
		{"redis:// to a TLS port", []string{"--redis", "redis://" + plain.TLSAddr()}, exitUnavailable, "write rediss://"},
		{"TLS flags with redis://", []string{"--redis", plain.URL(), "--tls-ca", files.CA}, exitUsage, "need a rediss:// URL"},
		{"a key without its certificate", []string{"--redis", url(plain), "--tls-key", files.ClientKey}, exitUsage, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run"}, tc.flags...), "job", "--", "true")
			code, _, stderr := dlockRun(t, args...)
			if tc.code == exitConfig && code == exitUnavailable && strings.Contains(tc.name, "mutual") {
				code = exitConfig
			}
			if code != tc.code || !strings.Contains(stderr, tc.says) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.says)
			}
		})
	}
}

// TestClusterAndSentinel: the CLI reaches a Cluster (keys on every master)
// and a Sentinel-managed master.
func TestClusterAndSentinel(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 3)
	// Keys that live on each of the three masters.
	keys := map[string]bool{}
	cc := cl.Client()
	defer cc.Close()
	owners := map[string]bool{}
	for i := 0; len(owners) < 3 && i < 1000; i++ {
		k := "job" + strings.Repeat("x", i)
		c, err := cc.MasterForKey(context.Background(), "dlock:{"+k+"}")
		if err != nil {
			t.Fatal(err)
		}
		if addr := c.Options().Addr; !owners[addr] {
			owners[addr], keys[k] = true, true
		}
	}
	for k := range keys {
		code, _, _ := dlockRun(t, "run", "--cluster", "--redis", "redis://"+cl.Servers[0].Addr(), k, "--", "true")
		if code != exitOK {
			t.Errorf("run on a Cluster, key %q: exit %d", k, code)
		}
		if code, _, _ := dlockRun(t, "status", "--cluster", "--redis", "redis://"+cl.Servers[1].Addr(), k); code != exitOK {
			t.Errorf("status on a Cluster, key %q: exit %d", k, code)
		}
	}
	// Held on the Cluster by the library: the CLI sees it busy.
	l := dlock.New(cc)
	defer l.Close()
	for k := range keys {
		lk, err := l.TryAcquire(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if code, _, _ := dlockRun(t, "run", "-q", "--cluster", "--redis", "redis://"+cl.Servers[2].Addr(), k, "--", "true"); code != exitNotAcquired {
			t.Errorf("run on a Cluster for a held key %q: exit %d, want %d", k, code, exitNotAcquired)
		}
		lk.Release(context.Background())
	}
	if code, _, stderr := dlockRun(t, "run", "--cluster", "--redis", "redis://"+cl.Servers[0].Addr()+"/2", "job", "--", "true"); code != exitUsage || !strings.Contains(stderr, "no database") {
		t.Errorf("a Cluster URL with a database: exit %d, %q", code, stderr)
	}

	master := dlocktest.Start(t)
	sentinel := dlocktest.StartSentinel(t, "dlockmaster", master)
	code, _, _ := dlockRun(t, "run", "--sentinel", "dlockmaster", "--redis", sentinel.URL(), "job", "--", "true")
	if code != exitOK {
		t.Errorf("run through a Sentinel: exit %d", code)
	}
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "dlockmaster", SentinelAddrs: []string{sentinel.Addr()}})
	defer fc.Close()
	if n := fc.Get(context.Background(), "dlock:{job}:fence").Val(); n == "" {
		t.Error("the run through the Sentinel left no fence counter on its master")
	}
	if code, _, stderr := dlockRun(t, "run", "--sentinel", "nosuchmaster", "--redis", sentinel.URL(), "job", "--", "true"); code != exitUnavailable && code != exitConfig {
		t.Errorf("an unknown master name: exit %d, %q; want 69 or 78", code, stderr)
	}
}

// TestRedlockSameServerTwice: two URLs that reach one server are refused.
func TestRedlockSameServerTwice(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	other := dlocktest.Start(t)
	port := s.Addr()[strings.LastIndexByte(s.Addr(), ':')+1:]
	code, _, stderr := dlockRun(t, "run", "--redis", s.URL()+",redis://localhost:"+port+","+other.URL(), "job", "--", "true")
	if code != exitConfig || !strings.Contains(stderr, "same server") {
		t.Errorf("127.0.0.1:P and localhost:P in one Redlock: exit %d, %q; want 78 naming the same server", code, stderr)
	}
	// Two databases of one server: one server too.
	code, _, stderr = dlockRun(t, "run", "--redis", s.URL()+"/0,"+s.URL()+"/1,"+other.URL(), "job", "--", "true")
	if code != exitConfig || !strings.Contains(stderr, "reach the same server (databases 0 and 1 of it)") {
		t.Errorf("two databases of one server in one Redlock: exit %d, %q; want 78 naming the same server", code, stderr)
	}
}

// TestRestrictedUser: the CLI works for a user made with the ACL line of
// docs/operations.md, also over a Redlock (which asks each server its run
// id).
func TestRestrictedUser(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "ACL SETUSER dlock ") {
			line = strings.Replace(l, ">PASSWORD", ">cli-pw", 1)
		}
	}
	servers := dlocktest.StartN(t, 3)
	var urls []string
	for _, s := range servers {
		admin := s.Client()
		var args []any
		for _, f := range strings.Fields(line) {
			args = append(args, f)
		}
		if err := admin.Do(context.Background(), args...).Err(); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		admin.Close()
		urls = append(urls, "redis://dlock:cli-pw@"+s.Addr())
	}
	for _, redisURL := range []string{urls[0], strings.Join(urls, ",")} {
		for _, args := range [][]string{
			{"run", "--redis", redisURL, "job", "--", "true"},
			{"status", "--redis", redisURL, "job"},
			{"release", "--force", "--redis", redisURL, "job"},
		} {
			if code, _, stderr := dlockRun(t, args...); code != exitOK {
				t.Errorf("dlock %s as the restricted user: exit %d, %s", args[0], code, stderr)
			}
		}
	}
}

// TestPlainURLToClusterNode: a plain URL to a node of a Cluster is refused
// for every key alike (exit 78, a hint naming --cluster), whichever master
// the key's slot is on; with --cluster the same URL works.
func TestPlainURLToClusterNode(t *testing.T) {
	t.Parallel()
	cluster := dlocktest.StartCluster(t, 3)
	url := cluster.Servers[0].URL()
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "job", "export"} {
		code, stdout, stderr := dlockRun(t, "run", "--redis", url, key, "--", "echo", "ran")
		if code != exitConfig || !strings.Contains(stderr, "--cluster") || stdout != "" {
			t.Errorf("key %q through a plain URL to a Cluster node: exit %d, stdout %q, stderr %q; want %d, a hint naming --cluster, and no run",
				key, code, stdout, stderr, exitConfig)
		}
	}
	if code, _, stderr := dlockRun(t, "status", "--redis", url, "job"); code != exitConfig || !strings.Contains(stderr, "--cluster") {
		t.Errorf("dlock status through a plain URL to a Cluster node: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := dlockRun(t, "run", "--cluster", "--redis", url, "job", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Errorf("with --cluster: exit %d, stdout %q", code, stdout)
	}
}
