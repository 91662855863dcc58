package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// rwExclusion runs readers (WithShared) and writers (plain locks) over the
// lockers on one key and checks that a writer's section never overlaps
// another section, that readers' sections did overlap, that no fence was
// given twice (over a Redlock too), and that a writer's
// fence is larger than the fence of every section that ended before it was
// granted.
func rwExclusion(t *testing.T, lockers []*dlock.Locker, readers, writers, rounds int, opts ...dlock.LockOption) {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	var (
		mu                     sync.Mutex
		inReaders, inWriters   int
		mostReaders            int
		overlaps               []string
		fences                 = map[uint64]bool{} // fence -> given to a writer
		endedFence             uint64              // the largest fence of a section that ended
		writerSections, shared atomic.Int32
	)
	section := func(w int, write bool, k *dlock.Lock) {
		mu.Lock()
		if fences[k.Fence()] {
			overlaps = append(overlaps, fmt.Sprintf("fence %d given twice", k.Fence()))
		}
		fences[k.Fence()] = true
		if write {
			if inReaders+inWriters > 0 {
				overlaps = append(overlaps, fmt.Sprintf("writer %d entered with %d readers and %d writers inside", w, inReaders, inWriters))
			}
			if k.Fence() <= endedFence {
				overlaps = append(overlaps, fmt.Sprintf("writer %d: fence %d after an ended section's %d", w, k.Fence(), endedFence))
			}
			inWriters++
		} else {
			if inWriters > 0 {
				overlaps = append(overlaps, fmt.Sprintf("reader %d entered with a writer inside", w))
			}
			inReaders++
			mostReaders = max(mostReaders, inReaders)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		if write {
			inWriters--
		} else {
			inReaders--
		}
		endedFence = max(endedFence, k.Fence())
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range readers + writers {
		write := w >= readers
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			o := opts
			if !write {
				o = append([]dlock.LockOption{dlock.WithShared()}, opts...)
			}
			for range rounds {
				k, err := l.Acquire(ctx, "rw", o...)
				if err != nil {
					t.Errorf("worker %d (write %v): %v", w, write, err)
					return
				}
				section(w, write, k)
				if write {
					writerSections.Add(1)
				} else {
					shared.Add(1)
				}
				if err := k.Release(ctx); err != nil {
					t.Errorf("worker %d: Release: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, o := range overlaps {
		t.Error(o)
	}
	if readers > 1 && mostReaders < 2 {
		t.Errorf("at most %d readers at once: shared holds did not overlap", mostReaders)
	}
	t.Logf("%d shared and %d exclusive sections, at most %d readers at once", shared.Load(), writerSections.Load(), mostReaders)
}

func TestSharedReadWrite(t *testing.T) {
	s := dlocktest.Start(t)
	var ls []*dlock.Locker
	for range 3 {
		ls = append(ls, newLocker(t, s.Client()))
	}
	rwExclusion(t, ls, 6, 2, 15)
}

func TestSharedReadWriteRedlock(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	ls := lockers(t, 3, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	rwExclusion(t, ls, 6, 2, 10)
}

func TestSharedReadWriteCluster(t *testing.T) {
	c := dlocktest.StartCluster(t, 3)
	var ls []*dlock.Locker
	for range 3 {
		ls = append(ls, newLocker(t, c.Client()))
	}
	rwExclusion(t, ls, 6, 2, 10)
}

// TestSharedRedlockFrozenNode: with one of three masters frozen, readers
// and writers still exclude each other and make progress.
func TestSharedRedlockFrozenNode(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	ls := lockers(t, 3, func() []redis.UniversalClient { return dlocktest.Clients(t, servers...) })
	if err := servers[2].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[2].Thaw() })
	rwExclusion(t, ls, 4, 2, 5, dlock.WithTTL(2*time.Second))
}

// TestSharedWriterNotStarved: readers whose holds always overlap (one
// always holds) do not keep a waiting writer out; a reader that comes after
// the writer began waiting waits for it.
func TestSharedWriterNotStarved(t *testing.T) {
	s := dlocktest.Start(t)
	readers := newLocker(t, s.Client())
	writer := newLocker(t, s.Client())
	late := newLocker(t, s.Client())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	first, err := readers.Acquire(ctx(t), "starve", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				k, err := readers.Acquire(ctx(t), "starve", dlock.WithShared())
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				time.Sleep(20 * time.Millisecond)
				_ = k.Release(ctx(t))
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// The writer waits behind the first reader (and the others).
	got := make(chan *dlock.Lock, 1)
	go func() {
		k, err := writer.Acquire(ctxTimeout(t, 20*time.Second), "starve")
		if err != nil {
			t.Errorf("writer starved: %v", err)
		}
		got <- k
	}()
	waitFor(t, func() bool {
		st, _ := writer.Status(ctx(t), "starve")
		return st.Writers == 1
	}, "the state in Redis")
	// A reader that comes now waits for the writer.
	lateCh := make(chan *dlock.Lock, 1)
	go func() {
		k, _ := late.Acquire(ctx(t), "starve", dlock.WithShared())
		lateCh <- k
	}()
	if err := first.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	var w *dlock.Lock
	select {
	case w = <-got:
	case k := <-lateCh:
		t.Fatalf("a reader that came after the waiting writer got in first (%v)", k != nil)
	}
	if w == nil {
		return
	}
	if err := w.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if k := <-lateCh; k == nil {
		t.Fatal("the late reader did not get in after the writer")
	} else {
		_ = k.Release(ctx(t))
	}
}

// behindProxy starts a redis-server and returns it, a fault proxy in front
// of it and a client through the proxy.
func behindProxy(t *testing.T) (*dlocktest.Server, *dlocktest.Proxy, *redis.Client) {
	t.Helper()
	s := dlocktest.Start(t)
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { pc.Close() })
	return s, p, pc
}

// TestSharedDeadHolder: a shared holder that dies without releasing blocks
// a writer until its TTL runs out, not longer, and its Lost fires first.
func TestSharedDeadHolder(t *testing.T) {
	s, p, pc := behindProxy(t)
	dying := newLocker(t, pc)
	writer := newLocker(t, s.Client())
	const ttl = 1500 * time.Millisecond
	k, err := dying.Acquire(ctx(t), "dead-reader", dlock.WithShared(), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	p.BlackHole(true) // the holder is cut off: no renewal, no release
	start := time.Now()
	w, err := writer.Acquire(ctxTimeout(t, 10*time.Second), "dead-reader", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	took := time.Since(start)
	select {
	case <-k.Lost():
	default:
		t.Error("the cut-off reader's Lost had not fired when the writer got the key")
	}
	if took > ttl+2*time.Second {
		t.Errorf("the writer waited %v for a dead reader with a TTL of %v", took, ttl)
	}
	t.Logf("the writer got the key %v after the reader was cut off (TTL %v)", took, ttl)
	_ = w.Release(ctx(t))
}

// TestSharedDeadWriter: a waiting writer that is cut off (frozen, or its
// process dead) stops blocking new shared holds one TTL (its own) after its
// last attempt.
func TestSharedDeadWriter(t *testing.T) {
	s, p, pc := behindProxy(t)
	readers := newLocker(t, s.Client())
	dying := newLocker(t, pc)
	r1, err := readers.Acquire(ctx(t), "dead-writer", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 1500 * time.Millisecond
	go func() { _, _ = dying.Acquire(ctxTimeout(t, 30*time.Second), "dead-writer", dlock.WithTTL(ttl)) }()
	waitFor(t, func() bool {
		st, _ := readers.Status(ctx(t), "dead-writer")
		return st.Writers == 1
	}, "the state in Redis")
	if _, err := readers.TryAcquire(ctx(t), "dead-writer", dlock.WithShared()); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a new reader with a writer waiting: %v, want ErrNotAcquired", err)
	}
	p.BlackHole(true)
	start := time.Now()
	r2, err := readers.Acquire(ctxTimeout(t, 10*time.Second), "dead-writer", dlock.WithShared())
	if err != nil {
		t.Fatalf("reader after the writer was cut off: %v", err)
	}
	took := time.Since(start)
	if took > ttl+2*time.Second {
		t.Errorf("a cut-off writer with TTL %v blocked readers for %v", ttl, took)
	}
	t.Logf("readers got in %v after the writer was cut off (its TTL %v)", took, ttl)
	_ = r2.Release(ctx(t))
	_ = r1.Release(ctx(t))
}

// TestSharedWriterGivesUp: a waiting writer that gives up lets in, at once,
// the readers its intent kept out (its TTL of 20s does not time them).
func TestSharedWriterGivesUp(t *testing.T) {
	s := dlocktest.Start(t)
	a, w, r := newLocker(t, s.Client()), newLocker(t, s.Client()), newLocker(t, s.Client())
	h, err := a.Acquire(ctx(t), "gives-up", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx(t))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wdone := make(chan struct{})
	go func() { defer close(wdone); _, _ = w.Acquire(wctx, "gives-up", dlock.WithTTL(20*time.Second)) }()
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), "gives-up"); return st.Writers == 1 }, "the writer's intent")
	got := make(chan *dlock.Lock, 1)
	go func() {
		k, err := r.Acquire(ctx(t), "gives-up", dlock.WithShared())
		if err != nil {
			t.Error(err)
		}
		got <- k
	}()
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), "gives-up"); return st.Waiters == 2 }, "the reader queued")
	cancel()
	<-wdone
	acquiredWithin(t, got, 5*time.Second, "the reader still waits 5s after the writer gave up")
}

// TestSharedWakeups: the last shared release wakes the waiting writer, and
// an exclusive release wakes every reader queued before the next writer,
// at once; with a TTL of 30s, neither is a timer's doing.
func TestSharedWakeups(t *testing.T) {
	s := dlocktest.Start(t)
	var ls []*dlock.Locker
	for range 7 {
		ls = append(ls, newLocker(t, s.Client()))
	}
	holder, w2l := ls[0], ls[6]
	// Readers hold; a writer waits; the last release wakes it.
	r1, err := ls[1].Acquire(ctx(t), "wake", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := ls[2].Acquire(ctx(t), "wake", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	wch := make(chan *dlock.Lock, 1)
	go func() {
		k, err := holder.Acquire(ctx(t), "wake")
		if err != nil {
			t.Error(err)
		}
		wch <- k
	}()
	waitFor(t, func() bool { st, _ := holder.Status(ctx(t), "wake"); return st.Writers == 1 }, "the state in Redis")
	_ = r1.Release(ctx(t))
	select {
	case <-wch:
		t.Fatal("the writer got in while a reader held the key")
	case <-time.After(50 * time.Millisecond):
	}
	_ = r2.Release(ctx(t))
	var w *dlock.Lock
	select {
	case w = <-wch:
	case <-time.After(5 * time.Second):
		t.Fatal("the last shared release did not wake the writer")
	}
	// Readers queue behind the writer, then a second writer behind them.
	got := make(chan *dlock.Lock, 8)
	for i := 1; i <= 4; i++ {
		go func() {
			k, err := ls[i].Acquire(ctx(t), "wake", dlock.WithShared())
			if err != nil {
				t.Error(err)
			}
			got <- k
		}()
	}
	waitFor(t, func() bool { st, _ := holder.Status(ctx(t), "wake"); return st.Waiters == 4 }, "the state in Redis")
	w2ch := make(chan *dlock.Lock, 1)
	go func() {
		k, err := w2l.Acquire(ctx(t), "wake")
		if err != nil {
			t.Error(err)
		}
		w2ch <- k
	}()
	waitFor(t, func() bool { st, _ := holder.Status(ctx(t), "wake"); return st.Waiters == 5 }, "the state in Redis")
	_ = w.Release(ctx(t))
	var rs []*dlock.Lock
	deadline := time.After(5 * time.Second)
	for len(rs) < 4 {
		select {
		case k := <-got:
			rs = append(rs, k)
		case <-w2ch:
			t.Fatal("the second writer got in before the readers queued ahead of it")
		case <-deadline:
			t.Fatalf("the writer's release woke %d of the 4 readers queued before the next writer", len(rs))
		}
	}
	for _, k := range rs {
		_ = k.Release(ctx(t))
	}
	select {
	case k := <-w2ch:
		_ = k.Release(ctx(t))
	case <-time.After(5 * time.Second):
		t.Fatal("the last reader's release did not wake the second writer")
	}
}

// TestSharedOptions: WithShared does not combine with WithLimit or
// Campaign, and a shared hold of a semaphore (or the other way round) is a
// limit mismatch.
func TestSharedOptions(t *testing.T) {
	l, _, _ := single(t)
	for _, opts := range [][]dlock.LockOption{
		{dlock.WithShared(), dlock.WithLimit(3)},
		{dlock.WithLimit(1), dlock.WithShared()},
	} {
		if _, err := l.TryAcquire(ctx(t), "opts", opts...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("WithShared with WithLimit: %v, want ErrInvalid", err)
		}
	}
	if _, err := l.Campaign(ctx(t), "opts", "me", dlock.WithShared()); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Campaign WithShared: %v, want ErrInvalid", err)
	}
	sem, err := l.Acquire(ctx(t), "sem-rw", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(ctx(t), "sem-rw", dlock.WithShared())
	if !errors.Is(err, dlock.ErrMisconfigured) {
		t.Errorf("shared hold of a semaphore: %v, want ErrMisconfigured", err)
	}
	t.Log(err)
	_ = sem.Release(ctx(t))
	r, err := l.Acquire(ctx(t), "rw-sem", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(ctx(t), "rw-sem", dlock.WithLimit(2))
	if !errors.Is(err, dlock.ErrMisconfigured) {
		t.Errorf("semaphore on shared holds: %v, want ErrMisconfigured", err)
	}
	t.Log(err)
	_ = r.Release(ctx(t))
}

// TestSharedStatusForceRelease: Status shows the shared holders (with
// their metadata and TTLs) and a waiting writer; ForceRelease ends every
// shared hold, and the writer gets the key.
func TestSharedStatusForceRelease(t *testing.T) {
	s := dlocktest.Start(t)
	a, b, w := newLocker(t, s.Client()), newLocker(t, s.Client()), newLocker(t, s.Client())
	ka, err := a.Acquire(ctx(t), "st", dlock.WithShared(), dlock.WithMetadata("a"), dlock.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.Acquire(ctx(t), "st", dlock.WithShared(), dlock.WithMetadata("b"), dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wch := make(chan *dlock.Lock, 1)
	go func() {
		k, err := w.Acquire(ctx(t), "st")
		if err != nil {
			t.Error(err)
		}
		wch <- k
	}()
	waitFor(t, func() bool { st, _ := a.Status(ctx(t), "st"); return st.Writers == 1 }, "the state in Redis")
	st, err := a.Status(ctx(t), "st")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || !st.Shared || len(st.Permits) != 2 || st.Limit != 0 {
		t.Fatalf("status %+v: want held, shared, 2 holders", st)
	}
	metas := map[string]time.Duration{}
	for _, p := range st.Permits {
		metas[p.Metadata] = p.TTL
	}
	if metas["a"] <= 2*time.Second || metas["b"] <= 0 || metas["b"] > 2*time.Second {
		t.Errorf("holders' TTLs %v: want a's above 2s, b's within 2s", metas)
	}
	n, err := a.ForceRelease(ctx(t), "st")
	if err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	k := <-wch
	if k == nil {
		t.Fatal("the writer did not get the key")
	}
	for _, h := range []*dlock.Lock{ka, kb} {
		select {
		case <-h.Lost():
		case <-time.After(15 * time.Second):
			t.Error("a shared hold did not see it was force-released")
		}
	}
	_ = k.Release(ctx(t))
}

// TestSharedExtendAndCancel: a shared hold extends and renews on its own;
// a shared waiter whose ctx ends leaves nothing behind.
func TestSharedExtendAndCancel(t *testing.T) {
	l, _, c := single(t)
	w := newLocker(t, c)
	k, err := l.Acquire(ctx(t), "ext", dlock.WithShared(), dlock.WithAutoRenew(false), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Extend(ctx(t), 5*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if ttl := c.PTTL(ctx(t), "dlock:{ext}").Val(); ttl < 4*time.Second {
		t.Fatalf("PTTL after Extend = %v", ttl)
	}
	x, err := w.Acquire(ctx(t), "ext2")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(cctx, "ext2", dlock.WithShared()); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("shared wait on a held lock: %v", err)
	}
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{ext2}:waiters").Val() == 0 }, "the state in Redis")
	_ = x.Release(ctx(t))
	_ = k.Release(ctx(t))
}

// TestSharedIdleWaiters: a writer waiting for a reader and a reader
// waiting for that writer, with the default TTL, cost each at most 0.2
// commands/s while nothing happens (the holder's renewals apart).
func TestSharedIdleWaiters(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other waiting tests
	if testing.Short() {
		t.Skip("takes 12s")
	}
	s := dlocktest.Start(t)
	holder := newLocker(t, s.Client())
	var sent dlocktest.Counter
	client := func() *redis.Client {
		c := s.Client()
		c.AddHook(&sent)
		return c
	}
	writer, reader := newLocker(t, client()), newLocker(t, client())
	h, err := holder.Acquire(ctx(t), "idle", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer wcancel()
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = writer.Acquire(wctx, "idle") }()
	waitFor(t, func() bool { st, _ := holder.Status(ctx(t), "idle"); return st.Writers == 1 }, "the writer's intent")
	go func() { defer wg.Done(); _, _ = reader.Acquire(wctx, "idle", dlock.WithShared()) }()
	waitFor(t, func() bool { st, _ := holder.Status(ctx(t), "idle"); return st.Waiters == 2 }, "both waiters")
	before := sent.Load()
	const idle = 12 * time.Second
	time.Sleep(idle) // the measurement: nothing happens meanwhile
	per := float64(sent.Load()-before) / idle.Seconds() / 2
	t.Logf("%.3f commands/s per waiter over %s", per, idle)
	if per > 0.2 {
		t.Errorf("idle waiters sent %.3f commands/s each, want at most 0.2", per)
	}
	_ = h.Release(ctx(t))
}

// TestSharedWakesEveryReader: an exclusive release, and a waiting writer
// that gives up, wake every shared waiter queued before the next writer,
// however many there are (a release once woke at most 101, and the rest
// slept until their timer: the old holder's TTL of 20s here).
func TestSharedWakesEveryReader(t *testing.T) {
	const readers = 130
	s := dlocktest.Start(t)
	ls := []*dlock.Locker{newLocker(t, s.Client()), newLocker(t, s.Client()), newLocker(t, s.Client())}
	waitAll := func(what string, got <-chan *dlock.Lock) {
		t.Helper()
		var ks []*dlock.Lock
		deadline := time.After(5 * time.Second)
		for len(ks) < readers {
			select {
			case k := <-got:
				ks = append(ks, k)
			case <-deadline:
				t.Fatalf("%s: %d of the %d shared waiters got in within 5s", what, len(ks), readers)
			}
		}
		for _, k := range ks {
			if k != nil {
				_ = k.Release(ctx(t))
			}
		}
	}
	queueReaders := func(key string, before int64) <-chan *dlock.Lock {
		got := make(chan *dlock.Lock, readers)
		for i := range readers {
			go func() {
				k, err := ls[i%len(ls)].Acquire(ctxTimeout(t, 60*time.Second), key, dlock.WithShared())
				if err != nil {
					t.Error(err)
				}
				got <- k
			}()
		}
		waitFor(t, func() bool {
			st, _ := ls[0].Status(ctx(t), key)
			return st.Waiters == before+readers
		}, "the readers queued")
		return got
	}

	// An exclusive holder with a long TTL releases.
	w, err := ls[0].Acquire(ctx(t), "many", dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := queueReaders("many", 0)
	if err := w.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitAll("after an exclusive release", got)

	// A writer waits behind a shared hold, readers behind it; it gives up.
	h, err := ls[0].Acquire(ctx(t), "many2", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx(t))
	wl := newLocker(t, s.Client())
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wdone := make(chan struct{})
	go func() { defer close(wdone); _, _ = wl.Acquire(wctx, "many2", dlock.WithTTL(20*time.Second)) }()
	waitFor(t, func() bool { st, _ := ls[0].Status(ctx(t), "many2"); return st.Writers == 1 }, "the writer's intent")
	got = queueReaders("many2", 1)
	cancel()
	<-wdone
	waitAll("after the waiting writer gave up", got)
}
