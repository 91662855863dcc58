package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/redisserver"
)

// clusterInfo returns a field of CLUSTER INFO on s, as a number.
func clusterInfo(t *testing.T, s *dlocktest.Server, field string) int64 {
	t.Helper()
	c := s.Client()
	defer c.Close()
	info, err := c.ClusterInfo(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := infoField(t, info, field) // absent: none counted yet
	return n
}

// infoField returns an integer "field:value" line of an INFO-like reply,
// and whether it is there.
func infoField(t *testing.T, info, field string) (int64, bool) {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n, true
		}
	}
	return 0, false
}

// busPublishes sums the classic publishes that the masters sent over the
// cluster bus.
func busPublishes(t *testing.T, cl *dlocktest.Cluster) int64 {
	t.Helper()
	var n int64
	for _, s := range cl.Servers {
		n += clusterInfo(t, s, "cluster_stats_messages_publish_sent")
	}
	return n
}

// inboxChannels returns the sharded inbox channels subscribed on s.
func inboxChannels(t *testing.T, s *dlocktest.Server) []string {
	t.Helper()
	c := s.Client()
	defer c.Close()
	chs, err := c.PubSubShardChannels(ctx(t), "dlock:inbox:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return chs
}

// shardSubscribers counts the connections to s subscribed to sharded
// channels.
func shardSubscribers(t *testing.T, s *dlocktest.Server) int {
	t.Helper()
	c := s.Client()
	defer c.Close()
	list, err := c.ClientList(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "ssub="); ok && v != "0" {
				n++
			}
		}
	}
	return n
}

// TestShardedWakeups: on a Cluster of three masters, waiters on keys of
// every master are woken by their releases without one message over the
// cluster bus (SPUBLISH in the key's slot, not PUBLISH), and a Locker
// waiting on many keys holds one pub/sub connection per master.
func TestShardedWakeups(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 3)
	cc := cl.Client()
	defer cc.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	before := busPublishes(t, cl)
	var held []*dlock.Lock
	var waiting []<-chan *dlock.Lock
	for i, s := range cl.Servers {
		for j := range 4 {
			key := keyOn(t, cc, s.Addr(), fmt.Sprintf("sharded%d-%d-", i, j))
			k, err := a.TryAcquire(ctx(t), key)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, k)
			waiting = append(waiting, acquireAsync(t, b, key))
			waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return st.Waiters == 1 }, "the waiter for "+key)
		}
	}
	for _, s := range cl.Servers {
		if chs := inboxChannels(t, s); len(chs) != 4 {
			t.Errorf("%s: %d sharded inbox channels, want 4 (one per slot waited on): %q", s.Addr(), len(chs), chs)
		}
		if n := shardSubscribers(t, s); n != 1 {
			t.Errorf("%s: %d connections subscribed to sharded channels, want 1", s.Addr(), n)
		}
	}
	for i, k := range held {
		handoff(t, k, waiting[i], "the waiter for "+k.Key())
	}
	if n := busPublishes(t, cl) - before; n != 0 {
		t.Errorf("%d publishes over the cluster bus, want 0", n)
	}
}

// migrateSlot moves the slot of key from the master src to dst, keys
// included (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE).
func migrateSlot(t *testing.T, src, dst *dlocktest.Server, key string) {
	t.Helper()
	s, d := src.Client(), dst.Client()
	defer s.Close()
	defer d.Close()
	c := ctx(t)
	slot, err := s.ClusterKeySlot(c, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	srcID, err := s.Do(c, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := d.Do(c, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.Do(c, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(s.Do(c, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	for {
		ks, err := s.ClusterGetKeysInSlot(c, int(slot), 100).Result()
		must(err)
		if len(ks) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS"}
		for _, k := range ks {
			args = append(args, k)
		}
		must(s.Do(c, args...).Err())
	}
	must(d.Do(c, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	must(s.Do(c, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
}

// TestShardedSlotMigration: a waiter whose key's slot migrates to another
// master while it waits subscribes again where the slot now lives, and the
// release wakes it (the lock's TTL is long: only the release can wake it in
// time).
func TestShardedSlotMigration(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 3)
	cc := cl.Client()
	defer cc.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	src, dst := cl.Servers[0], cl.Servers[1]
	key := keyOn(t, cc, src.Addr(), "migrating")
	// Another key of the waiter, on the master that stays: its
	// subscription is not disturbed.
	other := keyOn(t, cc, dst.Addr(), "staying")
	k, err := a.Acquire(ctx(t), key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := a.Acquire(ctx(t), other, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, b, key)
	got2 := acquireAsync(t, b, other)
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return st.Waiters == 1 }, "the waiter")
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), other); return st.Waiters == 1 }, "the other waiter")
	if n := len(inboxChannels(t, src)); n != 1 {
		t.Fatalf("%d sharded inbox channels on the source before the migration, want 1", n)
	}
	migrateSlot(t, src, dst, "dlock:{"+key+"}")
	// The new subscription waits for the Cluster's nodes to agree on the
	// slot's master (the third learns it by gossip), which a loaded machine
	// (make test's parallel pass) can slow past waitFor's 10s: no time is
	// promised, the release must wake the waiter once it is there.
	waitForWithin(t, 45*time.Second, func() bool { return len(inboxChannels(t, dst)) == 2 }, "the waiter to subscribe on the slot's new master")
	if n := len(inboxChannels(t, src)); n != 0 {
		t.Errorf("%d sharded inbox channels left on the source", n)
	}
	handoff(t, k, got, "the waiter after its slot migrated")
	handoff(t, k2, got2, "the waiter on the master that stayed")
}

// TestShardedFallback: a user whose ACL line predates sharded pub/sub (no
// SSUBSCRIBE, no SPUBLISH) still waits on a Cluster: the waiters fall back
// to classic pub/sub, and a node error says so once.
func TestShardedFallback(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	const pw = "sharded-fallback"
	line := strings.Replace(aclLine(t, ".", pw), " +spublish +ssubscribe", "", 1)
	if strings.Contains(line, "ssubscribe") {
		t.Fatalf("the ACL line of docs/operations.md has no \" +spublish +ssubscribe\" to take out: %s", line)
	}
	admin := cl.Servers[0].Client()
	defer admin.Close()
	runLine(t, admin, line)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "dlock", Password: pw})
	defer cc.Close()
	rec := newRecorder()
	a, b := newLocker(t, cc), newLocker(t, cc, dlock.WithHook(rec))
	waitThroughClassic(t, a, b, admin, rec)
}

// waitThroughClassic has b wait for two keys that a holds, on a Cluster of
// one master (admin), and checks that each release wakes it, and that b's
// hook (rec) was told once that its waiters use classic pub/sub.
func waitThroughClassic(t *testing.T, a, b *dlock.Locker, admin *redis.Client, rec *recorder) {
	t.Helper()
	for i := range 2 {
		key := fmt.Sprintf("classic%d", i)
		k, err := a.TryAcquire(ctx(t), key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := queued(t, b, admin, key, 1)
		handoff(t, k, got, "a waiter on classic pub/sub")
	}
	var said int
	for _, e := range rec.of(dlock.EventNodeError) {
		if strings.Contains(e.Err.Error(), "classic pub/sub") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("%d node errors say that the waiters use classic pub/sub, want 1: %v", said, rec.of(dlock.EventNodeError))
	}
}

// TestShardedDeadRegistrationStoodIn: on a Cluster, the registration of a
// sharded waiter whose process is gone (nothing listens on its channel) is
// woken by a release, and the live waiter after it, told too, stands in.
// (SPUBLISH's count is not taken as exact: the inbox may listen on a
// replica for a moment, see release.lua.)
func TestShardedDeadRegistrationStoodIn(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	cc := cl.Client()
	defer cc.Close()
	admin := cl.Servers[0].Client()
	defer admin.Close()
	holder := newLocker(t, cc)
	k, err := holder.TryAcquire(ctx(t), "dead", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	admin.ZAdd(ctx(t), "dlock:{dead}:waiters", redis.Z{Score: 1, Member: "gones:1:dead"})
	admin.HSet(ctx(t), "dlock:{dead}:wexp", "gones:1:dead", lease)
	got := queued(t, newLocker(t, cl.Client()), admin, "dead", 2)
	handoff(t, k, got, "the live waiter behind a dead sharded registration")
}

// TestShardedFallbackAfterConfirmed: a waiter registered through the
// sharded inbox of one master is still woken by its release once another
// master refuses SSUBSCRIBE (Cluster ACLs are per node) and the Locker
// falls back to classic pub/sub: its registration moves to a classic
// member.
func TestShardedFallbackAfterConfirmed(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 2)
	const pw = "sharded-fallback-later"
	line := aclLine(t, ".", pw)
	old := strings.Replace(line, " +spublish +ssubscribe", "", 1)
	a, b := cl.Servers[0].Client(), cl.Servers[1].Client()
	defer a.Close()
	defer b.Close()
	runLine(t, a, line)
	runLine(t, b, old)
	opts := &redis.ClusterOptions{Addrs: cl.Addrs(), Username: "dlock", Password: pw}
	hc, wc := redis.NewClusterClient(opts), redis.NewClusterClient(opts)
	defer hc.Close()
	defer wc.Close()
	holder, waiter := newLocker(t, hc), newLocker(t, wc)
	onA, onB := keyOn(t, hc, cl.Servers[0].Addr(), "first"), keyOn(t, hc, cl.Servers[1].Addr(), "second")
	ka, err := holder.TryAcquire(ctx(t), onA, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kb, err := holder.TryAcquire(ctx(t), onB, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	gotA := acquireAsync(t, waiter, onA)
	waitFor(t, func() bool {
		ms := a.ZRange(ctx(t), "dlock:{"+onA+"}:waiters", 0, -1).Val()
		return len(ms) == 1 && strings.Contains(ms[0], "s:")
	}, "the waiter registered through the sharded inbox")
	gotB := acquireAsync(t, waiter, onB)
	waitFor(t, func() bool { return b.ZCard(ctx(t), "dlock:{"+onB+"}:waiters").Val() == 1 }, "the waiter on the refusing master")
	waitFor(t, func() bool {
		ms := a.ZRange(ctx(t), "dlock:{"+onA+"}:waiters", 0, -1).Val()
		return len(ms) == 1 && !strings.Contains(ms[0], "s:")
	}, "the first waiter registered again with a classic member")
	handoff(t, ka, gotA, "the waiter first registered through the sharded inbox")
	handoff(t, kb, gotB, "the waiter on the refusing master")
}

// TestShardedRefusedReconnect: when the sharded inbox's connection breaks
// and the master refuses the new one (the user's password changed), the
// Locker backs off instead of dialling again at once.
func TestShardedRefusedReconnect(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	const pw = "sharded-reconnect"
	admin := cl.Servers[0].Client()
	defer admin.Close()
	runLine(t, admin, aclLine(t, ".", pw))
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "dlock", Password: pw})
	defer cc.Close()
	holder, waiter := newLocker(t, cl.Client()), newLocker(t, cc)
	k, err := holder.TryAcquire(ctx(t), "reconnect", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	go waiter.Acquire(c, "reconnect")
	waitFor(t, func() bool { return admin.ZCard(ctx(t), "dlock:{reconnect}:waiters").Val() == 1 }, "the waiter")
	if err := admin.Do(ctx(t), "ACL", "SETUSER", "dlock", "resetpass", ">another").Err(); err != nil {
		t.Fatal(err)
	}
	before := serverInfoInt(t, admin, "total_connections_received")
	if err := admin.Do(ctx(t), "CLIENT", "KILL", "USER", "dlock").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the window in which connections are counted
	if n := serverInfoInt(t, admin, "total_connections_received") - before; n > 100 {
		t.Errorf("%d connections in 2s after the password changed, want a backoff", n)
	}
}

// serverInfoInt returns an integer field of INFO.
func serverInfoInt(t *testing.T, c *redis.Client, field string) int64 {
	t.Helper()
	info, err := c.Info(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, ok := infoField(t, info, field)
	if !ok {
		t.Fatalf("no %s in INFO", field)
	}
	return n
}

// TestShardedFallbackNoShardedPubSub: on a Cluster whose servers have no
// sharded pub/sub (as Redis 6: SSUBSCRIBE and SPUBLISH renamed away, so
// that they answer "unknown command"), waiting works through classic
// pub/sub, and a node error says so once.
func TestShardedFallbackNoShardedPubSub(t *testing.T) {
	t.Parallel()
	cl, err := redisserver.NewClusterWith(1, 0, redisserver.WithArgs(
		"--rename-command", "SSUBSCRIBE", "ssubscribe-hidden", "--rename-command", "SPUBLISH", "spublish-hidden"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	cc := cl.Client()
	defer cc.Close()
	admin := cl.Servers[0].Client()
	defer admin.Close()
	if err := admin.Do(ctx(t), "SSUBSCRIBE", "x").Err(); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("SSUBSCRIBE on the test's servers: %v, want an unknown command", err)
	}
	rec := newRecorder()
	a, b := newLocker(t, cc), newLocker(t, cl.Client(), dlock.WithHook(rec))
	waitThroughClassic(t, a, b, admin, rec)
}

// TestShardedFailover: a replica takes over the master of a waiter's key
// while the waiter waits, the master killed or by CLUSTER FAILOVER (the old
// master, now a replica, drops the waiter's channel: a replica would accept
// it again); the waiter subscribes on the new master, and the release there
// wakes it.
func TestShardedFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		takeOver func(master, replica *dlocktest.Server) error
	}{
		{"master killed", func(master, _ *dlocktest.Server) error { return master.Kill() }},
		{"CLUSTER FAILOVER", func(_, replica *dlocktest.Server) error {
			c := replica.Client()
			defer c.Close()
			return c.Do(context.Background(), "CLUSTER", "FAILOVER").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failoverWhileWaiting(t, tc.takeOver)
		})
	}
}

// failoverWhileWaiting runs TestShardedFailover's case, on a Cluster of
// three masters (a majority of them elects the replica when one dies).
func failoverWhileWaiting(t *testing.T, takeOver func(master, replica *dlocktest.Server) error) {
	cl := dlocktest.StartClusterWithReplicas(t, 3, 1)
	cc := cl.Client()
	defer cc.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	master, replica := cl.Servers[0], cl.Replicas[0]
	key := keyOn(t, cc, master.Addr(), "failover")
	k, err := a.Acquire(ctx(t), key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, b, key)
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return st.Waiters == 1 }, "the waiter")
	rc := replica.Client()
	defer rc.Close()
	waitFor(t, func() bool {
		rc.Do(ctx(t), "READONLY")
		return rc.ZCard(ctx(t), "dlock:{"+key+"}:waiters").Val() == 1
	}, "the lock and its waiter to reach the replica")
	if err := takeOver(master, replica); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return isMaster(replica) }, "the replica to take over")
	waitFor(t, func() bool { return len(inboxChannels(t, replica)) == 1 }, "the waiter to subscribe on the new master")
	if err := settled(t, func() error { return k.Extend(ctx(t), time.Minute) }); err != nil {
		t.Fatalf("the lock after the failover: %v", err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatalf("Release after the failover: %v", err)
	}
	acquiredWithin(t, got, 5*time.Second, "the waiter was not woken by the release on the new master")
}

// earlierSubscribed waits until the classic channel of the sharded member's
// LOCKERID (see earlierInbox) has a subscriber on one of the Cluster's nodes,
// and returns the member.
func earlierSubscribed(t *testing.T, cl *dlocktest.Cluster, key string) string {
	t.Helper()
	admin := cl.Servers[0].Client()
	defer admin.Close()
	var member string
	waitFor(t, func() bool {
		for _, s := range cl.Servers {
			c := s.Client()
			ms := c.ZRange(ctx(t), "dlock:{"+key+"}:waiters", 0, 0).Val()
			c.Close()
			if len(ms) == 1 {
				member = ms[0]
				return true
			}
		}
		return false
	}, "the waiter for "+key+" registered")
	id, _, _ := strings.Cut(member, ":")
	if !strings.HasSuffix(id, "s") {
		t.Fatalf("the waiter's member %q is not a sharded one", member)
	}
	channel := "dlock:inbox:" + id
	waitFor(t, func() bool {
		n := int64(0)
		for _, s := range cl.Servers {
			c := s.Client()
			n += c.PubSubNumSub(ctx(t), channel).Val()[channel]
			c.Close()
		}
		return n > 0
	}, "the subscription of "+channel)
	return member
}

// TestShardedRollingUpgrade: during a rolling upgrade on a Cluster, a
// release by a process of v0.1.0 (its release.lua, kept in testdata as it
// shipped) wakes a waiter of this version at once. That release knows no
// sharded pub/sub: it PUBLISHes "w MEMBER" on the classic channel of the
// member's LOCKERID, which for a sharded waiter ends in "s".
func TestShardedRollingUpgrade(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/release-v0.1.0.lua")
	if err != nil {
		t.Fatal(err)
	}
	cl := dlocktest.StartCluster(t, 2)
	cc, wc := cl.Client(), cl.Client()
	defer cc.Close()
	defer wc.Close()
	key := keyOn(t, cc, cl.Servers[0].Addr(), "upgrade")
	lock := "dlock:{" + key + "}"
	// The holder: a process of v0.1.0, whose lock is its token.
	if err := cc.Set(ctx(t), lock, "old-token", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, newLocker(t, wc), key)
	earlierSubscribed(t, cl, key)
	start := time.Now()
	keys := []string{lock, lock + ":waiters", lock + ":wexp", lock + ":meta", lock + ":limit", lock + ":dead", lock + ":fence"}
	// As v0.1.0 sent them on a Cluster: expected, inbox prefix, reserve ms,
	// leaving, wake, metadata, listeners (not exact on a Cluster), bury
	// ms, retention ms.
	released, err := cc.Eval(ctx(t), string(src), keys, "old-token", "dlock:inbox:", 100, "", "1", "0", "0", "0", 86400000).Int()
	if err != nil || released != 1 {
		t.Fatalf("v0.1.0's release: %v, %v", released, err)
	}
	at := acquiredWithin(t, got, 10*time.Second, "the waiter was not woken by v0.1.0's release within 10s (its holder's TTL was a minute)")
	if el := at.Sub(start); el > time.Second {
		t.Errorf("the waiter took %s to acquire after v0.1.0's release; it should be woken by it", el)
	}
}

// TestShardedReleaserWithoutSPUBLISH: a holder whose user may not SPUBLISH
// (an ACL line made for v0.1.0) still wakes a sharded waiter at once: its
// release's refused SPUBLISH is followed by a PUBLISH on the classic
// channel that the waiter's Locker also listens on.
func TestShardedReleaserWithoutSPUBLISH(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	const pw = "no-spublish"
	line := aclLine(t, ".", pw)
	old := strings.Replace(strings.Replace(line, " +spublish", "", 1), "SETUSER dlock ", "SETUSER old ", 1)
	if old == line {
		t.Fatalf("the ACL line of docs/operations.md has no \" +spublish\" to take out: %s", line)
	}
	admin := cl.Servers[0].Client()
	defer admin.Close()
	runLine(t, admin, line)
	runLine(t, admin, old)
	hc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "old", Password: pw})
	wc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "dlock", Password: pw})
	defer hc.Close()
	defer wc.Close()
	k, err := newLocker(t, hc).TryAcquire(ctx(t), "nospublish", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, newLocker(t, wc), "nospublish")
	earlierSubscribed(t, cl, "nospublish")
	handoff(t, k, got, "a sharded waiter, released by a user without SPUBLISH")
	if n := aclLog(t, cl.Servers[0].Addr()); len(n) == 0 {
		t.Error("the holder's SPUBLISH was not refused: the test tests nothing")
	}
}

// TestShardedEarlierRefused: a user without SUBSCRIBE (only the classic
// subscription for releases of earlier versions needs it on a Cluster)
// waits as before, woken by this version's releases; the refusal is told
// once, as a node error that is not ErrMisconfigured.
func TestShardedEarlierRefused(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	const pw = "no-subscribe"
	line := strings.Replace(aclLine(t, ".", pw), " +subscribe", "", 1)
	admin := cl.Servers[0].Client()
	defer admin.Close()
	runLine(t, admin, line)
	opts := &redis.ClusterOptions{Addrs: cl.Addrs(), Username: "dlock", Password: pw}
	hc, wc := redis.NewClusterClient(opts), redis.NewClusterClient(opts)
	defer hc.Close()
	defer wc.Close()
	rec := newRecorder()
	waiter := newLocker(t, wc, dlock.WithHook(rec))
	k, err := newLocker(t, hc).TryAcquire(ctx(t), "nosubscribe", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := queued(t, waiter, admin, "nosubscribe", 1)
	waitFor(t, func() bool { return len(rec.of(dlock.EventNodeError)) > 0 }, "the refusal's node error")
	handoff(t, k, got, "a sharded waiter whose user may not SUBSCRIBE")
	for _, e := range rec.of(dlock.EventNodeError) {
		if errors.Is(e.Err, dlock.ErrMisconfigured) || !strings.Contains(e.Err.Error(), "v0.1.0") {
			t.Errorf("node error %v: want one that says what is lost, not ErrMisconfigured", e.Err)
		}
	}
}

// TestReleaseWithoutChannel: a holder whose user may not publish on the
// waiters' channels (docs/operations.md: without the channel a user can
// TryAcquire) releases a key that another user's waiter waits for. The
// release is whole and returns nil (a refused PUBLISH, after the script
// has written, must not fail it half-way); the waiter, told by nobody,
// takes the lock when the TTL it saw runs out.
func TestReleaseWithoutChannel(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	const pw = "no-channel"
	line := aclLine(t, ".", pw)
	runLine(t, admin, line)
	runLine(t, admin, strings.Replace(strings.Replace(line, " &dlock:inbox:*", "", 1), "SETUSER dlock ", "SETUSER nochan ", 1))
	hc := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "nochan", Password: pw})
	wc := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "dlock", Password: pw})
	defer hc.Close()
	defer wc.Close()
	k, err := newLocker(t, hc).TryAcquire(ctx(t), "nochan", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := queued(t, newLocker(t, wc), admin, "nochan", 1)
	if err := k.Release(ctx(t)); err != nil {
		t.Fatalf("Release by a user without the channel: %v, want nil", err)
	}
	if n := admin.Exists(ctx(t), "dlock:{nochan}").Val(); n != 0 {
		t.Error("the lock is still there after its Release")
	}
	acquiredWithin(t, got, 10*time.Second, "the waiter did not take the lock within 10s of a release it could not hear (TTL 2s)")
}

// TestShardedFrozenFailover: the master of a waiter's key is frozen
// (SIGSTOP: its connections stay open and silent, as a hung or cut-off
// master's) and its replica takes over. The waiter's sharded subscription
// finds its connection silent (the health check), subscribes the slot where
// the Cluster now serves it, and the release there wakes the waiter (the
// lock's TTL is two minutes: only the release can wake it in time). The
// test also measures, on another lock of that master (TTL 1m, replicated,
// which survives), how long its Extend fails with ErrUnavailable (or waits
// for a renewal under way) after the replica took over
// (docs/reliability.md). (The two locks apart: the failed Extends queue a
// renewal, and a renewal answered after Release sent its command has the
// cleaner release the key too, which can overtake Release's own command;
// the waited-for lock is not renewed before its release.)
func TestShardedFrozenFailover(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartClusterWithReplicas(t, 3, 1)
	cc := cl.Client()
	defer cc.Close()
	a, b := newLocker(t, cc), newLocker(t, cl.Client())
	master, replica := cl.Servers[0], cl.Replicas[0]
	key, other := keyOn(t, cc, master.Addr(), "frozen"), keyOn(t, cc, master.Addr(), "extended")
	k, err := a.Acquire(ctx(t), key, dlock.WithTTL(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	m, err := a.Acquire(ctx(t), other, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		// Longer than ctx(t): the failover and its detection come first.
		k, err := b.Acquire(ctxTimeout(t, 90*time.Second), key)
		if err != nil {
			t.Error(err)
		}
		got <- k
	}()
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), key); return st.Waiters == 1 }, "the waiter")
	rc := replica.Client()
	defer rc.Close()
	waitFor(t, func() bool {
		rc.Do(ctx(t), "READONLY")
		return rc.ZCard(ctx(t), "dlock:{"+key+"}:waiters").Val() == 1 && rc.Exists(ctx(t), "dlock:{"+other+"}").Val() == 1
	}, "the locks and the waiter to reach the replica")
	frozen := time.Now()
	freeze(t, master)
	waitFor(t, func() bool { return isMaster(replica) }, "the replica to take over")
	promoted := time.Now()
	extended := make(chan error, 1)
	var extendedAt time.Time
	go func() {
		var err error
		extendedAt, err = extendUnavailable(m, 40*time.Second)
		extended <- err
	}()
	waitWithin(t, 40*time.Second, func() bool { return len(inboxChannels(t, replica)) == 1 }, "the waiter to subscribe on the new master")
	moved := time.Now()
	if err := <-extended; err != nil {
		t.Fatalf("Extend after the failover: %v", err)
	}
	for _, l := range []*dlock.Lock{k, m} {
		select {
		case <-l.Lost():
			t.Fatalf("the lock %s (replicated) was lost in the failover", l.Key())
		default:
		}
	}
	t.Logf("the replica took over %s after the freeze; the waiter subscribed there %s after the freeze; the holder's first Extend to succeed returned %s after the replica took over (those before failed with ErrUnavailable)",
		promoted.Sub(frozen).Round(10*time.Millisecond), moved.Sub(frozen).Round(10*time.Millisecond), extendedAt.Sub(promoted).Round(10*time.Millisecond))
	if err := k.Release(ctx(t)); err != nil {
		t.Fatalf("Release after the failover: %v", err)
	}
	acquiredWithin(t, got, 5*time.Second, "the waiter was not woken by the release on the new master")
}

// extendUnavailable extends k until Extend returns something else than
// ErrUnavailable (for up to d), and returns when it did and what it returned.
func extendUnavailable(k *dlock.Lock, d time.Duration) (time.Time, error) {
	deadline := time.Now().Add(d)
	for {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := k.Extend(c, time.Minute)
		cancel()
		if !errors.Is(err, dlock.ErrUnavailable) || time.Now().After(deadline) {
			return time.Now(), err
		}
		time.Sleep(50 * time.Millisecond) // the Cluster client reloads its map meanwhile
	}
}

// waitWithin is waitFor with a bound of d.
func waitWithin(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shardSubscriberIDs returns the ids of the connections to s subscribed to
// sharded channels.
func shardSubscriberIDs(t *testing.T, s *dlocktest.Server) []string {
	t.Helper()
	c := s.Client()
	defer c.Close()
	list, err := c.ClientList(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id string
		sub := false
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "ssub="); ok && v != "0" {
				sub = true
			}
		}
		if sub {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestShardedFrozenMasterResumes: a master frozen long enough for the
// waiter's health check to find its connection silent, then thawed with no
// failover (it has no replica), still serves the waiter's slot: the waiter
// subscribes there again on a new connection (once the silent master's 5s
// apart are over), and the release wakes it.
func TestShardedFrozenMasterResumes(t *testing.T) {
	t.Parallel()
	cl := dlocktest.StartCluster(t, 1)
	cc := cl.Client()
	defer cc.Close()
	master := cl.Servers[0]
	k, err := newLocker(t, cc).TryAcquire(ctx(t), "resumes", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	admin := master.Client()
	defer admin.Close()
	got := queued(t, newLocker(t, cl.Client()), admin, "resumes", 1)
	before := shardSubscriberIDs(t, master)
	if len(before) != 1 {
		t.Fatalf("%d connections subscribed to sharded channels, want 1", len(before))
	}
	thaw := freeze(t, master)
	// The fault: longer than the health check's 5s of silence and 3s for
	// the PING's answer.
	time.Sleep(10 * time.Second)
	thaw()
	waitWithin(t, 20*time.Second, func() bool {
		ids := shardSubscriberIDs(t, master)
		return len(ids) == 1 && ids[0] != before[0] && len(inboxChannels(t, master)) == 1
	}, "the waiter to subscribe again, on a new connection")
	handoff(t, k, got, "the waiter after its master resumed")
}
