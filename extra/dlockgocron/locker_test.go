package dlockgocron_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockgocron"
)

// lag is the clock skew of the second instance in the scheduler tests: its
// clock is behind, so it fires every tick this much later than the first.
const lag = 300 * time.Millisecond

// tickRuns runs a fast job every second on two instances, the second one's
// clock lagging, until runs of n+2 distinct ticks have been seen, and
// returns the runs of each tick, without the first and last ticks (which
// may be partial). It fails if a tick in between is missing.
func tickRuns(t *testing.T, n int, opts ...dlockgocron.Option) map[int64][]int {
	t.Helper()
	s := dlocktest.Start(t)
	log := newRunLog()
	var ins []*instance
	for i, skew := range []time.Duration{0, -lag} {
		in := newInstance(t, i, s.Addr(), skew, opts...)
		in.everySecond(t, "tick", func(tick int64) { log.add(run{inst: in.id, tick: tick}) })
		ins = append(ins, in)
	}
	for _, in := range ins {
		in.sched.Start()
	}
	log.waitFor(t, time.Duration(n+10)*time.Second, "runs", ticksSeen(n+2))
	for _, in := range ins {
		in.stop(t) // waits for the runs in progress: every run is logged
	}
	byTick := map[int64][]int{}
	for _, r := range log.snapshot() {
		byTick[r.tick] = append(byTick[r.tick], r.inst)
	}
	var ticks []int64
	for tick := range byTick {
		ticks = append(ticks, tick)
	}
	slices.Sort(ticks)
	first, last := ticks[0], ticks[len(ticks)-1]
	delete(byTick, first)
	delete(byTick, last)
	for tick := first + 1; tick < last; tick++ {
		if len(byTick[tick]) == 0 {
			t.Errorf("tick %d: no run", tick)
		}
	}
	t.Logf("instances that ran each tick (instance 1's clock is %s behind): %v", lag, byTick)
	return byTick
}

// Two schedulers share the job through the Locker: every tick runs exactly
// once across both, although the job ends long before the lagging instance
// fires the same tick.
func TestLockerOncePerTick(t *testing.T) {
	const n = 6
	t.Run("DefaultMinHold", func(t *testing.T) {
		byTick := tickRuns(t, n)
		if len(byTick) < n {
			t.Fatalf("%d complete ticks, want %d", len(byTick), n)
		}
		for tick, insts := range byTick {
			if len(insts) != 1 {
				t.Errorf("tick %d ran %d times (instances %v), want once", tick, len(insts), insts)
			}
		}
	})
	// Without the minimum hold, the first instance releases the lock when
	// the run ends, and the lagging instance runs the same tick again: the
	// failure that WithMinHold prevents (and a check that the test above
	// can see a tick run twice).
	t.Run("NoMinHold", func(t *testing.T) {
		byTick := tickRuns(t, n, dlockgocron.WithMinHold(0))
		twice := 0
		for _, insts := range byTick {
			if len(insts) > 1 {
				twice++
			}
		}
		if twice == 0 {
			t.Errorf("no tick ran twice without the minimum hold: the test cannot see the clock-skew problem")
		}
		t.Logf("%d of %d ticks ran twice without the minimum hold", twice, len(byTick))
	})
}

// A run that lasts many TTLs keeps its lock (it is renewed): the other
// instance skips its ticks, and Unlock reports no loss.
func TestLockerLongJobKeepsLock(t *testing.T) {
	s := dlocktest.Start(t)
	const ttl = 300 * time.Millisecond
	opts := dlockgocron.WithLockOptions(dlock.WithTTL(ttl))
	log := newRunLog()
	finish := make(chan struct{})
	lostDuringRun := make(chan struct{}, 1)
	var long atomic.Bool
	var ins []*instance
	for i, skew := range []time.Duration{0, -lag} {
		in := newInstance(t, i, s.Addr(), skew, opts)
		in.everySecond(t, "long", func(tick int64) {
			h := in.lk.Held("long")
			if h == nil {
				t.Errorf("instance %d: Held returned nil during a run", in.id)
				return
			}
			log.add(run{inst: in.id, tick: tick, fence: h.Fence(), start: time.Now()})
			if long.CompareAndSwap(false, true) {
				select {
				case <-finish:
				case <-h.Lost():
					lostDuringRun <- struct{}{}
				}
			}
		})
		ins = append(ins, in)
	}
	for _, in := range ins {
		in.sched.Start()
	}
	runner := log.waitFor(t, 10*time.Second, "run", func(rs []run) bool { return len(rs) > 0 })[0].inst
	other := ins[1-runner]
	// Three ticks of the other instance (more than 6 TTLs): all skipped
	// because the lock is held.
	for i := 0; i < 3; i++ {
		select {
		case err := <-other.lockErrs:
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("instance %d's Lock: %v, want an error wrapping ErrNotAcquired", other.id, err)
			}
		case <-lostDuringRun:
			t.Fatal("the long run lost its lock")
		case <-time.After(10 * time.Second):
			t.Fatal("no skipped run within 10s")
		}
	}
	if rs := log.snapshot(); len(rs) != 1 {
		t.Errorf("%d runs while the long run held the lock, want 1: %+v", len(rs), rs)
	}
	select {
	case <-lostDuringRun:
		t.Fatal("the long run lost its lock")
	default:
	}
	close(finish)
	if err := recv(t, ins[runner].unlock, 10*time.Second, "Unlock"); err != nil {
		t.Errorf("Unlock after the long run: %v", err)
	}
}

// The holder is cut off from Redis while its job runs. The job learns it
// through Held(name).Lost() and stops; the other instance runs the job only
// after that, at a later tick, with a larger fence; the holder's Unlock
// reports the loss; the cut-off instance runs nothing meanwhile.
func TestLockerLostWhilePartitioned(t *testing.T) {
	s := dlocktest.Start(t)
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	opts := dlockgocron.WithLockOptions(dlock.WithTTL(time.Second))
	log := newRunLog()
	started := make(chan struct{})
	var stoppedAt atomic.Pointer[time.Time]
	// Instance 0 (through the proxy) fires first at every tick.
	ins := []*instance{
		newInstance(t, 0, p.Addr(), 0, opts),
		newInstance(t, 1, s.Addr(), -lag, opts),
	}
	for _, in := range ins {
		in.everySecond(t, "report", func(tick int64) {
			h := in.lk.Held("report")
			if h == nil {
				t.Errorf("instance %d: Held returned nil during a run", in.id)
				return
			}
			log.add(run{inst: in.id, tick: tick, fence: h.Fence(), start: time.Now()})
			if in.id == 0 && stoppedAt.Load() == nil {
				close(started)
				select {
				case <-h.Lost():
				case <-time.After(30 * time.Second):
					t.Error("Lost did not close while cut off from Redis")
				}
				now := time.Now()
				stoppedAt.Store(&now)
			}
		})
	}
	ins[0].sched.Start()
	recv(t, started, 10*time.Second, "run on instance 0")
	ins[1].sched.Start()
	p.BlackHole(true)
	defer p.BlackHole(false)

	rs := log.waitFor(t, 20*time.Second, "run on instance 1", func(rs []run) bool {
		return slices.ContainsFunc(rs, func(r run) bool { return r.inst == 1 })
	})
	if err := recv(t, ins[0].unlock, 10*time.Second, "Unlock on instance 0"); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("instance 0's Unlock: %v, want an error wrapping ErrLockLost", err)
	}
	first, next := rs[0], rs[len(rs)-1]
	if first.inst != 0 || next.inst != 1 || len(rs) != 2 {
		t.Fatalf("runs %+v, want one on instance 0, then one on instance 1", rs)
	}
	stopped := stoppedAt.Load()
	switch {
	case stopped == nil:
		t.Errorf("instance 1 ran the job while instance 0's run was still in progress")
	case !next.start.After(*stopped):
		t.Errorf("instance 1 started at %s, before instance 0's run stopped at %s", next.start, *stopped)
	default:
		t.Logf("instance 0 saw Lost and stopped %s after it started; instance 1 ran %s after that",
			stopped.Sub(first.start).Round(time.Millisecond), next.start.Sub(*stopped).Round(time.Millisecond))
	}
	if next.tick <= first.tick {
		t.Errorf("instance 1 ran tick %d, not later than instance 0's tick %d", next.tick, first.tick)
	}
	if next.fence <= first.fence {
		t.Errorf("fence %d after fence %d: not larger", next.fence, first.fence)
	}
	// The cut-off instance skips its ticks: Redis does not answer it.
	err = recv(t, ins[0].lockErrs, 10*time.Second, "skipped run on instance 0")
	for errors.Is(err, dlock.ErrNotAcquired) { // a tick during its own run
		err = recv(t, ins[0].lockErrs, 10*time.Second, "skipped run on instance 0")
	}
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("instance 0's Lock while cut off: %v, want an error wrapping ErrUnavailable", err)
	}
	for _, in := range ins {
		in.stop(t)
	}
	for _, r := range log.snapshot() {
		if r.inst == 0 && r != first {
			t.Errorf("instance 0 ran while cut off from Redis: %+v", r)
		}
	}
	for tick, n := range perTick(log.snapshot()) {
		if n > 1 {
			t.Errorf("tick %d ran %d times", tick, n)
		}
	}
}

// While Redis does not answer, no instance runs the job (Lock fails with
// ErrUnavailable: gocron skips the run); once it answers again, every tick
// runs once.
func TestLockerRedisFrozen(t *testing.T) {
	s := dlocktest.Start(t)
	opts := dlockgocron.WithLockOptions(dlock.WithTTL(time.Second))
	log := newRunLog()
	var frozen atomic.Bool
	var ins []*instance
	for i, skew := range []time.Duration{0, -lag} {
		in := newInstance(t, i, s.Addr(), skew, opts)
		in.everySecond(t, "tick", func(tick int64) {
			if frozen.Load() {
				t.Errorf("instance %d ran tick %d while Redis was frozen", in.id, tick)
			}
			log.add(run{inst: in.id, tick: tick, fence: in.lk.Held("tick").Fence(), start: time.Now()})
		})
		ins = append(ins, in)
	}
	for _, in := range ins {
		in.sched.Start()
	}
	log.waitFor(t, 10*time.Second, "runs", ticksSeen(2))
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen.Store(true)
	before := len(log.snapshot())
	// Two skipped runs on each instance.
	for _, in := range ins {
		for n := 0; n < 2; {
			err := recv(t, in.lockErrs, 10*time.Second, "skipped run")
			switch {
			case errors.Is(err, dlock.ErrUnavailable):
				n++
			case errors.Is(err, dlock.ErrNotAcquired): // a skip from before the freeze
			default:
				t.Errorf("instance %d's Lock while Redis was frozen: %v, want an error wrapping ErrUnavailable", in.id, err)
				n++
			}
		}
	}
	frozen.Store(false)
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, 20*time.Second, "runs after the thaw", func(rs []run) bool {
		return len(perTick(rs[before:])) >= 5
	})
	for _, in := range ins {
		in.stop(t)
	}
	after := log.snapshot()[before:]
	counts := perTick(after)
	var ticks []int64
	for tick := range counts {
		ticks = append(ticks, tick)
	}
	slices.Sort(ticks)
	t.Logf("runs per tick after the thaw: %v", counts)
	// The first tick after the thaw may find the lock of the run before the
	// freeze until its TTL ends; the last one may be partial.
	for _, tick := range ticks[1 : len(ticks)-1] {
		if counts[tick] != 1 {
			t.Errorf("tick %d ran %d times after the thaw, want once", tick, counts[tick])
		}
	}
	for tick := ticks[1]; tick < ticks[len(ticks)-1]; tick++ {
		if counts[tick] == 0 {
			t.Errorf("tick %d did not run after the thaw", tick)
		}
	}
}

// The minimum hold: Unlock returns at once, the lock stays held until the
// minimum hold has passed, and the instance's next run takes it over.
func TestLockerMinHold(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	const hold = 500 * time.Millisecond
	a := dlockgocron.NewLocker(newDlock(t, s.Addr()), dlockgocron.WithMinHold(hold))
	bl := newDlock(t, s.Addr())
	b := dlockgocron.NewLocker(bl, dlockgocron.WithMinHold(hold))

	start := time.Now()
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	fence := a.Held("job").Fence()
	if _, err := a.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a second Lock during the run: %v, want ErrNotAcquired", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Errorf("a second Unlock: %v", err)
	}
	if h := a.Held("job"); h != nil {
		t.Errorf("Held after Unlock: %v, want nil", h)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another instance's Lock within the minimum hold: %v, want ErrNotAcquired", err)
	}

	// The next run of the same instance takes the held lock over. The
	// minimum hold runs from when Redis sets the TTL, which is after the
	// call began: measured from then (not from its return, which can come
	// a few milliseconds after Redis set it).
	restart := time.Now()
	la, err = a.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("the same instance's next Lock: %v", err)
	}
	if got := a.Held("job").Fence(); got != fence {
		t.Errorf("fence %d after the takeover, want the held lock's %d", got, fence)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Released once the minimum hold (counted from the takeover) has passed.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	k, err := bl.Acquire(wctx, dlockgocron.DefaultKeyPrefix+"job")
	if err != nil {
		t.Fatal(err)
	}
	if held := time.Since(restart); held < hold {
		t.Errorf("the lock was free %s after the takeover, before the minimum hold of %s", held, hold)
	}
	t.Logf("held %s after the first Lock, %s after the takeover (minimum hold %s)",
		time.Since(start).Round(time.Millisecond), time.Since(restart).Round(time.Millisecond), hold)
	if k.Fence() <= fence {
		t.Errorf("fence %d after %d", k.Fence(), fence)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Without a minimum hold, Unlock releases the lock at once.
func TestLockerNoMinHold(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	a := dlockgocron.NewLocker(newDlock(t, s.Addr()), dlockgocron.WithMinHold(0), dlockgocron.WithKeyPrefix("svc/"))
	b := dlockgocron.NewLocker(newDlock(t, s.Addr()), dlockgocron.WithMinHold(0), dlockgocron.WithKeyPrefix("svc/"))
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if key := a.Held("job").Key(); key != "svc/job" {
		t.Errorf("lock name %q, want svc/job", key)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock lost during the run (force-released by an administrator): the run
// sees Lost, and Unlock reports the loss.
func TestLockerUnlockAfterLost(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	admin := newDlock(t, s.Addr())
	a := dlockgocron.NewLocker(newDlock(t, s.Addr()), dlockgocron.WithLockOptions(dlock.WithTTL(300*time.Millisecond)))
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	h := a.Held("job")
	if n, err := admin.ForceRelease(ctx, h.Key()); err != nil || n != 1 {
		t.Fatalf("ForceRelease: %d, %v", n, err)
	}
	recv(t, h.Lost(), 10*time.Second, "Lost after ForceRelease")
	if err := la.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock after the loss: %v, want an error wrapping ErrLockLost", err)
	}
	// Nothing is held past the loss: the job can run again.
	la, err = a.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after the loss: %v", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock held past Unlock that was lost meanwhile is not taken over: the
// next Lock asks Redis.
func TestLockerLostWhileHeldPastUnlock(t *testing.T) {
	s := dlocktest.Start(t)
	ctx := context.Background()
	admin := newDlock(t, s.Addr())
	a := dlockgocron.NewLocker(newDlock(t, s.Addr()),
		dlockgocron.WithMinHold(time.Minute), dlockgocron.WithLockOptions(dlock.WithTTL(300*time.Millisecond)))
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	h := a.Held("job")
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceRelease(ctx, h.Key()); err != nil {
		t.Fatal(err)
	}
	recv(t, h.Lost(), 10*time.Second, "Lost after ForceRelease")
	la, err = a.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after the held lock was lost: %v", err)
	}
	if got := a.Held("job"); got == h || got.Fence() <= h.Fence() {
		t.Errorf("took the lost lock over (fence %d), want a new one", got.Fence())
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
