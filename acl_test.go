package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// aclPlainCommands are the commands that dlock sends itself, outside its
// scripts (whose commands TestACLFromDocs reads from the .lua files), each
// with what sends it: found by grepping the Go code (the root package,
// fenced/, internal/quorum, cmd/dlock) for go-redis calls and hand-built
// commands. TestACLFromDocs checks that the ACL line of docs/operations.md grants each
// of them and nothing else; TestACLEveryFeature checks that everything the
// features send through the clients is on this list.
var aclPlainCommands = map[string]string{
	"evalsha":       "every script: scripts.go, fenced/fenced.go (redis.Script.Run)",
	"eval":          "a script the server does not have (NOSCRIPT: after a restart, a SCRIPT FLUSH), sent again whole",
	"get":           "Status (admin.go: the lock, its fence counter, a semaphore's limit); ForceRelease (the holder's token); Leader",
	"pttl":          "Status: the lock's TTL",
	"zcard":         "Status: the waiters",
	"hgetall":       "Status: the metadata, the release requests kept (asked.go)",
	"hget":          "a Locker that listens for release requests: the requests kept for its locks, at each subscription (asked.go: readRequests); Status: an election's count of terms (Leader.Transitions, admin.go)",
	"zrange":        "Status (a semaphore's permits, WITHSCORES; the waiting queue, WITHSCORES); ForceRelease of a semaphore",
	"scan":          "List (list.go): the keys of the locks under the prefix, on every node and every master of a Cluster",
	"time":          "Status: the server's clock, for the permits' TTLs",
	"publish":       "the announcement of a vacancy (election.go) and of a proclaimed value (proclaim.go); a term's is elected.lua's",
	"subscribe":     "waiting (inbox.go: the waiters' channel), Observe (election.go: the leader channel) and Lock.Asked (asked.go: the release requests' channel)",
	"ssubscribe":    "waiting on a Cluster (internal/inbox/sharded.go: the waiters' channel of each hash slot)",
	"ping":          "go-redis' health check of a subscription's connection",
	"info":          "the CLI's inspection of each plain URL (cmd/dlock/cli.go: a Cluster node without --cluster, two Redlock URLs to one server); the server's version after a script failed as on a server older than MinRedisVersion (scripts.go)",
	"wait":          "WithReplicaAck (locker.go)",
	"hmget":         "fenced.Store.Get (fenced/fenced.go)",
	"select":        "a database other than 0 (the CLI's redis://HOST/DB, redis.Options.DB): go-redis selects it on each new connection",
	"cluster|slots": "a Cluster: go-redis' ClusterClient reads the slot map with it (the CLI's --cluster); the sharded inbox checks that map with it after a master dropped a slot (internal/inbox/sharded.go)",
	"command":       "a Cluster on go-redis v9.23 (go.redis-latest.mod): the ClusterClient reads the commands' routing information; refused, it logs the refusal at every command",
}

// aclPatterns are the key and channel patterns that the ACL line of docs/operations.md
// needs (for the default prefixes), and what for.
var aclPatterns = map[string]string{
	"~" + dlock.DefaultPrefix + "*":        "the locks' keys",
	"~" + fenced.DefaultPrefix + "*":       "fenced's resources",
	"&" + dlock.DefaultPrefix + "inbox:*":  "the waiters' channel: Acquire on a held lock",
	"&" + dlock.DefaultPrefix + "leader:*": "the elections' channel: Campaign's announcements, Observe",
}

// aclExempt are commands go-redis sends on each connection (through the
// hooks on v9.23, not on v9.7) that need no permission (HELLO and AUTH are
// allowed to every user), or whose refusal go-redis ignores: CLIENT SETINFO
// (Redis 7.2: the client's name and version, for CLIENT LIST) and CLIENT
// MAINT_NOTIFICATIONS (go-redis v9.23 asks for a managed service's
// maintenance notifications, and does without them when refused).
var aclExempt = map[string]bool{"hello": true, "auth": true, "client|setinfo": true, "client|maint_notifications": true}

// aclLine returns the ACL SETUSER line of docs/operations.md (dir is the
// module's root), with pw as the password.
func aclLine(t testing.TB, dir, pw string) string {
	t.Helper()
	doc, err := os.ReadFile(dir + "/docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "ACL SETUSER dlock ") {
			if line != "" {
				t.Fatal("two ACL SETUSER dlock lines in docs/operations.md")
			}
			line = l
		}
	}
	if line == "" || !strings.Contains(line, ">PASSWORD ") {
		t.Fatalf("no ACL SETUSER line with >PASSWORD in docs/operations.md: %q", line)
	}
	return strings.Replace(line, ">PASSWORD ", ">"+pw+" ", 1)
}

// aclGranted returns the commands that an ACL line grants (its +cmd and
// +cmd|sub rules; the line grants no categories).
func aclGranted(t testing.TB, line string) map[string]bool {
	t.Helper()
	granted := map[string]bool{}
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "+@") || strings.HasPrefix(f, "-") && f != "-@all" {
			t.Fatalf("%s: %q: the line should grant commands one by one, after -@all", line, f)
		}
		if c, ok := strings.CutPrefix(f, "+"); ok {
			granted[c] = true
		}
	}
	return granted
}

// aclSetUser runs line (an ACL SETUSER line) as each server's default user,
// and checks in the test's Cleanup (before the servers, started earlier, are
// stopped) that the servers' ACL logs have no denials.
func aclSetUser(t testing.TB, line string, addrs ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, d := range aclDenials(t, addrs...) {
			t.Errorf("ACL LOG: %s", d)
		}
	})
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
}

// aclDenials returns the ACL LOG entries of each server (every denial since
// the server started), but for the exempt commands (aclExempt).
func aclDenials(t testing.TB, addrs ...string) []string {
	t.Helper()
	var denials []string
	for _, addr := range addrs {
		for _, e := range aclLog(t, addr) {
			if aclExempt[e["object"]] {
				continue
			}
			denials = append(denials, fmt.Sprintf("%s: %s refused %s %q (%s) %s times", addr, e["username"], e["reason"], e["object"], e["context"], e["count"]))
		}
	}
	return denials
}

// aclLog returns the ACL LOG entries of the server at addr, each as its
// fields' text. (go-redis v9.7's ACLLog refuses the client info of Valkey
// 8 and Redis 8, which have fields it does not know.)
func aclLog(t testing.TB, addr string) []map[string]string {
	t.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	v, err := admin.Do(context.Background(), "acl", "log", "100").Result()
	if err != nil {
		t.Fatalf("ACL LOG on %s: %v", addr, err)
	}
	entries, _ := v.([]any)
	var out []map[string]string
	for _, e := range entries {
		m := map[string]string{}
		switch x := e.(type) {
		case map[any]any:
			for k, v := range x {
				m[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		case []any:
			for i := 0; i+1 < len(x); i += 2 {
				m[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
			}
		}
		out = append(out, m)
	}
	return out
}

// refusedByACL reports whether err is Redis refusing a command, key or
// channel to the user, directly (NOPERM) or inside a script.
func refusedByACL(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't run this command"))
}

// aclRecorder is a go-redis hook that records the commands a client sends
// (its pipelines' too) and the ones Redis refused to the user. Subscriptions
// and go-redis' connection set-up do not go through hooks: the ACL log and
// the errors tell about those.
type aclRecorder struct {
	mu      sync.Mutex
	sent    map[string]bool
	refused []string
}

func newACLRecorder() *aclRecorder { return &aclRecorder{sent: map[string]bool{}} }

// name is the command's name as ACL rules spell it: "cmd", or "cmd|sub" for
// a command with subcommands.
func (r *aclRecorder) name(cmd redis.Cmder) string {
	n := strings.ToLower(cmd.Name())
	switch n {
	case "acl", "client", "cluster", "command", "config", "function", "memory", "object", "pubsub", "script", "xinfo":
		if args := cmd.Args(); len(args) > 1 {
			n += "|" + strings.ToLower(fmt.Sprint(args[1]))
		}
	}
	return n
}

// record records cmd, and err if it is a refusal.
func (r *aclRecorder) record(cmd redis.Cmder, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.name(cmd)
	r.sent[n] = true
	if refusedByACL(err) {
		r.refused = append(r.refused, n+": "+err.Error())
	}
}

func (r *aclRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *aclRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd) // the caller sets cmd's error from it, after the hooks
		r.record(cmd, err)
		return err
	}
}

func (r *aclRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.record(c, c.Err())
		}
		return err
	}
}

// check fails t for each command refused, each command sent that the line
// does not grant, and each one that is not on aclPlainCommands.
func (r *aclRecorder) check(t *testing.T, granted map[string]bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.refused {
		t.Errorf("refused to the ACL user of docs/operations.md: %s", s)
	}
	var sent []string
	for n := range r.sent {
		sent = append(sent, n)
		if aclExempt[n] {
			continue
		}
		if _, listed := aclPlainCommands[n]; !listed {
			t.Errorf("dlock sent %s, which is not on aclPlainCommands: add it there, with what sends it, and to the ACL line of docs/operations.md", n)
		}
		if cmd, _, _ := strings.Cut(n, "|"); !granted[n] && !granted[cmd] {
			t.Errorf("dlock sent %s, which the ACL line of docs/operations.md does not grant", n)
		}
	}
	slices.Sort(sent)
	t.Logf("commands sent through the clients' hooks: %s", strings.Join(sent, " "))
}

// aclEvents is a dlock Hook that records events whose error is a refusal
// (renewals, subscriptions, clean-ups in the background included).
type aclEvents struct {
	mu   sync.Mutex
	errs []string
}

func (h *aclEvents) Start(ctx context.Context, _ string) context.Context { return ctx }

func (h *aclEvents) Event(_ context.Context, e dlock.Event) {
	if e.Err != nil && (refusedByACL(e.Err) || errors.Is(e.Err, dlock.ErrMisconfigured)) {
		h.mu.Lock()
		h.errs = append(h.errs, fmt.Sprintf("%v %q: %v", e.Kind, e.Key, e.Err))
		h.mu.Unlock()
	}
}

func (h *aclEvents) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.errs {
		t.Errorf("event with a refusal: %s", e)
	}
}

// aclOK reports whether err is nil, and fails the test if not, saying
// whether the ACL refused it.
func aclOK(t *testing.T, what string, err error) bool {
	t.Helper()
	if refusedByACL(err) {
		t.Errorf("%s as the ACL user of docs/operations.md: refused: %v", what, err)
	} else if err != nil {
		t.Errorf("%s: %v", what, err)
	}
	return err == nil
}

// aclNoErr is aclOK that stops the test on an error.
func aclNoErr(t *testing.T, what string, err error) {
	t.Helper()
	if !aclOK(t, what, err) {
		t.FailNow()
	}
}

// TestACLEveryFeature runs every feature of the library as a user made with
// exactly the ACL line of docs/operations.md: locks, waiting, TryAcquire on a busy lock,
// metadata, Extend, renewals, Lost, Do, semaphores, Status, ForceRelease
// (of a lock and of a semaphore), leader election with an observer and a
// second candidate, WithReplicaAck, fenced writes and reads, a database
// other than 0, a Redlock (with a fence counter to raise) and a Cluster.
// It fails on any refusal: an error, an event, a denial in the servers' ACL
// log, or a command sent that the line does not grant. The CLI's run is in
// cmd/dlock's TestACLCLI.
func TestACLEveryFeature(t *testing.T) {
	const pw = "acl-every-feature"
	line := aclLine(t, ".", pw)
	granted := aclGranted(t, line)
	rec, events := newACLRecorder(), &aclEvents{}
	user := func(t *testing.T, addr string, db int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: "dlock", Password: pw, DB: db})
		c.AddHook(rec)
		t.Cleanup(func() { c.Close() })
		return c
	}
	locker := func(t *testing.T, c redis.UniversalClient, opts ...dlock.Option) *dlock.Locker {
		return newLocker(t, c, append([]dlock.Option{dlock.WithHook(events)}, opts...)...)
	}
	defer func() {
		events.check(t)
		rec.check(t, granted)
	}()

	// A master with a replica, for WithReplicaAck.
	s := dlocktest.Start(t, dlocktest.WithArgs("--dir", t.TempDir(), "--repl-diskless-sync-delay", "0"))
	dlocktest.Start(t, dlocktest.WithArgs("--dir", t.TempDir(), "--replicaof", "127.0.0.1", strconv.Itoa(s.Port())))
	admin := s.Client()
	defer admin.Close()
	aclSetUser(t, line, s.Addr())
	a, b := locker(t, user(t, s.Addr(), 0)), locker(t, user(t, s.Addr(), 0))

	t.Run("lock", func(t *testing.T) {
		k, err := a.TryAcquire(ctx(t), "job", dlock.WithMetadata("host-a"))
		aclNoErr(t, "TryAcquire", err)
		if _, err := b.TryAcquire(ctx(t), "job"); !errors.Is(err, dlock.ErrNotAcquired) || refusedByACL(err) {
			t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
		}
		got := queued(t, b, admin, "job", 1) // subscribes to the inbox, registers
		aclNoErr(t, "Extend", k.Extend(ctx(t), time.Minute))
		st, err := b.Status(ctx(t), "job")
		aclNoErr(t, "Status", err)
		if !st.Held || st.Metadata != "host-a" || st.Waiters != 1 || st.Fence != k.Fence() || len(st.Queue) != 1 {
			t.Errorf("Status of the held lock: %+v", st)
		}
		locks, err := b.List(ctx(t), "jo*")
		aclNoErr(t, "List", err)
		if len(locks) != 1 || locks[0].Key != "job" || locks[0].Waiters != 1 {
			t.Errorf("List: %+v", locks)
		}
		handoff(t, k, got, "the waiter") // woken by the release, through the inbox
		st, err = a.Status(ctx(t), "job")
		aclNoErr(t, "Status of a free lock", err)
		if st.Held {
			t.Errorf("Status after the releases: %+v", st)
		}
		ran := false
		aclNoErr(t, "Do", a.Do(ctx(t), "job", func(context.Context) error { ran = true; return nil }))
		if !ran {
			t.Error("Do did not run its function")
		}
	})

	t.Run("release request", func(t *testing.T) {
		k, err := a.TryAcquire(ctx(t), "asked")
		aclNoErr(t, "TryAcquire", err)
		defer k.Release(ctx(t))
		asked := k.Asked() // subscribes, reads the requests kept
		aclNoErr(t, "RequestRelease", b.RequestRelease(ctx(t), "asked", "acl"))
		select {
		case <-asked:
		case <-time.After(10 * time.Second):
			t.Fatal("the holder did not hear the request")
		}
		st, err := b.Status(ctx(t), "asked")
		aclNoErr(t, "Status", err)
		if st.Asked == nil || st.Asked.Reason != "acl" {
			t.Errorf("Status.Asked: %+v", st.Asked)
		}
	})

	t.Run("renewal, force release, Lost", func(t *testing.T) {
		k, err := a.TryAcquire(ctx(t), "renewed", dlock.WithTTL(600*time.Millisecond)) // renewed every 200ms
		aclNoErr(t, "TryAcquire", err)
		first := k.ValidUntil()
		waitFor(t, func() bool { return k.ValidUntil().After(first) }, "a renewal")
		select {
		case <-k.Lost():
			t.Fatal("the renewed lock was lost")
		default:
		}
		n, err := b.ForceRelease(ctx(t), "renewed")
		aclNoErr(t, "ForceRelease", err)
		if n != 1 {
			t.Errorf("ForceRelease of a held lock: %d nodes", n)
		}
		select {
		case <-k.Lost(): // the next renewal finds it gone
		case <-time.After(2 * time.Second):
			t.Fatal("Lost did not close after a force release")
		}
		if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Release after a force release: %v, want ErrNotHeld", err)
		}
	})

	t.Run("shared", func(t *testing.T) {
		r1, err := a.TryAcquire(ctx(t), "rw", dlock.WithShared(), dlock.WithMetadata("reader"))
		aclNoErr(t, "TryAcquire of a shared hold", err)
		got := acquireAsync(t, b, "rw")
		waitFor(t, func() bool { return admin.ZCard(ctx(t), "dlock:{rw}:writers").Val() == 1 }, "the writer's intent")
		st, err := a.Status(ctx(t), "rw")
		aclNoErr(t, "Status of shared holds", err)
		if !st.Shared || st.Writers != 1 {
			t.Errorf("Status of shared holds with a writer waiting: %+v", st)
		}
		aclNoErr(t, "Release of a shared hold", r1.Release(ctx(t)))
		select {
		case k := <-got:
			if k == nil {
				t.FailNow()
			}
			ks, err := a.AcquireAll(ctx(t), []string{"rw-2", "rw-1"}, dlock.WithShared())
			aclNoErr(t, "AcquireAll", err)
			for _, h := range append(ks, k) {
				aclNoErr(t, "Release", h.Release(ctx(t)))
			}
		case <-time.After(2 * time.Second):
			t.Fatal("the writer was not woken by the last shared release")
		}
	})

	t.Run("semaphore", func(t *testing.T) {
		var held []*dlock.Lock
		for i := range 2 {
			k, err := a.TryAcquire(ctx(t), "sem", dlock.WithLimit(2), dlock.WithMetadata("permit "+strconv.Itoa(i)))
			aclNoErr(t, "TryAcquire of a permit", err)
			held = append(held, k)
		}
		if _, err := b.TryAcquire(ctx(t), "sem", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrNotAcquired) || refusedByACL(err) {
			t.Fatalf("TryAcquire of a full semaphore: %v, want ErrNotAcquired", err)
		}
		got := acquireAsync(t, b, "sem", dlock.WithLimit(2))
		waitFor(t, func() bool { return admin.ZCard(ctx(t), "dlock:{sem}:waiters").Val() == 1 }, "the semaphore's waiter registered")
		st, err := a.Status(ctx(t), "sem")
		aclNoErr(t, "Status of a semaphore", err)
		if st.Limit != 2 || len(st.Permits) != 2 || st.Waiters != 1 {
			t.Errorf("Status of the full semaphore: %+v", st)
		}
		aclNoErr(t, "Release of a permit", held[0].Release(ctx(t)))
		select {
		case k := <-got:
			if k == nil {
				t.FailNow()
			}
		case <-time.After(2 * time.Second):
			t.Fatal("the semaphore's waiter was not woken by a release")
		}
		n, err := b.ForceRelease(ctx(t), "sem") // every permit: ZRANGE, then the release script
		aclNoErr(t, "ForceRelease of a semaphore", err)
		if n != 1 {
			t.Errorf("ForceRelease of a semaphore: %d nodes", n)
		}
	})

	t.Run("election", func(t *testing.T) {
		octx, stop := context.WithCancel(ctx(t))
		defer stop()
		obs := b.Observe(octx, "lead")
		if ld := <-obs; ld != (dlock.Leader{}) {
			t.Fatalf("Observe: %+v before any leader", ld)
		}
		lead, err := a.Campaign(ctx(t), "lead", "host-a")
		aclNoErr(t, "Campaign", err)
		if ld := <-obs; ld.Value != "host-a" || ld.Term != lead.Fence() {
			t.Fatalf("Observe: %+v, want host-a at term %d", ld, lead.Fence())
		}
		ld, err := b.Leader(ctx(t), "lead")
		aclNoErr(t, "Leader", err)
		if ld.Value != "host-a" {
			t.Errorf("Leader: %+v", ld)
		}
		next := make(chan *dlock.Lock, 1)
		go func() {
			k, err := b.Campaign(ctx(t), "lead", "host-b")
			if err != nil {
				t.Errorf("the second candidate's Campaign: %v", err)
			}
			next <- k
		}()
		waitFor(t, func() bool { return admin.ZCard(ctx(t), "dlock:{lead}:waiters").Val() == 1 }, "the second candidate to wait")
		aclNoErr(t, "the leader's resignation", lead.Release(ctx(t)))
		k := <-next
		if k == nil {
			t.FailNow()
		}
		for ld := range obs { // a vacancy first, which may be folded into the term
			if ld.Value == "host-b" && ld.Term == k.Fence() {
				break
			}
			if ld != (dlock.Leader{}) {
				t.Fatalf("Observe after the resignation: %+v, want host-b at term %d", ld, k.Fence())
			}
		}
		aclNoErr(t, "the second leader's resignation", k.Release(ctx(t)))
		if ld := <-obs; ld != (dlock.Leader{}) {
			t.Fatalf("Observe after the last resignation: %+v", ld)
		}
		if _, err := b.Leader(ctx(t), "lead"); !errors.Is(err, dlock.ErrNoLeader) {
			t.Errorf("Leader without a leader: %v", err)
		}
	})

	t.Run("the count of terms kept", func(t *testing.T) {
		// keepterms.lua, every half of the count's life (here the TTL:
		// the retention is shorter): the count outlives two lives.
		const ttl = 300 * time.Millisecond
		c := locker(t, user(t, s.Addr(), 0), dlock.WithFenceRetention(time.Millisecond))
		k, err := c.Campaign(ctx(t), "kept", "host-c", dlock.WithTTL(ttl))
		aclNoErr(t, "Campaign", err)
		time.Sleep(2 * ttl) // the passing of time is the subject, not a wait for an event
		ld, err := b.Leader(ctx(t), "kept")
		aclNoErr(t, "Leader", err)
		if ld.Transitions != 1 {
			t.Errorf("Leader after two lives of the count: %+v, want 1 transition", ld)
		}
		aclNoErr(t, "the resignation", k.Release(ctx(t)))
	})

	t.Run("WithReplicaAck", func(t *testing.T) {
		waitFor(t, func() bool {
			return strings.Contains(admin.Info(ctx(t), "replication").Val(), "state=online")
		}, "the replica to be in sync")
		acked := locker(t, user(t, s.Addr(), 0), dlock.WithReplicaAck(1))
		// The default TTL: WAIT has most of a second (a node timeout). A
		// renewal is an Extend, with WAIT, on a timer.
		k, err := acked.TryAcquire(ctx(t), "acked")
		aclNoErr(t, "TryAcquire WithReplicaAck(1)", err)
		aclNoErr(t, "Extend WithReplicaAck(1)", k.Extend(ctx(t), time.Minute))
		aclNoErr(t, "Release WithReplicaAck(1)", k.Release(ctx(t)))
	})

	t.Run("fenced", func(t *testing.T) {
		// Each call on its own: one refused does not hide the next.
		store := fenced.New(user(t, s.Addr(), 0))
		old, err := a.TryAcquire(ctx(t), "account")
		aclNoErr(t, "TryAcquire", err)
		aclOK(t, "Store.Set", store.Set(ctx(t), "account", "v1", old.Fence()))
		aclNoErr(t, "Release", old.Release(ctx(t)))
		k, err := b.TryAcquire(ctx(t), "account")
		aclNoErr(t, "TryAcquire", err)
		defer k.Release(ctx(t))
		if v, found, err := store.Claim(ctx(t), "account", k.Fence()); aclOK(t, "Store.Claim", err) && (!found || v != "v1") {
			t.Errorf("Claim: %q, %v, want v1", v, found)
		}
		if err := store.Set(ctx(t), "account", "stale", old.Fence()); !errors.Is(err, fenced.ErrStale) {
			t.Errorf("a write with the former holder's fence: %v, want ErrStale", err)
		}
		aclOK(t, "Store.Set", store.Set(ctx(t), "account", "v2", k.Fence()))
		if v, fence, err := store.Get(ctx(t), "account"); aclOK(t, "Store.Get", err) && (v != "v2" || fence != k.Fence()) {
			t.Errorf("Get: %q at fence %d, want v2 at %d", v, fence, k.Fence())
		}
		aclOK(t, "Store.Delete", store.Delete(ctx(t), "account", k.Fence()))
		if _, _, err := store.Get(ctx(t), "account"); !errors.Is(err, fenced.ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
	})

	t.Run("database 1", func(t *testing.T) {
		l := locker(t, user(t, s.Addr(), 1))
		k, err := l.TryAcquire(ctx(t), "db1")
		aclNoErr(t, "TryAcquire in database 1", err)
		st, err := l.Status(ctx(t), "db1")
		aclNoErr(t, "Status in database 1", err)
		if !st.Held {
			t.Errorf("Status in database 1: %+v", st)
		}
		aclNoErr(t, "Release in database 1", k.Release(ctx(t)))
	})

	t.Run("Redlock", func(t *testing.T) {
		servers := dlocktest.StartN(t, 3)
		var clients []redis.UniversalClient
		for _, n := range servers {
			aclSetUser(t, line, n.Addr())
			clients = append(clients, user(t, n.Addr(), 0))
		}
		// Three different fence counters (two ahead of the clock, which
		// a new counter starts from): whichever two nodes grant the lock,
		// the one that returned the smaller fence is raised (raise.lua).
		admins := dlocktest.Clients(t, servers...)
		for i, f := range []string{"5000000000000100", "6000000000000100"} {
			if err := admins[i+1].Set(ctx(t), "dlock:{rl}:fence", f, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		ra, err := dlock.NewRedlock(clients, dlock.WithHook(events))
		if err != nil {
			t.Fatal(err)
		}
		defer ra.Close()
		rb, err := dlock.NewRedlock(clients, dlock.WithHook(events))
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Close()
		k, err := ra.TryAcquire(ctx(t), "rl", dlock.WithMetadata("redlock"))
		aclNoErr(t, "TryAcquire on a Redlock", err)
		if k.Fence() <= 5000000000000100 {
			t.Errorf("fence %d on a Redlock with two nodes' counters at 5000000000000100 and 6000000000000100", k.Fence())
		}
		waitFor(t, func() bool {
			raised := 0
			for _, c := range admins {
				if f, _ := c.Get(ctx(t), "dlock:{rl}:fence").Uint64(); f >= k.Fence() {
					raised++
				}
			}
			return raised >= 2
		}, "a quorum of fence counters at the lock's fence")
		got := acquireAsync(t, rb, "rl")
		waitFor(t, func() bool {
			on := 0
			for _, c := range admins {
				if c.ZCard(ctx(t), "dlock:{rl}:waiters").Val() == 1 {
					on++
				}
			}
			return on >= 2
		}, "the Redlock waiter registered on a quorum")
		st, err := rb.Status(ctx(t), "rl")
		aclNoErr(t, "Status on a Redlock", err)
		if !st.Held || st.Metadata != "redlock" {
			t.Errorf("Status on a Redlock: %+v", st)
		}
		locks, err := rb.List(ctx(t), "")
		aclNoErr(t, "List on a Redlock", err)
		if len(locks) != 1 || !locks[0].Held || locks[0].Key != "rl" {
			t.Errorf("List on a Redlock: %+v", locks)
		}
		handoff(t, k, got, "the Redlock waiter")
		k, err = ra.TryAcquire(ctx(t), "rl")
		aclNoErr(t, "TryAcquire on a Redlock", err)
		// TryAcquire returns once a quorum granted: the third node's grant
		// may come a moment later.
		waitFor(t, func() bool {
			on := 0
			for _, c := range admins {
				on += int(c.Exists(ctx(t), "dlock:{rl}").Val())
			}
			return on == 3
		}, "every node to hold the key")
		n, err := rb.ForceRelease(ctx(t), "rl")
		aclNoErr(t, "ForceRelease on a Redlock", err)
		if n != 3 {
			t.Errorf("ForceRelease on a Redlock: %d nodes, want 3", n)
		}
		_ = k.Release(ctx(t))
	})

	t.Run("Cluster", func(t *testing.T) {
		cl := dlocktest.StartCluster(t, 1)
		aclSetUser(t, line, cl.Addrs()...)
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "dlock", Password: pw})
		cc.AddHook(rec)
		t.Cleanup(func() { cc.Close() })
		l := locker(t, cc)
		k, err := l.TryAcquire(ctx(t), "on-cluster", dlock.WithMetadata("cluster"))
		aclNoErr(t, "TryAcquire on a Cluster", err)
		got := acquireAsync(t, l, "on-cluster")
		clAdmin := cl.Servers[0].Client()
		defer clAdmin.Close()
		waitFor(t, func() bool { return clAdmin.ZCard(ctx(t), "dlock:{on-cluster}:waiters").Val() == 1 }, "the Cluster waiter registered")
		st, err := l.Status(ctx(t), "on-cluster")
		aclNoErr(t, "Status on a Cluster", err)
		if !st.Held || st.Metadata != "cluster" {
			t.Errorf("Status on a Cluster: %+v", st)
		}
		locks, err := l.List(ctx(t), "on-*")
		aclNoErr(t, "List on a Cluster", err)
		if len(locks) != 1 || !locks[0].Held || locks[0].Key != "on-cluster" {
			t.Errorf("List on a Cluster: %+v", locks)
		}
		handoff(t, k, got, "the Cluster waiter")
		store := fenced.New(cc)
		aclNoErr(t, "Store.Set on a Cluster", store.Set(ctx(t), "res", "v", 1))
		_, _, err = store.Get(ctx(t), "res")
		aclNoErr(t, "Store.Get on a Cluster", err)
		k, err = l.TryAcquire(ctx(t), "on-cluster", dlock.WithLimit(2))
		aclNoErr(t, "TryAcquire of a permit on a Cluster", err)
		n, err := l.ForceRelease(ctx(t), "on-cluster")
		aclNoErr(t, "ForceRelease on a Cluster", err)
		if n != 1 {
			t.Errorf("ForceRelease on a Cluster: %d", n)
		}
		_ = k.Release(ctx(t))
	})
}

// TestACLClientSetinfo backs docs/operations.md (Supported servers): on a
// server that has CLIENT SETINFO (Redis 7.2 and later, Valkey), go-redis
// names its connections with it, which the ACL line refuses (Redis 7.0's
// ACL SETUSER does not know it): each connection leaves an ACL LOG entry,
// and nothing else fails; with +client|setinfo added to the line, none.
func TestACLClientSetinfo(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	if info, err := admin.Do(ctx(t), "command", "info", "client|setinfo").Slice(); err != nil || len(info) == 0 || info[0] == nil {
		t.Skipf("this server has no CLIENT SETINFO (%v): nothing to refuse", err)
	}
	const pw = "acl-setinfo"
	line := aclLine(t, ".", pw)
	for _, tc := range []struct {
		line    string
		refused bool
	}{{line, true}, {line + " +client|setinfo", false}} {
		runLine(t, admin, tc.line)
		admin.Do(ctx(t), "acl", "log", "reset")
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "dlock", Password: pw})
		l := dlock.New(c)
		k, err := l.TryAcquire(ctx(t), "setinfo")
		aclNoErr(t, "TryAcquire", err)
		aclNoErr(t, "Release", k.Release(ctx(t)))
		l.Close()
		c.Close()
		var objects []string
		for _, e := range aclLog(t, s.Addr()) {
			objects = append(objects, e["object"])
		}
		if refused := slices.Contains(objects, "client|setinfo"); refused != tc.refused || len(objects) > 1 {
			t.Errorf("%s: ACL LOG %q, want client|setinfo refused: %v, and nothing else", tc.line, objects, tc.refused)
		}
	}
}
