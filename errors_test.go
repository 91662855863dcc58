package dlock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// classes are the three acquisition errors, which are disjoint.
var classes = []error{dlock.ErrNotAcquired, dlock.ErrUnavailable, dlock.ErrMisconfigured}

// isClass checks that err is of class want, and of no other class.
func isClass(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
	for _, c := range classes {
		if c != want && errors.Is(err, c) {
			t.Errorf("%s: %v is also %v: the classes must be disjoint", what, err, c)
		}
	}
}

// securedServer starts a server that requires the password "secret", with
// two ACL users with password "pw": "nokeys", without dlock's keys, and
// "nochannels", without its channels. It returns the server and a client of
// the default user, both stopped in the test's Cleanup.
func securedServer(t *testing.T) (*dlocktest.Server, *redis.Client) {
	t.Helper()
	s := dlocktest.Start(t, dlocktest.WithArgs("--requirepass", "secret"))
	admin := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "secret"})
	t.Cleanup(func() { admin.Close() })
	for _, acl := range [][]any{
		{"ACL", "SETUSER", "nokeys", "on", ">pw", "~other:*", "&*", "+@all"},
		{"ACL", "SETUSER", "nochannels", "on", ">pw", "~dlock:*", "resetchannels", "+@all"},
	} {
		if err := admin.Do(ctx(t), acl...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return s, admin
}

// TestErrorClasses: each misconfiguration a user can make, on a real server,
// gets ErrMisconfigured at once, also from Acquire with a context that would
// wait long; unreachable nodes get ErrUnavailable; a busy lock ErrNotAcquired.
func TestErrorClasses(t *testing.T) {
	plain := dlocktest.Start(t)
	secured, admin := securedServer(t)
	cluster := dlocktest.StartCluster(t, 3)
	dead := dlocktest.Start(t)
	dead.Kill()

	pc := plain.Client()
	defer pc.Close()
	pc.HSet(ctx(t), "dlock:{hash}", "field", "value")
	pc.Set(ctx(t), "dlock:{badfence}:fence", "not a number", 0)
	held, err := newLocker(t, pc).TryAcquire(ctx(t), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx(t))
	// A key that a plain client to the first master must be MOVED for.
	var moved string
	first := cluster.Servers[0].Client()
	defer first.Close()
	for i := 0; moved == ""; i++ {
		k := "k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if first.Get(ctx(t), "dlock:{"+k+"}").Err() != nil && strings.HasPrefix(first.Get(ctx(t), "dlock:{"+k+"}").Err().Error(), "MOVED") {
			moved = k
		}
	}

	for _, tc := range []struct {
		name string
		opts redis.Options
		key  string
		want error
	}{
		{"wrong password", redis.Options{Addr: secured.Addr(), Password: "wrong"}, "k", dlock.ErrMisconfigured},
		{"no password", redis.Options{Addr: secured.Addr()}, "k", dlock.ErrMisconfigured},
		{"ACL user without the keys", redis.Options{Addr: secured.Addr(), Username: "nokeys", Password: "pw"}, "k", dlock.ErrMisconfigured},
		{"a hash at the lock key", redis.Options{Addr: plain.Addr()}, "hash", dlock.ErrMisconfigured},
		{"a fence counter that is not a number", redis.Options{Addr: plain.Addr()}, "badfence", dlock.ErrMisconfigured},
		{"a Cluster node through a plain client", redis.Options{Addr: cluster.Servers[0].Addr()}, moved, dlock.ErrMisconfigured},
		{"a database that does not exist", redis.Options{Addr: plain.Addr(), DB: 99}, "k", dlock.ErrMisconfigured},
		{"connection refused", redis.Options{Addr: dead.Addr()}, "k", dlock.ErrUnavailable},
		{"held by another owner", redis.Options{Addr: plain.Addr()}, "held", dlock.ErrNotAcquired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			c := redis.NewClient(&opts)
			defer c.Close()
			l := newLocker(t, c)
			_, err := l.TryAcquire(ctx(t), tc.key)
			isClass(t, "TryAcquire", err, tc.want)
			var ne *dlock.NodeError
			if tc.want != dlock.ErrNotAcquired && !errors.As(err, &ne) {
				t.Errorf("TryAcquire: %v does not name the node", err)
			}
			if tc.want != dlock.ErrMisconfigured {
				return
			}
			// Acquire does not wait on a permanent error.
			actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err = l.Acquire(actx, tc.key)
			isClass(t, "Acquire", err, dlock.ErrMisconfigured)
			if actx.Err() != nil {
				t.Errorf("Acquire waited for its context on a permanent error: %v", err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire: %v wraps a deadline that did not end the call", err)
			}
		})
	}

	t.Run("subscription refused", func(t *testing.T) {
		// The user may use the keys but not the waiters' channel: waiting
		// cannot work, and must say so instead of sleeping.
		other := newLocker(t, admin)
		k, err := other.TryAcquire(ctx(t), "sub")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx(t))
		c := redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "nochannels", Password: "pw"})
		defer c.Close()
		l := newLocker(t, c)
		_, err = l.TryAcquire(ctx(t), "sub")
		isClass(t, "TryAcquire", err, dlock.ErrNotAcquired)
		actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = l.Acquire(actx, "sub")
		isClass(t, "Acquire", err, dlock.ErrMisconfigured)
		if actx.Err() != nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "dlock:inbox:") {
			t.Errorf("Acquire without the channel permission: %v, want at once an error naming the channel and NOPERM", err)
		}
	})

	t.Run("closed", func(t *testing.T) {
		l := dlock.New(pc)
		l.Close()
		_, err := l.TryAcquire(ctx(t), "k")
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("TryAcquire on a closed Locker: %v, want ErrClosed", err)
		}
		for _, c := range classes {
			if errors.Is(err, c) {
				t.Errorf("TryAcquire on a closed Locker: %v is also %v", err, c)
			}
		}
	})
}

// TestRedlockErrorClasses: on a quorum, the class says what a quorum needs.
func TestRedlockErrorClasses(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	good := dlocktest.Clients(t, servers...)
	wrong := func(i int) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: servers[i].Addr(), Username: "nobody", Password: "wrong"})
		t.Cleanup(func() { c.Close() })
		return c
	}
	redlockOf := func(clients ...redis.UniversalClient) *dlock.Locker {
		l, err := dlock.NewRedlock(clients)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	// One node misconfigured: a quorum still forms.
	k, err := redlockOf(wrong(0), good[1], good[2]).TryAcquire(ctx(t), "one-bad")
	if err != nil {
		t.Fatalf("with 1 of 3 nodes misconfigured: %v", err)
	}
	k.Release(ctx(t))

	// Two: no quorum can form without fixing them.
	_, err = redlockOf(wrong(0), wrong(1), good[2]).Acquire(ctx(t), "two-bad")
	isClass(t, "2 of 3 nodes misconfigured", err, dlock.ErrMisconfigured)

	// One misconfigured and one busy: waiting for the holder can help.
	good[1].Set(ctx(t), "dlock:{mixed}", "someone else", time.Minute)
	_, err = redlockOf(wrong(0), good[1], good[2]).TryAcquire(ctx(t), "mixed")
	isClass(t, "1 misconfigured and 1 busy of 3", err, dlock.ErrNotAcquired)
}

// TestMetadata: who holds the lock, stored with it and gone with it.
func TestMetadata(t *testing.T) {
	l, _, c := single(t)
	k, err := l.Acquire(ctx(t), "meta", dlock.WithMetadata("host=a pid=1 cmd=backup"), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if k.Metadata() != "host=a pid=1 cmd=backup" {
		t.Errorf("Metadata() = %q", k.Metadata())
	}
	st, err := l.Status(ctx(t), "meta")
	if err != nil || st.Metadata != "host=a pid=1 cmd=backup" || st.Nodes[0].Metadata != st.Metadata {
		t.Errorf("Status = %+v, %v; want the holder's metadata", st, err)
	}
	// Renewals keep it as long as the lock.
	time.Sleep(1500 * time.Millisecond) // more than a TTL: it must have been renewed
	if st, _ := l.Status(ctx(t), "meta"); st.Metadata == "" {
		t.Error("the metadata expired while the lock was renewed")
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx(t), "dlock:{meta}:meta").Val(); n != 0 {
		t.Error("Release left the metadata behind")
	}
	// None given, none written.
	k, err = l.TryAcquire(ctx(t), "plain")
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx(t), "dlock:{plain}:meta").Val(); n != 0 {
		t.Error("a lock without metadata wrote a metadata key")
	}
	k.Release(ctx(t))
	// A fixed lease: the metadata expires with the lock.
	_, err = l.TryAcquire(ctx(t), "lease", dlock.WithMetadata("x"), dlock.WithTTL(100*time.Millisecond), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Exists(ctx(t), "dlock:{lease}", "dlock:{lease}:meta").Val() == 0 }, "the lock and its metadata to expire")

	if _, err := l.TryAcquire(ctx(t), "long", dlock.WithMetadata(strings.Repeat("x", dlock.MaxMetadata+1))); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("metadata over %d bytes: %v, want ErrInvalid", dlock.MaxMetadata, err)
	}
	// A metadata key of another type: refused before anything is written.
	c.Set(ctx(t), "dlock:{wrong}:meta", "a string", 0)
	_, err = l.TryAcquire(ctx(t), "wrong", dlock.WithMetadata("x"))
	isClass(t, "metadata key of another type", err, dlock.ErrMisconfigured)
	if n := c.Exists(ctx(t), "dlock:{wrong}", "dlock:{wrong}:fence").Val(); n != 0 {
		t.Errorf("a failed acquisition wrote %d keys", n)
	}
}

// TestACLFromDocs: the ACL line of docs/operations.md grants what dlock sends, and
// nothing else: every command that a script calls (scripts/ and fenced/),
// and every command that dlock sends itself (aclPlainCommands, in
// acl_test.go, which TestACLEveryFeature checks against what the features
// send), on dlock's keys and channels and fenced's keys; and a user made
// with it can do what dlock does (every feature: TestACLEveryFeature).
func TestACLFromDocs(t *testing.T) {
	line := aclLine(t, ".", "acl-test-pw")
	granted := aclGranted(t, line)
	needed := map[string]string{} // each command needed, and what needs it
	for c, why := range aclPlainCommands {
		needed[c] = why
	}
	scripts, _ := filepath.Glob("internal/script/*.lua")
	fencedScripts, _ := filepath.Glob("fenced/*.lua")
	if len(scripts) == 0 || len(fencedScripts) == 0 {
		t.Fatalf("no scripts found: %v, %v", scripts, fencedScripts)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*(['"]([A-Za-z]+)['"])?`)
	for _, p := range append(scripts, fencedScripts...) {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if m[2] == "" {
				t.Errorf("%s: %s with a command that is not a literal: the test cannot tell which command it is", p, m[0])
				continue
			}
			c := strings.ToLower(m[2])
			needed[c] = p
			if !granted[c] {
				t.Errorf("%s calls %s, which the ACL line of docs/operations.md does not grant", p, m[2])
			}
		}
	}
	for c, why := range aclPlainCommands {
		if !granted[c] {
			t.Errorf("dlock sends %s (%s), which the ACL line of docs/operations.md does not grant", c, why)
		}
	}
	for c := range granted {
		if _, ok := needed[c]; !ok {
			t.Errorf("the ACL line of docs/operations.md grants %s, which dlock does not send (or add it, with what sends it, to aclPlainCommands)", c)
		}
	}
	for p, why := range aclPatterns {
		if !strings.Contains(" "+line+" ", " "+p+" ") {
			t.Errorf("the ACL line of docs/operations.md does not have %s (%s)", p, why)
		}
	}

	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	var args []any
	for _, f := range strings.Fields(line) {
		args = append(args, f)
	}
	if err := admin.Do(ctx(t), args...).Err(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	user := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "dlock", Password: "acl-test-pw"})
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := newLocker(t, user()), newLocker(t, user())
	k, err := a.TryAcquire(ctx(t), "job", dlock.WithMetadata("acl"))
	if err != nil {
		t.Fatal(err)
	}
	got := queued(t, b, admin, "job", 1) // waits: subscribes, registers
	if err := k.Extend(ctx(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Status(ctx(t), "job"); err != nil || !st.Held || st.Metadata != "acl" {
		t.Fatalf("Status: %+v, %v", st, err)
	}
	handoff(t, k, got, "the restricted user's waiter")
	k, err = a.TryAcquire(ctx(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.ForceRelease(ctx(t), "job"); err != nil || n != 1 {
		t.Fatalf("ForceRelease: %d, %v", n, err)
	}
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after a force release: %v", err)
	}
	// Leader election: announcements and observers on the leader channel.
	octx, stop := context.WithCancel(ctx(t))
	defer stop()
	obs := b.Observe(octx, "lead")
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("Observe: %+v before any leader", ld)
	}
	lead, err := a.Campaign(ctx(t), "lead", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld.Value != "host-a" || ld.Term != lead.Fence() {
		t.Fatalf("Observe: %+v, want host-a at term %d", ld, lead.Fence())
	}
	if err := lead.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("Observe after the resignation: %+v", ld)
	}
	if denied := aclDenials(t, s.Addr()); len(denied) > 0 {
		t.Errorf("the ACL log has denials: %v", denied)
	}
}

// TestRefusedWithoutRetries backs docs/operations.md (Supported versions):
// a client that does not retry (MaxRetries: -1) reports a Redis that
// refuses connections as refused, on every go-redis version (v9.23
// retries the dial, but not past its own attempts), not as a deadline.
func TestRefusedWithoutRetries(t *testing.T) {
	dead := dlocktest.Start(t)
	addr := dead.Addr()
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	l := newLocker(t, c)
	_, err := l.TryAcquire(ctx(t), "k")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("TryAcquire on a Redis that refuses connections: %v, want ErrUnavailable saying connection refused", err)
	}
}
