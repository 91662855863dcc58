package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// lifecycleOp is one of the calls that end a lock, or act on its key, run
// against another at the same moment (TestLifecycleRaces).
type lifecycleOp struct {
	name string
	run  func(ctx context.Context, r *lifecycleRun) error
}

// lifecycleRun is one race: a lock of l, detached and adopted by adopter
// (into adopted) if one of the calls is Detach.
type lifecycleRun struct {
	l, adopter *dlock.Locker
	k          *dlock.Lock
	mu         sync.Mutex
	adopted    []*dlock.Lock
}

var lifecycleOps = []lifecycleOp{
	{"Close", func(_ context.Context, r *lifecycleRun) error { return r.l.Close() }},
	{"Release", func(ctx context.Context, r *lifecycleRun) error {
		if err := r.k.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			return err
		}
		return nil
	}},
	{"Extend", func(ctx context.Context, r *lifecycleRun) error {
		if err := r.k.Extend(ctx, time.Second); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			return err
		}
		return nil
	}},
	{"Detach", func(ctx context.Context, r *lifecycleRun) error {
		// Handed on at once, as a graceful deploy does: the adopter must
		// keep the hold whatever the first process does meanwhile.
		h := r.k.Detach()
		if h.Token == "" {
			return nil // released before: nothing to adopt
		}
		k, err := r.adopter.Adopt(ctx, h.Key, h.Token, dlock.WithTTL(h.TTL))
		if err == nil {
			r.mu.Lock()
			r.adopted = append(r.adopted, k)
			r.mu.Unlock()
		} else if !errors.Is(err, dlock.ErrNotHeld) {
			return err
		}
		return nil
	}},
}

// TestLifecycleRaces: every pair of Close, Release, Extend and Detach (with
// an Adopt in another Locker right after it) racing on one lock that renews
// itself (a TTL of 300ms: a renewal every 100ms), many times: none hangs,
// each returns what its doc says, and a hold that Detach handed on and
// Adopt took is never released by the process that handed it (a graceful
// deploy: Close in a shutdown handler while a worker detaches): its key
// holds the token once everything settled, and nobody else can take it.
func TestLifecycleRaces(t *testing.T) {
	s := dlocktest.Start(t)
	direct := s.Client()
	defer direct.Close()
	adopter := newLocker(t, direct)
	other := newLocker(t, direct)
	for i, a := range lifecycleOps {
		for _, b := range lifecycleOps[i:] {
			t.Run(a.name+"/"+b.name, func(t *testing.T) {
				for n := range 30 {
					raceOnce(t, s, adopter, other, a, b, fmt.Sprintf("race-%s-%s-%d", a.name, b.name, n))
				}
			})
		}
	}
}

// raceOnce runs a and b at once on a new lock named key, then checks.
func raceOnce(t *testing.T, s *dlocktest.Server, adopter, other *dlock.Locker, a, b lifecycleOp, key string) {
	t.Helper()
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	k, err := l.Acquire(ctx(t), key, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := &lifecycleRun{l: l, adopter: adopter, k: k}
	start := make(chan struct{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, op := range []lifecycleOp{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = op.run(ctxTimeout(t, 10*time.Second), r)
		}()
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s and %s racing: still running after 15s", a.name, b.name)
	}
	for i, op := range []lifecycleOp{a, b} {
		if errs[i] != nil {
			t.Errorf("%s racing %s: %v", op.name, []lifecycleOp{b, a}[i].name, errs[i])
		}
	}
	_ = l.Close() // everything this Locker does for the key has ended then
	for _, ak := range r.adopted {
		if got := lockValue(s, key); got != ak.Token() {
			t.Fatalf("%s racing %s: the adopted hold's key holds %q, not its token: the first process ended the hold it handed on", a.name, b.name, got)
		}
		if k2, err := other.TryAcquire(ctx(t), key); err == nil {
			k2.Release(ctx(t))
			t.Fatalf("%s racing %s: another Locker acquired the key while the adopter holds it", a.name, b.name)
		}
	}
	for _, ak := range r.adopted { // two, when both calls were Detach: one hold
		if err := ak.Release(ctx(t)); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("the adopter's Release: %v", err)
		}
	}
}

// lockValue is the value of key's lock on s, read without dlock.
func lockValue(s *dlocktest.Server, key string) string {
	c := s.Client()
	defer c.Close()
	return c.Get(context.Background(), "dlock:{"+key+"}").Val()
}
