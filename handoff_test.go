package dlock_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// handoffTopologies make two Lockers on one deployment, each on clients of
// its own (two processes): one Redis, a 5-node Redlock, a 3-master
// Cluster.
var handoffTopologies = []struct {
	name string
	make func(t *testing.T) (first, second *dlock.Locker)
}{
	{"single", func(t *testing.T) (*dlock.Locker, *dlock.Locker) {
		s := dlocktest.Start(t)
		return newLocker(t, s.Client()), newLocker(t, s.Client())
	}},
	{"redlock", func(t *testing.T) (*dlock.Locker, *dlock.Locker) {
		servers := dlocktest.StartN(t, 5)
		ls := lockers(t, 2, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
		return ls[0], ls[1]
	}},
	{"cluster", func(t *testing.T) (*dlock.Locker, *dlock.Locker) {
		c := dlocktest.StartCluster(t, 3)
		return newLocker(t, c.Client()), newLocker(t, c.Client())
	}},
}

// handoffShapes are the shapes a hold can have, by their options.
var handoffShapes = []struct {
	name string
	opts []dlock.LockOption
}{
	{"lock", nil},
	{"lock with metadata", []dlock.LockOption{dlock.WithMetadata("job 7")}},
	{"permit", []dlock.LockOption{dlock.WithLimit(2)}},
	{"shared", []dlock.LockOption{dlock.WithShared()}},
}

// TestDetachAdopt: a hold detached in one Locker and adopted in another
// keeps its token and fence; the adopted lock renews past the first TTL,
// the first Locker's Close and the detached lock's Release leave it held,
// and the adopter's Lost fires when the key is force-released.
func TestDetachAdopt(t *testing.T) {
	t.Parallel() // mostly waits: beside TestHistory and the others that do
	for _, topo := range handoffTopologies {
		t.Run(topo.name, func(t *testing.T) {
			for _, shape := range handoffShapes {
				t.Run(shape.name, func(t *testing.T) {
					first, second := topo.make(t)
					testDetachAdopt(t, first, second, shape.opts)
				})
			}
		})
	}
}

func testDetachAdopt(t *testing.T, first, second *dlock.Locker, shapeOpts []dlock.LockOption) {
	const ttl = 600 * time.Millisecond
	key := "handoff"
	k1, err := first.TryAcquire(ctx(t), key, append([]dlock.LockOption{dlock.WithTTL(ttl)}, shapeOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h := k1.Detach()
	if h.Key != key || h.Token != k1.Token() || h.Fence != k1.Fence() || h.TTL != ttl {
		t.Fatalf("Detach: %+v, lock %s fence %d", h, k1.Token(), k1.Fence())
	}
	select {
	case <-k1.Lost():
	default:
		t.Fatal("Lost is open after Detach")
	}
	if err := k1.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "detached") {
		t.Fatalf("Release of a detached lock: %v", err)
	}
	if err := k1.Extend(ctx(t), ttl); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend of a detached lock: %v", err)
	}
	if h2 := k1.Detach(); h2 != h {
		t.Fatalf("second Detach: %+v, want %+v", h2, h)
	}
	// The first process goes away: its Close leaves the hold alone.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := second.Status(ctx(t), key); err != nil || !st.Held {
		t.Fatalf("after Detach, Release and Close: Status %+v, %v", st, err)
	}

	adoptOpts := []dlock.LockOption{dlock.WithTTL(ttl)}
	if h.Limit > 0 {
		adoptOpts = append(adoptOpts, dlock.WithLimit(h.Limit))
	}
	if h.Shared {
		adoptOpts = append(adoptOpts, dlock.WithShared())
	}
	k2, err := second.Adopt(ctx(t), h.Key, h.Token, adoptOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if k2.Fence() != h.Fence || k2.Token() != h.Token || k2.Key() != key || k2.Metadata() != k1.Metadata() {
		t.Fatalf("adopted: fence %d token %s metadata %q; handed %+v, metadata %q", k2.Fence(), k2.Token(), k2.Metadata(), h, k1.Metadata())
	}
	// Renewed past the first holder's TTL, and past its own.
	select {
	case <-k2.Lost():
		t.Fatal("the adopted lock was lost")
	case <-time.After(3 * ttl):
	}
	st, err := second.Status(ctx(t), key)
	if err != nil || !st.Held || st.Fence < h.Fence {
		t.Fatalf("3 TTLs after Adopt: Status %+v, %v", st, err)
	}
	// Handed on again, once the grant's own TTL is long gone: the fence is
	// still the grant's (a renewal keeps it in Redis).
	if k2, err = second.Adopt(ctx(t), h.Key, k2.Detach().Token, adoptOpts...); err != nil || k2.Fence() != h.Fence {
		t.Fatalf("adopted again: %v, %v (fence %d)", k2, err, h.Fence)
	}
	if _, err := second.ForceRelease(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k2.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopter's Lost did not fire after ForceRelease")
	}
	if err := k2.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after ForceRelease: %v", err)
	}
}

// TestAdoptReleaseAndExtend: an adopted lock's Extend and Release act on
// the hold (the key is free for others at once), and a second Adopt of a
// released token is ErrNotHeld.
func TestAdoptReleaseAndExtend(t *testing.T) {
	l, _, _ := single(t)
	k1, err := l.TryAcquire(ctx(t), "rel", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h := k1.Detach()
	k2, err := l.Adopt(ctx(t), h.Key, h.Token, dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.Extend(ctx(t), 5*time.Second); err != nil || k2.TTL() != 5*time.Second {
		t.Fatalf("Extend: %v (TTL %v)", err, k2.TTL())
	}
	if err := k2.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if k3, err := l.TryAcquire(ctx(t), "rel"); err != nil {
		t.Fatalf("after the adopter's Release: %v", err)
	} else {
		k3.Release(ctx(t))
	}
	if _, err := l.Adopt(ctx(t), h.Key, h.Token); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Adopt of a released token: %v", err)
	}
}

// TestAdoptNotHeld: a token that does not hold the key (another token, a
// hold of another shape, a free key) is ErrNotHeld, and the server is left
// as it was.
func TestAdoptNotHeld(t *testing.T) {
	l, _, c := single(t)
	k, err := l.TryAcquire(ctx(t), "held", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	p, err := l.TryAcquire(ctx(t), "sem", dlock.WithTTL(10*time.Second), dlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx(t))
	r, err := l.TryAcquire(ctx(t), "readers", dlock.WithTTL(10*time.Second), dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx(t))
	snapshot := func() string {
		var b strings.Builder
		keys := c.Keys(ctx(t), "*").Val()
		sort.Strings(keys) // KEYS answers in no set order
		for _, key := range keys {
			b.WriteString(key + "=" + c.Dump(ctx(t), key).Val() + ";")
		}
		return b.String()
	}
	before := snapshot()
	pttl := c.PTTL(ctx(t), "dlock:{held}").Val()
	other := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		key, token string
		opts       []dlock.LockOption
	}{
		{"held", other, nil},
		{"held", k.Token(), []dlock.LockOption{dlock.WithLimit(3)}},
		{"held", k.Token(), []dlock.LockOption{dlock.WithShared()}},
		{"sem", other, []dlock.LockOption{dlock.WithLimit(3)}},
		{"sem", p.Token(), nil},
		// A permit of a semaphore of 3 in another shape, or with another
		// limit: its quorum on a Redlock would be another.
		{"sem", p.Token(), []dlock.LockOption{dlock.WithShared()}},
		{"sem", p.Token(), []dlock.LockOption{dlock.WithLimit(2)}},
		{"sem", p.Token(), []dlock.LockOption{dlock.WithLimit(5)}},
		{"readers", r.Token(), []dlock.LockOption{dlock.WithLimit(2)}},
		{"readers", r.Token(), nil},
		{"free", other, nil},
		{"free", other, []dlock.LockOption{dlock.WithShared()}},
	} {
		if a, err := l.Adopt(ctx(t), tc.key, tc.token, tc.opts...); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Adopt(%q, %s, %d options): %v, %v", tc.key, tc.token, len(tc.opts), a != nil, err)
		} else if strings.Count(err.Error(), "dlock:") != 1 {
			t.Errorf("Adopt's error says its prefix more than once: %v", err)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("the keys changed:\n%s\n%s", before, after)
	}
	if p2 := c.PTTL(ctx(t), "dlock:{held}").Val(); p2 > pttl {
		t.Errorf("the lock's TTL grew from %v to %v", pttl, p2)
	}
}

// TestAdoptInvalid: bad input is ErrInvalid naming it, before any command.
func TestAdoptInvalid(t *testing.T) {
	l, _, _ := single(t)
	for _, tc := range []struct {
		key, token, want string
		opts             []dlock.LockOption
	}{
		{"", "0123456789abcdef0123456789abcdef", "key", nil},
		{"k", "", "token", nil},
		{"k", "0123456789ABCDEF0123456789ABCDEF", "token", nil},
		{"k", "0123456789abcdef", "token", nil},
		{"k", "0123456789abcdef0123456789abcdeg", "token", nil},
		{"k", "0123456789abcdef0123456789abcdef", "WithMetadata", []dlock.LockOption{dlock.WithMetadata("m")}},
		{"k", "0123456789abcdef0123456789abcdef", "WithShared", []dlock.LockOption{dlock.WithShared(), dlock.WithLimit(2)}},
	} {
		_, err := l.Adopt(ctx(t), tc.key, tc.token, tc.opts...)
		if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Adopt(%q, %q): %v, want ErrInvalid naming %s", tc.key, tc.token, err, tc.want)
		}
	}
	l.Close()
	if _, err := l.Adopt(ctx(t), "k", "0123456789abcdef0123456789abcdef"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Adopt on a closed Locker: %v", err)
	}
}

// TestAdoptValidityFromItsRound: the adopted lock's validity counts from
// the start of Adopt's round, not from the first holder's acquisition, and
// a detached lock that nobody adopts expires after its TTL (no renewal).
func TestAdoptValidityFromItsRound(t *testing.T) {
	l, _, _ := single(t)
	const ttl = 2 * time.Second
	k1, err := l.TryAcquire(ctx(t), "valid", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	h := k1.Detach()
	time.Sleep(ttl / 2) // time passes between the hand-off and its adoption
	begin := time.Now()
	k2, err := l.Adopt(ctx(t), h.Key, h.Token, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	end := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	drift := ttl/100 + 2*time.Millisecond
	if v := k2.ValidUntil(); v.Before(begin.Add(ttl-drift)) || v.After(end.Add(ttl-drift)) || !v.After(acquired.Add(ttl)) {
		t.Fatalf("ValidUntil %v after Adopt's start, want %v (the first acquisition was %v before it)", v.Sub(begin), ttl-drift, begin.Sub(acquired))
	}
	k2.Detach() // no one renews it now
	waitFor(t, func() bool { st, _ := l.Status(ctx(t), "valid"); return !st.Held }, "the detached key to expire")
	if _, err := l.Adopt(ctx(t), h.Key, h.Token); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Adopt after the expiry: %v", err)
	}
}

// TestAdoptMinority: over a Redlock where only a minority of the nodes hold
// the token, Adopt is ErrNotHeld, and what it extended there is given back
// no later than that extension would have run out.
func TestAdoptMinority(t *testing.T) {
	servers := dlocktest.StartN(t, 5)
	ls := lockers(t, 2, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	k1, err := ls[0].TryAcquire(ctx(t), "minority", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h := k1.Detach()
	// Three of five nodes lose the key: two hold it.
	for _, s := range servers[:3] {
		c := s.Client()
		c.Del(ctx(t), "dlock:{minority}")
		c.Close()
	}
	// The round waits a fifth of the TTL for each node: with 300ms (60ms),
	// a node slowed by a loaded machine went unanswered, and a round that
	// cannot rule out a majority is rightly ErrUnavailable.
	const ttl = 2 * time.Second
	_, err = ls[1].Adopt(ctx(t), h.Key, h.Token, dlock.WithTTL(ttl))
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Adopt on a minority: %v", err)
	}
	// The two nodes that confirmed had their TTL set to 2s: the key is
	// gone from them soon after (released by the clean-up, or expired).
	for _, s := range servers[3:] {
		c := s.Client()
		waitFor(t, func() bool { return c.Exists(ctx(t), "dlock:{minority}").Val() == 0 }, "the minority's key to go")
		c.Close()
	}
	if k, err := ls[1].TryAcquire(ctx(t), "minority"); err != nil {
		t.Fatalf("after a failed Adopt: %v", err)
	} else {
		k.Release(ctx(t))
	}
}

// TestDetachInDo: Do's fn may hand its lock off: its context ends (the
// lock is no longer this process's), Do releases nothing and says the lock
// was lost to it, and the adopter holds the key.
func TestDetachInDo(t *testing.T) {
	l, _, _ := single(t)
	var h dlock.Handoff
	err := l.Do(ctx(t), "do", func(ctx context.Context) error {
		k, _ := dlock.LockFromContext(ctx)
		h = k.Detach()
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v", err)
	}
	k, err := l.Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptUnansweredLeavesTheHold: an Adopt that a frozen Redis did not
// answer fails, and leaves the hold alone (it may be live: a clean-up of
// this Adopt would end the hold of another Adopt of the token, a retry):
// once Redis resumes, the key still holds the token, and the token is
// adopted again.
func TestAdoptUnansweredLeavesTheHold(t *testing.T) {
	first, s, c := single(t)
	second := newLocker(t, s.Client())
	k1, err := first.TryAcquire(ctx(t), "late", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	h := k1.Detach()
	thaw := freeze(t, s)
	_, err = second.Adopt(ctx(t), h.Key, h.Token, dlock.WithTTL(time.Minute))
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Adopt on a frozen Redis: %v", err)
	}
	thaw()
	if v := c.Get(ctx(t), "dlock:{late}").Val(); v != h.Token {
		t.Fatalf("after the failed Adopt the key holds %q, not the hold's token", v)
	}
	k2, err := first.Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		t.Fatalf("Adopt after a failed one: %v", err)
	}
	k2.Release(ctx(t))
}

// TestHandoffHook: for a hook, a Detach ends the lock as EventReleased
// (nothing else follows: no EventLost), and an Adopt is an acquisition
// (Start, EventAttempt, EventAcquired with the fence), whose lock ends
// with one EventReleased or EventLost as any other; a failed Adopt is
// EventRefused.
func TestHandoffHook(t *testing.T) {
	rec := newRecorder()
	l, _, _ := single(t, dlock.WithHook(rec))
	k, err := l.TryAcquire(ctx(t), "hooked")
	if err != nil {
		t.Fatal(err)
	}
	h := k.Detach()
	k.Detach()
	k2, err := l.Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Adopt(ctx(t), h.Key, h.Token); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	want := "attempt acquired released attempt acquired released attempt refused"
	if got := strings.Join(rec.kinds("hooked"), " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if acq := rec.of(dlock.EventAcquired); len(acq) != 2 || acq[1].Fence != h.Fence {
		t.Fatalf("EventAcquired %+v, fence %d", acq, h.Fence)
	}
	if refused := rec.of(dlock.EventRefused); len(refused) != 1 || !errors.Is(refused[0].Err, dlock.ErrNotHeld) || refused[0].Result() != dlock.ResultBusy {
		t.Fatalf("EventRefused %+v", refused)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.starts["hooked"] != 3 || rec.badCtx != 0 {
		t.Fatalf("starts %d, events with another context %d", rec.starts["hooked"], rec.badCtx)
	}
}

// TestAdoptOtherShapeRedlock: on 5 masters, a permit of a semaphore of 3
// (4 of 5 nodes) adopted as a shared hold (3 of 5) would renew on too few
// nodes and let a fourth holder in: Adopt refuses it, and the holders never
// exceed the limit.
func TestAdoptOtherShapeRedlock(t *testing.T) {
	servers := dlocktest.StartN(t, 5)
	ls := lockers(t, 2, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	p, err := ls[0].TryAcquire(ctx(t), "sem", dlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	h := p.Detach()
	for _, opts := range [][]dlock.LockOption{{dlock.WithShared()}, {dlock.WithLimit(2)}, {dlock.WithLimit(5)}, nil} {
		if a, err := ls[1].Adopt(ctx(t), h.Key, h.Token, opts...); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Adopt of a permit of 3 with %d options: adopted %v, %v; want ErrNotHeld", len(opts), a != nil, err)
			if a != nil {
				a.Release(ctx(t))
			}
		}
	}
	a, err := ls[1].Adopt(ctx(t), h.Key, h.Token, dlock.WithLimit(3))
	if err != nil {
		t.Fatalf("Adopt in its own shape: %v", err)
	}
	a.Release(ctx(t))
}

// TestAdoptRedlockFenceRecorded: on a Redlock, the fence counters of a
// held lock's nodes move (a grant that ran late on a node with its own
// count, grants on a node where the hold lapsed): Adopt reads the hold's
// fence recorded with it, and gets the holder's, whatever the counters
// say; also with a node frozen.
func TestAdoptRedlockFenceRecorded(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	clients := dlocktest.Clients(t, servers...)
	ls := lockers(t, 2, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	k, err := ls[0].TryAcquire(ctx(t), "pay")
	if err != nil {
		t.Fatal(err)
	}
	f := k.Fence()
	for i, c := range clients[1:] {
		// The counters moved past the hold's fence, each its own way.
		c.Set(ctx(t), "dlock:{pay}:fence", f+uint64(122*(i+1)), time.Hour)
	}
	h := k.Detach()
	a, err := ls[1].Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		t.Fatalf("Adopt once the counters disagree: %v", err)
	}
	if a.Fence() != f {
		t.Errorf("adopted fence %d, want the holder's %d", a.Fence(), f)
	}
	h = a.Detach()
	thaw := freeze(t, servers[0])
	defer thaw()
	a, err = ls[0].Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		for i, c := range clients[1:] {
			t.Logf("node %d: meta %v fence %v lock %v", i+1, c.HGetAll(ctx(t), "dlock:{pay}:meta").Val(), c.Get(ctx(t), "dlock:{pay}:fence").Val(), c.Get(ctx(t), "dlock:{pay}").Val())
		}
		t.Fatalf("Adopt with a node frozen: %v", err)
	}
	if a.Fence() != f {
		t.Errorf("adopted fence %d with a node frozen, want the holder's %d", a.Fence(), f)
	}
	thaw()
	a.Release(ctx(t))
}

// TestAdoptCounterRestored: on one Redis, a holder whose fence counter was
// lost (an eviction) restores it to its own fence at its next renewal, so
// that Adopt reads the holder's fence; before that renewal, Adopt gives a
// fence larger than every one issued, recorded as the hold's from then on.
func TestAdoptCounterRestored(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	first, second := newLocker(t, s.Client()), newLocker(t, s.Client())
	k, err := first.TryAcquire(ctx(t), "pay", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx(t), "dlock:{pay}:fence")
	if err := k.Extend(ctx(t), time.Second); err != nil { // a renewal
		t.Fatal(err)
	}
	h := k.Detach()
	a, err := second.Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fence() != h.Fence {
		t.Errorf("adopted fence %d after a renewal restored the counter, want the holder's %d", a.Fence(), h.Fence)
	}
	if a.Fence() != h.Fence {
		t.Errorf("adopted fence %d, want the one recorded, %d", a.Fence(), h.Fence)
	}
	// Adopt recorded the fence with the hold: lost too, with the counter.
	c.Del(ctx(t), "dlock:{pay}:fence", "dlock:{pay}:meta")
	h = a.Detach()
	b, err := first.Adopt(ctx(t), h.Key, h.Token)
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= h.Fence {
		t.Errorf("adopted fence %d with the counter lost, not above the %d issued", b.Fence(), h.Fence)
	}
	h2 := b.Detach()
	b2, err := second.Adopt(ctx(t), h2.Key, h2.Token)
	if err != nil {
		t.Fatal(err)
	}
	if b2.Fence() != b.Fence() {
		t.Errorf("adopted again: fence %d, want the one recorded, %d", b2.Fence(), b.Fence())
	}
	b2.Release(ctx(t))
	k2, err := first.TryAcquire(ctx(t), "pay")
	if err != nil {
		t.Fatal(err)
	}
	if k2.Fence() <= b2.Fence() {
		t.Errorf("next holder's fence %d, not above the adopted hold's %d", k2.Fence(), b2.Fence())
	}
	k2.Release(ctx(t))
}

// TestAdoptAfterSetLimit: a permit whose semaphore's limit SetLimit moved
// from 2 to 3, then to 5 (on 5 masters: a permit of 5 needs every node),
// is adopted with the limit its holder knew, as a permit of 5; with another
// limit still, it is refused.
func TestAdoptAfterSetLimit(t *testing.T) {
	for _, topo := range handoffTopologies[:2] {
		t.Run(topo.name, func(t *testing.T) {
			first, second := topo.make(t)
			p, err := first.TryAcquire(ctx(t), "sem", dlock.WithLimit(2))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{3, 5} {
				if err := first.SetLimit(ctx(t), "sem", n); err != nil {
					t.Fatal(err)
				}
			}
			h := p.Detach()
			if a, err := second.Adopt(ctx(t), h.Key, h.Token, dlock.WithLimit(4)); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Adopt with a limit it never had: adopted %v, %v", a != nil, err)
			}
			a, err := second.Adopt(ctx(t), h.Key, h.Token, dlock.WithLimit(h.Limit))
			if err != nil {
				t.Fatalf("Adopt with the limit SetLimit moved: %v", err)
			}
			if st, err := second.Status(ctx(t), "sem"); err != nil || st.Limit != 5 {
				t.Errorf("Status after the Adopt: limit %d, %v; want 5", st.Limit, err)
			}
			if err := a.Release(ctx(t)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestAdoptOtherShapeLeavesTheHold: on a Redlock of three masters, an
// Adopt of a live permit of 3 WithLimit(4) is refused for its shape by two
// masters, and its command on the third runs but its reply is lost: it
// fails with ErrNotHeld. The refusals say the token holds the key there,
// in another shape: the hold is live, so the failed Adopt must not release
// it where its command may have run (before, a quorum's refusal of any
// kind made it clean up there, and the permit was gone from the third
// master: the explorer, rueidis, Redlock of 3, seed 11890724378170654028,
// "ErrNotHeld untrue" on the Release of the permit adopted right after,
// in its own shape).
func TestAdoptOtherShapeLeavesTheHold(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	clients := dlocktest.Clients(t, servers...)
	proxy, err := dlocktest.NewProxy(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	var adopterClients []redis.UniversalClient
	for _, addr := range []string{proxy.Addr(), servers[1].Addr(), servers[2].Addr()} {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}) // the lost reply stays lost
		t.Cleanup(func() { _ = c.Close() })
		adopterClients = append(adopterClients, c)
	}
	adopter, err := dlock.NewRedlock(adopterClients)
	if err != nil {
		t.Fatal(err)
	}
	ls := lockers(t, 2, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	p, err := ls[0].TryAcquire(ctx(t), "sem", dlock.WithLimit(3), dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h := p.Detach()
	proxy.LoseReply(h.Token)
	if a, err := adopter.Adopt(ctx(t), h.Key, h.Token, dlock.WithLimit(4)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Adopt WithLimit(4) of a permit of 3: adopted %v, %v; want ErrNotHeld", a != nil, err)
	}
	// A clean-up runs in the background; Close waits for it.
	if err := adopter.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		if _, err := c.ZScore(ctx(t), "dlock:{sem}", h.Token).Result(); err != nil {
			t.Errorf("master %d: the permit after the failed Adopt: %v", i, err)
		}
	}
	a, err := ls[1].Adopt(ctx(t), h.Key, h.Token, dlock.WithLimit(3))
	if err != nil {
		t.Fatalf("Adopt in its own shape: %v", err)
	}
	if err := a.Release(ctx(t)); err != nil {
		t.Fatalf("Release of the adopted permit: %v", err)
	}
}
