package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// holdMany acquires n locks named prefix0..prefix(n-1) with ttl.
func holdMany(t *testing.T, l *dlock.Locker, prefix string, n int, ttl time.Duration) []*dlock.Lock {
	t.Helper()
	locks := make([]*dlock.Lock, n)
	for i := range locks {
		k, err := l.Acquire(ctx(t), prefix+strconv.Itoa(i), dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = k
	}
	return locks
}

// perLockRenewals measures the script calls the servers run per held lock
// and renewal interval (ttl/3) over intervals intervals.
func perLockRenewals(t *testing.T, admins []*redis.Client, locks int, ttl time.Duration, intervals int) float64 {
	t.Helper()
	for _, c := range admins {
		c.ConfigResetStat(ctx(t))
	}
	time.Sleep(time.Duration(intervals) * ttl / 3) // a measured window
	var calls int64
	for _, c := range admins {
		calls += scriptCalls(t, c)
	}
	per := float64(calls) / float64(locks) / float64(intervals)
	t.Logf("%d script calls for %d locks over %d renewal intervals: %.3f per lock per interval", calls, locks, intervals, per)
	return per
}

// checkHeld fails the test if any lock has lost its key, or reported a
// loss.
func checkHeld(t *testing.T, c redis.UniversalClient, locks []*dlock.Lock) {
	t.Helper()
	for _, k := range locks {
		select {
		case <-k.Lost():
			t.Errorf("%s lost", k.Key())
			continue
		default:
		}
		if v := c.Get(ctx(t), "dlock:{"+k.Key()+"}").Val(); v != k.Token() {
			t.Errorf("%s: key holds %q, want the token", k.Key(), v)
		}
		// The tests check after more than a TTL of renewals: a key
		// that was not renewed is gone.
		if p := c.PTTL(ctx(t), "dlock:{"+k.Key()+"}").Val(); p <= 0 {
			t.Errorf("%s: PTTL %s: not renewed", k.Key(), p)
		}
	}
}

// TestRenewalsBatched: a Locker that holds many locks, acquired over a
// whole renewal interval, renews them together, one script call for many
// (≤ 0.1 per lock per renewal interval), and each one stays held.
func TestRenewalsBatched(t *testing.T) {
	t.Parallel() // mostly a measured window: beside the other waiting tests
	l, _, c := single(t)
	const n, ttl = 200, 1200 * time.Millisecond
	var locks []*dlock.Lock
	for i := range 10 {
		locks = append(locks, holdMany(t, l, "many-"+strconv.Itoa(i)+"-", n/10, ttl)...)
		time.Sleep(ttl / 30) // acquired over ttl/3
	}
	time.Sleep(ttl) // the renewals of the first interval bring them together
	if per := perLockRenewals(t, []*redis.Client{c}, n, ttl, 4); per > 0.1 {
		t.Errorf("%.3f script calls per lock per renewal interval, want ≤ 0.1", per)
	}
	checkHeld(t, c, locks)
}

// TestRenewalsBatchOneRefused: in a batch, a lock whose key another owner
// took is lost, and one whose fence counter holds another type, or whose
// metadata key does (a command of the script fails), fails its renewal,
// without touching the others, which stay held.
func TestRenewalsBatchOneRefused(t *testing.T) {
	h := &renewFailures{}
	l, _, c := single(t, dlock.WithHook(h))
	const n, ttl = 20, 1200 * time.Millisecond
	locks := holdMany(t, l, "batch-", n, ttl)
	meta, err := l.Acquire(ctx(t), "batch-meta", dlock.WithTTL(ttl), dlock.WithMetadata("m"))
	if err != nil {
		t.Fatal(err)
	}
	locks = append(locks, meta)
	time.Sleep(ttl / 2)
	taken, broken := locks[3], locks[7]
	if err := c.Set(ctx(t), "dlock:{batch-meta}:meta", "a string", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx(t), "dlock:{"+taken.Key()+"}", "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx(t), "dlock:{"+broken.Key()+"}:fence")
	if err := c.HSet(ctx(t), "dlock:{"+broken.Key()+"}:fence", "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-taken.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock whose key was taken is not lost")
	}
	waitFor(t, func() bool { return h.lostCause(taken.Key()) != nil }, "the taken lock's EventLost")
	if err := h.lostCause(taken.Key()); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the taken lock was lost with %v, want ErrLockLost", err)
	}
	waitFor(t, func() bool { return h.count(broken.Key()) > 0 }, "the broken lock's renewal failure")
	waitFor(t, func() bool { return h.count(meta.Key()) > 0 }, "the renewal failure of the lock with broken metadata")
	// Two more intervals: the others are renewed all along.
	time.Sleep(2 * ttl / 3)
	var others []*dlock.Lock
	for _, k := range locks {
		if k != taken && k != broken && k != meta {
			others = append(others, k)
		}
	}
	checkHeld(t, c, others)
	for _, k := range others {
		if h.count(k.Key()) > 0 {
			t.Errorf("%s: a renewal failed", k.Key())
		}
	}
}

// renewFailures counts EventRenewFailed per key, and records EventLost's
// causes.
type renewFailures struct {
	mu   sync.Mutex
	n    map[string]int
	lost map[string]error
}

func (h *renewFailures) Start(ctx context.Context, _ string) context.Context { return ctx }

func (h *renewFailures) Event(_ context.Context, e dlock.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n, h.lost = make(map[string]int), make(map[string]error)
	}
	switch e.Kind {
	case dlock.EventRenewFailed:
		h.n[e.Key]++
	case dlock.EventLost:
		h.lost[e.Key] = e.Err
	}
}

func (h *renewFailures) lostCause(key string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost[key]
}

func (h *renewFailures) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key]
}

// TestRenewalsBatchFrozen: Redis, 50ms away each way, frozen while a
// Locker holds many locks, renewed in batches: each lock's Lost fires
// before its key can have expired, counted from the send time of the last
// command that confirmed that lock and the 50ms it takes to reach Redis
// (a validity counted from the batch's answer would end 100ms late).
func TestRenewalsBatchFrozen(t *testing.T) {
	s, p, c := behindProxy(t)
	rec := &confirmations{at: make(map[string]time.Time)}
	c.AddHook(rec)
	l := dlock.New(c)
	defer l.Close()
	const n, ttl = 50, 1500 * time.Millisecond
	locks := make([]*dlock.Lock, n)
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := l.Acquire(ctx(t), "frozen-"+strconv.Itoa(i), dlock.WithTTL(ttl))
			if err != nil {
				t.Error(err)
			}
			locks[i] = k
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	waitFor(t, func() bool { return rec.batches() >= 2 }, "two batch renewals")
	// Then every lock confirmed again through the delay.
	// A round trip of 2·oneWay, well within the node timeout (TTL/5 = 300ms)
	// also on a loaded machine.
	const oneWay = 50 * time.Millisecond
	delayed := time.Now()
	p.SetLatency(oneWay)
	waitFor(t, func() bool { return rec.allAfter(delayed, locks) }, "a renewal of every lock 50ms away")
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer s.Thaw()
	lostAt := make([]time.Time, len(locks))
	watchLost(locks, 10*time.Second, func(i int) { lostAt[i] = time.Now() })()
	for i, k := range locks {
		if lostAt[i].IsZero() {
			t.Errorf("%s: Lost did not fire while Redis was frozen", k.Key())
			continue
		}
		// The earliest the key can expire: the send time of the last
		// command that confirmed the lock, plus the proxy's delay on the
		// way there, plus the TTL.
		if expiry := rec.last("dlock:{" + k.Key() + "}").Add(oneWay + ttl); !lostAt[i].Before(expiry) {
			t.Errorf("%s: Lost at %s, after the key could have expired (%s)", k.Key(), lostAt[i].Format(time.StampMicro), expiry.Format(time.StampMicro))
		}
	}
}

// watchLost watches each lock's Lost on a goroutine of its own (waiting for
// them in turn would see a lock's Lost only after the one before it) for
// at most d, and calls lost(i) there once lock i's closes; the returned
// function waits for every watcher.
func watchLost(locks []*dlock.Lock, d time.Duration, lost func(i int)) (wait func()) {
	var wg sync.WaitGroup
	for i, k := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-k.Lost():
				lost(i)
			case <-time.After(d):
			}
		}()
	}
	return wg.Wait
}

// confirmations is a go-redis hook that records, per lock key, when the
// last script call that confirmed it (acquire.lua's grant, a group of
// extend.lua that answered 1) was sent; and counts the calls that renewed
// several locks at once.
type confirmations struct {
	mu   sync.Mutex
	at   map[string]time.Time
	many int
}

func (r *confirmations) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook records the calls of pipelines too: the Locker
// pipelines the concurrent commands to a node.
func (r *confirmations) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Err() == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
				r.record(sent, cmd)
			}
		}
		return err
	}
}
func (r *confirmations) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			r.record(sent, cmd)
		}
		return err
	}
}

func (r *confirmations) record(sent time.Time, cmd redis.Cmder) {
	v, ok := cmd.(*redis.Cmd)
	if !ok {
		return
	}
	args := cmd.Args()
	nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
	reply, _ := v.Val().([]any)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case (isScript(args, script.Acquire) || isScript(args, script.Semaphore) || isScript(args, script.Shared)) && nkeys == 8 && len(reply) == 2 && reply[0] == int64(1): // acquire.lua's grant
		r.at[fmt.Sprint(args[3+keys.LockKey])] = sent
	case isScript(args, script.Lock) && len(reply) == 2 && reply[0] == int64(1): // lock.lua's
		r.at[fmt.Sprint(args[3])] = sent
	default:
		_, locks := extendGroups(args)
		if len(locks) == 0 || len(locks) != len(reply) {
			return
		}
		if len(reply) > 1 {
			r.many++
		}
		for g, x := range reply {
			if x == int64(1) {
				r.at[locks[g]] = sent
			}
		}
	}
}

// isScript reports whether args are the command of s (EVALSHA or EVAL).
func isScript(args []any, s *script.Script) bool {
	return len(args) > 2 && (fmt.Sprint(args[1]) == s.SHA() || fmt.Sprint(args[1]) == s.Source())
}

// extendGroups reads an extend.lua or renew.lua command (EVALSHA or EVAL
// of it): the width of its groups ("5" for extend.lua, "2" for renew.lua)
// and each group's lock key, in order; nothing for another command.
func extendGroups(args []any) (width string, locks []string) {
	switch {
	case isScript(args, script.Extend):
		width = "5"
	case isScript(args, script.Renew):
		width = "2"
	default:
		return "", nil
	}
	nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
	w, _ := strconv.Atoi(width)
	for g := 0; g < nkeys/w && 3+w*g < len(args); g++ {
		locks = append(locks, fmt.Sprint(args[3+w*g]))
	}
	return width, locks
}

func (r *confirmations) last(key string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[key]
}

// allAfter reports whether every lock of locks was confirmed by a command
// sent after t.
func (r *confirmations) allAfter(t time.Time, locks []*dlock.Lock) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range locks {
		if !r.at["dlock:{"+k.Key()+"}"].After(t) {
			return false
		}
	}
	return true
}

func (r *confirmations) batches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.many
}

// TestRenewalsBatchRedlockFrozenNode: over a Redlock of 3 with one node
// frozen, batched renewals keep every lock (a quorum of 2 confirms each),
// one call per node for many locks.
func TestRenewalsBatchRedlockFrozenNode(t *testing.T) {
	t.Parallel() // mostly a measured window: beside the other waiting tests
	servers := dlocktest.StartN(t, 3)
	clients := make([]redis.UniversalClient, len(servers))
	admins := make([]*redis.Client, 2)
	for i, s := range servers {
		c := s.Client()
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		if i < 2 {
			admins[i] = c
		}
	}
	l, err := dlock.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const n, ttl = 60, 1500 * time.Millisecond
	locks := holdMany(t, l, "redlock-", n, ttl)
	if err := servers[2].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servers[2].Thaw() })
	time.Sleep(ttl / 2)
	// Each live node runs one call per batch: per lock and interval, the
	// two count twice what one node would.
	if per := perLockRenewals(t, admins, n, ttl, 3); per > 0.2 {
		t.Errorf("%.3f script calls per lock per renewal interval on the two live nodes, want ≤ 0.2", per)
	}
	for _, c := range admins {
		checkHeld(t, c, locks)
	}
}

// TestRenewalsBatchCluster: on a Cluster, the locks of one slot are renewed
// together, and keys.Slot (by which they are grouped) is the slot the
// servers use.
func TestRenewalsBatchCluster(t *testing.T) {
	t.Parallel() // mostly a measured window: beside the other waiting tests
	cl := dlocktest.StartCluster(t, 3)
	cc := cl.Client()
	t.Cleanup(func() { cc.Close() })
	for _, name := range []string{"dlock:{a}", "dlock:{\x00}x}", "x{y}z", "{}", "plain", "dlock:{acct-42}:fence"} {
		if want := cc.ClusterKeySlot(ctx(t), name).Val(); int64(keys.Slot(name)) != want {
			t.Errorf("keys.Slot(%q) = %d, the server says %d", name, keys.Slot(name), want)
		}
	}
	// Keys of one slot: names whose hash tags collide.
	target := keys.Slot("dlock:{same-0}")
	var names []string
	for i := 0; len(names) < 40; i++ {
		if name := "same-" + strconv.Itoa(i); keys.Slot("dlock:{"+name+"}") == target {
			names = append(names, name)
		}
	}
	l := dlock.New(cc)
	t.Cleanup(func() { l.Close() })
	const ttl = 1500 * time.Millisecond
	var locks []*dlock.Lock
	for _, name := range names {
		k, err := l.Acquire(ctx(t), name, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, k)
	}
	time.Sleep(ttl / 2)
	admins := make([]*redis.Client, len(cl.Servers))
	for i, s := range cl.Servers {
		admins[i] = s.Client()
		t.Cleanup(func() { admins[i].Close() })
	}
	if per := perLockRenewals(t, admins, len(locks), ttl, 3); per > 0.1 {
		t.Errorf("%.3f script calls per lock per renewal interval, want ≤ 0.1", per)
	}
	checkHeld(t, cc, locks)
}

// TestLostEachAtItsOwnInstant: the lost-lock signals of one Locker's locks,
// kept by the Locker's one timer, each come at their own lock's instant,
// before its key can expire and not much earlier: fixed leases, whose
// signal only that timer gives, and auto-renewed locks with Redis frozen.
// When a lock is reported lost, the locks of longer TTLs confirmed no
// earlier are still held. (A lock released meanwhile leaves the timer's
// heap among the others.)
func TestLostEachAtItsOwnInstant(t *testing.T) {
	t.Parallel() // mostly waits for the validities to run out
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	rec := &confirmations{at: make(map[string]time.Time)}
	c.AddHook(rec)
	l := dlock.New(c)
	defer l.Close()
	// Auto-renewed at even indices, fixed leases at odd ones.
	ttls := []time.Duration{4 * time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond, 1500 * time.Millisecond, 1200 * time.Millisecond}
	locks := make([]*dlock.Lock, len(ttls))
	var renewing []*dlock.Lock
	acquired := time.Now()
	for i, ttl := range ttls {
		k, err := l.Acquire(ctx(t), "own-instant-"+strconv.Itoa(i), dlock.WithTTL(ttl), dlock.WithAutoRenew(i%2 == 0))
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = k
		if i%2 == 0 {
			renewing = append(renewing, k)
		}
	}
	gone, err := l.Acquire(ctx(t), "own-instant-released", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		at         time.Time
		stillValid []bool // whether each other lock was still held then
	}
	seenAt := make([]seen, len(locks))
	wait := watchLost(locks, 15*time.Second, func(i int) {
		now := time.Now()
		sn := seen{at: now, stillValid: make([]bool, len(locks))}
		for j, o := range locks {
			select {
			case <-o.Lost():
			default:
				sn.stillValid[j] = o.ValidUntil().After(now)
			}
		}
		seenAt[i] = sn
	})
	// Every auto-renewed lock renewed once, so that its validity counts
	// from a renewal; then Redis freezes.
	waitFor(t, func() bool { return rec.allAfter(acquired.Add(time.Millisecond), renewing) }, "a renewal of every auto-renewed lock")
	if err := gone.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer s.Thaw()
	wait()
	for i, k := range locks {
		sn := seenAt[i]
		if sn.at.IsZero() {
			t.Errorf("%s (TTL %s): Lost did not fire", k.Key(), ttls[i])
			continue
		}
		last := rec.last("dlock:{" + k.Key() + "}")
		if expiry := last.Add(ttls[i]); !sn.at.Before(expiry) {
			t.Errorf("%s (TTL %s): Lost at %s, after the key could have expired (%s)", k.Key(), ttls[i], sn.at.Format(time.StampMicro), expiry.Format(time.StampMicro))
		}
		// Not much before its own instant: its validity less the drift
		// and the margin (at most about a tenth of the TTL together).
		if early := last.Add(ttls[i] * 8 / 10); sn.at.Before(early) {
			t.Errorf("%s (TTL %s): Lost %s after its last confirmation: too early", k.Key(), ttls[i], sn.at.Sub(last))
		}
		for j := range locks {
			// A lock of a longer TTL, confirmed no earlier, was held when
			// this one was lost.
			if ttls[j] > ttls[i] && !rec.last("dlock:{"+locks[j].Key()+"}").Before(last) && !sn.stillValid[j] {
				t.Errorf("%s (TTL %s) was no longer held when %s (TTL %s) was lost", locks[j].Key(), ttls[j], k.Key(), ttls[i])
			}
		}
		t.Logf("%s (TTL %s, auto-renewed %v): lost %s after its last confirmation", k.Key(), ttls[i], i%2 == 0, sn.at.Sub(last))
	}
}

// extendWidths is a go-redis hook that records, per lock key, the widths
// (keys per group: extend.lua's ARGV[4]) of the extend.lua calls that
// renewed it.
type extendWidths struct {
	mu sync.Mutex
	w  map[string][]string
}

func (r *extendWidths) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *extendWidths) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}
func (r *extendWidths) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *extendWidths) record(cmd redis.Cmder) {
	width, locks := extendGroups(cmd.Args())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range locks {
		r.w[key] = append(r.w[key], width)
	}
}

func (r *extendWidths) of(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.w[key])
}

// TestRenewalsShortGroups: a lock without metadata is renewed with
// renew.lua (two keys and two arguments), a lock with metadata, a
// semaphore's permit and a shared hold with extend.lua's groups of five,
// and each keeps its key, metadata and counter.
func TestRenewalsShortGroups(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	rec := &extendWidths{w: map[string][]string{}}
	c.AddHook(rec)
	l := dlock.New(c)
	defer l.Close()
	const ttl = 600 * time.Millisecond
	plain, err := l.Acquire(ctx(t), "short-plain", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	meta, err := l.Acquire(ctx(t), "short-meta", dlock.WithTTL(ttl), dlock.WithMetadata("m"))
	if err != nil {
		t.Fatal(err)
	}
	sem, err := l.Acquire(ctx(t), "short-sem", dlock.WithTTL(ttl), dlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := l.Acquire(ctx(t), "short-shared", dlock.WithTTL(ttl), dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	want := map[*dlock.Lock]string{plain: "2", meta: "5", sem: "5", shared: "5"}
	waitFor(t, func() bool {
		for k := range want {
			if len(rec.of("dlock:{"+k.Key()+"}")) < 3 {
				return false
			}
		}
		return true
	}, "three renewals of every lock")
	for k, w := range want {
		for _, got := range rec.of("dlock:{" + k.Key() + "}") {
			if got != w {
				t.Errorf("%s renewed in groups of %s keys, want %s", k.Key(), got, w)
			}
		}
		select {
		case <-k.Lost():
			t.Errorf("%s lost", k.Key())
		default:
		}
		if p := c.PTTL(ctx(t), "dlock:{"+k.Key()+"}:fence").Val(); p <= 0 {
			t.Errorf("%s: the fence counter's PTTL is %s", k.Key(), p)
		}
	}
	if m := c.HGet(ctx(t), "dlock:{short-meta}:meta", meta.Token()).Val(); m != "m" {
		t.Errorf("the metadata after renewals: %q", m)
	}
	checkHeld(t, c, []*dlock.Lock{plain, meta})
}

// TestExtendShortGroupKeys: renew.lua reads and writes only its two keys:
// a user allowed only the lock's key and its fence counter renews with it
// (and keeps the counter), while a whole group with metadata is refused
// there; and renew.lua finds a semaphore's sorted set not its own (0),
// writing nothing.
func TestExtendShortGroupKeys(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	nm := keys.Make("dlock:", "acl-short")
	if err := admin.Do(ctx(t), "ACL", "SETUSER", "narrow", "on", ">pw", "+@all",
		"resetkeys", "~"+nm.Lock(), "~"+nm.Fence()).Err(); err != nil {
		t.Fatal(err)
	}
	narrow := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "narrow", Password: "pw"})
	defer narrow.Close()
	if err := admin.Set(ctx(t), nm.Lock(), "tok", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	c := script.NewExtendCall(1, true, "60000", "0", "60000")
	c.AddShort(nm.ExtendKeysShort(), "tok", "5")
	v, err := c.Script().Run(ctx(t), quorum.NewConn(narrow), c.Command())
	if a, _ := v.([]any); err != nil || len(a) != 1 || a[0] != int64(1) {
		t.Fatalf("a short group by a user allowed only its two keys: %v, %v", v, err)
	}
	if p := admin.PTTL(ctx(t), nm.Lock()).Val(); p < 50*time.Second {
		t.Errorf("the lock's PTTL after the short group: %s", p)
	}
	if f := admin.Get(ctx(t), nm.Fence()).Val(); f == "" {
		t.Error("the short group did not keep the fence counter")
	}
	w := script.NewExtendCall(1, false, "60000", "0", "60000")
	w.Add(nm.ExtendKeys(), "tok", "meta", "1", "5")
	v, err = w.Script().Run(ctx(t), quorum.NewConn(narrow), w.Command())
	if a, _ := v.([]any); err == nil && len(a) == 1 && a[0] == int64(1) {
		t.Error("a whole group with metadata succeeded for a user without the metadata key: the ACL check of this test is void")
	}

	sm := keys.Make("dlock:", "sem-short")
	admin.ZAdd(ctx(t), sm.Lock(), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "tok"})
	admin.Set(ctx(t), sm.Limit(), "3", 0)
	c = script.NewExtendCall(1, true, "60000", "0", "60000")
	c.AddShort(sm.ExtendKeysShort(), "tok", "5")
	v, err = c.Script().Run(ctx(t), quorum.NewConn(admin), c.Command())
	if a, _ := v.([]any); err != nil || len(a) != 1 || a[0] != int64(0) {
		t.Errorf("a short group on a semaphore: %v, %v, want [0]", v, err)
	}
	if admin.Exists(ctx(t), sm.Fence()).Val() != 0 {
		t.Error("a short group on a semaphore wrote the fence counter")
	}
}
