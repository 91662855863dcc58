package dlockgocron_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockgocron"
)

type electorFunc func(context.Context) error

func (f electorFunc) IsLeader(ctx context.Context) error { return f(ctx) }

// candidate is one instance with a scheduler whose jobs run only while its
// Elector leads.
type candidate struct {
	id     int
	dl     *dlock.Locker
	el     *dlockgocron.Elector
	closed atomic.Bool // set once dl.Close has returned
	// admittedAfterClose counts the runs IsLeader let through although it
	// was called after dl.Close had returned.
	admittedAfterClose atomic.Int32
}

func newCandidate(t *testing.T, id int, addr, key string, log *runLog, opts ...dlock.LockOption) *candidate {
	t.Helper()
	c := &candidate{id: id, dl: newDlock(t, addr)}
	el, err := dlockgocron.NewElector(context.Background(), c.dl, key, fmt.Sprintf("instance-%d", id), opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.el = el
	t.Cleanup(func() {
		if err := el.Close(); err != nil {
			t.Errorf("Elector %d: Close: %v", id, err)
		}
	})
	if log == nil {
		return c
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(electorFunc(func(ctx context.Context) error {
		closed := c.closed.Load() // before: a Close that returned has ended the leadership
		err := el.IsLeader(ctx)
		if err == nil && closed {
			c.admittedAfterClose.Add(1)
		}
		return err
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("scheduler %d: Shutdown: %v", id, err)
		}
	})
	if _, err := s.NewJob(gocron.DurationJob(100*time.Millisecond),
		gocron.NewTask(func() { log.add(run{inst: id, start: time.Now()}) }),
		gocron.WithName("job")); err != nil {
		t.Fatal(err)
	}
	s.Start()
	return c
}

// observe returns the election's changes, seen by a Locker of its own.
func observe(t *testing.T, addr, key string) <-chan dlock.Leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return newDlock(t, addr).Observe(ctx, key)
}

// nextLeader waits for a leader other than the zero Leader and not, if
// given, one of the terms up to after.
func nextLeader(t *testing.T, ch <-chan dlock.Leader, after uint64) dlock.Leader {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ld, ok := <-ch:
			if !ok {
				t.Fatal("Observe ended")
			}
			if ld.Value != "" && ld.Term > after {
				return ld
			}
		case <-deadline:
			t.Fatalf("no leader after term %d within 10s", after)
		}
	}
}

// waitLeader waits until el leads, and returns the leadership.
func waitLeader(t *testing.T, el *dlockgocron.Elector) *dlock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := el.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func leaderIndex(t *testing.T, ld dlock.Leader) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(ld.Value, "instance-%d", &i); err != nil {
		t.Fatalf("leader value %q: %v", ld.Value, err)
	}
	return i
}

func runsOf(rs []run, inst int) int {
	n := 0
	for _, r := range rs {
		if r.inst == inst {
			n++
		}
	}
	return n
}

// Two schedulers with Electors: only the leader runs the job. When the
// leader's dlock.Locker is closed (its process shutting down), the other
// instance takes over, and the old leader runs nothing more.
func TestElectorFailover(t *testing.T) {
	s := dlocktest.Start(t)
	const key = "gocron-leader"
	leaders := observe(t, s.Addr(), key)
	log := newRunLog()
	cs := []*candidate{
		newCandidate(t, 0, s.Addr(), key, log, dlock.WithTTL(time.Second)),
		newCandidate(t, 1, s.Addr(), key, log, dlock.WithTTL(time.Second)),
	}
	ld := nextLeader(t, leaders, 0)
	old := leaderIndex(t, ld)
	other := 1 - old
	rs := log.waitFor(t, 10*time.Second, "runs of the leader", func(rs []run) bool { return runsOf(rs, old) >= 5 })
	if n := runsOf(rs, other); n != 0 {
		t.Errorf("instance %d ran %d times while instance %d led", other, n, old)
	}
	if err := cs[other].el.IsLeader(context.Background()); !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Errorf("the other instance's IsLeader: %v, want ErrNotLeader", err)
	}
	if l := cs[old].el.Leadership(); l == nil || l.Fence() != ld.Term {
		t.Errorf("the leader's Leadership: %v, want the lock of term %d", l, ld.Term)
	}

	// The leader's process shuts down: its Locker gives the lock back.
	if err := cs[old].dl.Close(); err != nil {
		t.Fatal(err)
	}
	cs[old].closed.Store(true)
	if err := cs[old].el.IsLeader(context.Background()); !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Errorf("IsLeader after its Locker was closed: %v, want ErrNotLeader", err)
	}
	ld2 := nextLeader(t, leaders, ld.Term)
	if leaderIndex(t, ld2) != other {
		t.Fatalf("leader %+v after %+v, want instance %d", ld2, ld, other)
	}
	before := runsOf(log.snapshot(), other)
	rs = log.waitFor(t, 10*time.Second, "runs of the new leader", func(rs []run) bool { return runsOf(rs, other) >= before+5 })
	if n := cs[old].admittedAfterClose.Load(); n != 0 {
		t.Errorf("the old leader's IsLeader admitted %d runs after its Locker was closed", n)
	}
	t.Logf("instance %d led (term %d) and ran %d times, instance %d none; after instance %d's Locker closed, instance %d led (term %d) and ran %d times",
		old, ld.Term, runsOf(rs, old), other, old, other, ld2.Term, runsOf(rs, other))
}

// Close resigns: the other candidate takes over at once, not after the
// leadership's TTL (30s).
func TestElectorCloseResigns(t *testing.T) {
	s := dlocktest.Start(t)
	const key = "resign"
	leaders := observe(t, s.Addr(), key)
	cs := []*candidate{
		newCandidate(t, 0, s.Addr(), key, nil),
		newCandidate(t, 1, s.Addr(), key, nil),
	}
	ld := nextLeader(t, leaders, 0)
	old := leaderIndex(t, ld)
	waitLeader(t, cs[old].el)
	if err := cs[old].el.Close(); err != nil {
		t.Fatal(err)
	}
	err := cs[old].el.IsLeader(context.Background())
	if !errors.Is(err, dlockgocron.ErrNotLeader) || !errors.Is(err, context.Canceled) {
		t.Errorf("IsLeader after Close: %v, want ErrNotLeader and the campaign's end", err)
	}
	if cs[old].el.Leadership() != nil {
		t.Error("Leadership after Close is not nil")
	}
	start := time.Now()
	ld2 := nextLeader(t, leaders, ld.Term)
	if leaderIndex(t, ld2) != 1-old {
		t.Errorf("leader %+v after %+v resigned", ld2, ld)
	}
	if l := waitLeader(t, cs[1-old].el); l.Fence() != ld2.Term {
		t.Errorf("the new leader's term %d, Observe said %d", l.Fence(), ld2.Term)
	}
	if err := cs[1-old].el.IsLeader(context.Background()); err != nil {
		t.Errorf("the new leader's IsLeader: %v", err)
	}
	t.Logf("took over %s after the resignation", time.Since(start).Round(time.Millisecond))
}

// A leadership lost while leading (force-released by an administrator):
// IsLeader fails from the moment Lost closes, and a new term begins.
func TestElectorLostLeadership(t *testing.T) {
	s := dlocktest.Start(t)
	const key = "lost"
	leaders := observe(t, s.Addr(), key)
	admin := newDlock(t, s.Addr())
	cs := []*candidate{
		newCandidate(t, 0, s.Addr(), key, nil, dlock.WithTTL(300*time.Millisecond)),
		newCandidate(t, 1, s.Addr(), key, nil, dlock.WithTTL(300*time.Millisecond)),
	}
	ld := nextLeader(t, leaders, 0)
	el := cs[leaderIndex(t, ld)].el
	h := waitLeader(t, el)
	if _, err := admin.ForceRelease(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	recv(t, h.Lost(), 10*time.Second, "Lost after ForceRelease")
	// The leadership that Lost ended no longer admits runs, whatever the
	// campaign has done since: IsLeader fails unless a new term began.
	if err := el.IsLeader(context.Background()); err == nil {
		if l := el.Leadership(); l == h || l.Fence() <= h.Fence() {
			t.Errorf("IsLeader admits runs on the lost leadership (term %d)", h.Fence())
		}
	} else if !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Errorf("IsLeader after the loss: %v, want ErrNotLeader", err)
	}
	ld2 := nextLeader(t, leaders, ld.Term)
	t.Logf("term %d (%s) lost; term %d (%s) began", ld.Term, ld.Value, ld2.Term, ld2.Value)
	leading := 0
	for _, c := range cs {
		if c.el.IsLeader(context.Background()) == nil {
			leading++
		}
	}
	if leading > 1 {
		t.Errorf("%d instances lead", leading)
	}
}

func TestNewElectorInvalid(t *testing.T) {
	s := dlocktest.Start(t)
	l := newDlock(t, s.Addr())
	ctx := context.Background()
	for _, tc := range []struct {
		l          *dlock.Locker
		key, value string
	}{{nil, "k", "v"}, {l, "", "v"}, {l, "k", ""}, {l, "k", strings.Repeat("v", dlock.MaxMetadata+1)}} {
		if _, err := dlockgocron.NewElector(ctx, tc.l, tc.key, tc.value); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewElector(%v, %q, %q): %v, want ErrInvalid", tc.l != nil, tc.key, tc.value, err)
		}
	}
	// An option Campaign refuses ends the campaign; IsLeader says why.
	el, err := dlockgocron.NewElector(ctx, l, "k", "v", dlock.WithTTL(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := el.WaitLeader(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WaitLeader: %v, want ErrInvalid", err)
	}
	if err := el.Close(); err != nil {
		t.Fatal(err)
	}
	if err := el.IsLeader(ctx); !errors.Is(err, dlockgocron.ErrNotLeader) || !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("IsLeader: %v, want ErrNotLeader and ErrInvalid", err)
	}
}

// TestElectorLimitMismatchRetried: a key held as a semaphore is a
// misconfiguration of the fleet (dlock.ErrMisconfigured, which matches
// dlock.ErrInvalid too): the Elector reports it and keeps trying, and leads
// once the semaphore's holders are gone.
func TestElectorLimitMismatchRetried(t *testing.T) {
	ctx := context.Background()
	addr := dlocktest.Start(t).Addr()
	sem := newDlock(t, addr)
	p, err := sem.Acquire(ctx, "elect-mismatch", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	el, err := dlockgocron.NewElector(ctx, newDlock(t, addr), "elect-mismatch", "me")
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	deadline := time.Now().Add(10 * time.Second)
	for err := el.IsLeader(ctx); !errors.Is(err, dlock.ErrMisconfigured); err = el.IsLeader(ctx) {
		if time.Now().After(deadline) {
			t.Fatalf("IsLeader while the key is a semaphore: %v, want ErrMisconfigured", err)
		}
		time.Sleep(10 * time.Millisecond) // polls a state that has no channel
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, el)
}
