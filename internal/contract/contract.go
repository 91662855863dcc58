// Package contract is the suite of dlock's contract that runs on every
// client family from one table of deployments: the root package's tests
// run it on go-redis clients, extra/dlockrueidis's and extra/dlockvalkey's
// on theirs. Each check is a subtest of each deployment, with its own keys.
package contract

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Topology is one deployment: Start starts its servers and returns a maker
// of Lockers on them, through the family's clients (the maker closes each
// Locker and its clients when the test ends).
type Topology struct {
	Name  string
	Start func(t *testing.T) func() *dlock.Locker
}

// checks are the contract's checks, each given two Lockers of one
// deployment (two processes, as far as the library can tell).
var checks = []struct {
	name string
	run  func(t *testing.T, a, b *dlock.Locker)
}{
	{"exclusion", exclusion},
	{"waiting", waiting},
	{"renewal", renewal},
	{"lost", lost},
	{"semaphore", semaphore},
	{"shared", shared},
	{"acquireAll", acquireAll},
	{"election", election},
}

// Run runs every check on every deployment.
func Run(t *testing.T, topologies []Topology) {
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			mk := topo.Start(t)
			a, b := mk(), mk()
			for _, c := range checks {
				t.Run(c.name, func(t *testing.T) { c.run(t, a, b) })
			}
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// waitFor waits until cond holds, for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exclusion: one holder at a time, Status shows it with its metadata and
// fence, Extend renews it, and the next holder's fence is larger.
func exclusion(t *testing.T, a, b *dlock.Locker) {
	k, err := a.TryAcquire(ctx(t), "job", dlock.WithTTL(20*time.Second), dlock.WithMetadata("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx(t), "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a second holder: %v, want ErrNotAcquired", err)
	}
	st, err := b.Status(ctx(t), "job")
	if err != nil || !st.Held || st.Metadata != "host-a" || st.Fence < k.Fence() || st.TTL <= 0 {
		t.Fatalf("Status: %+v, %v", st, err)
	}
	if err := k.Extend(ctx(t), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Errorf("Release after a successful Release: %v, want nil", err)
	}
	k2, err := b.TryAcquire(ctx(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Release(ctx(t))
	if k2.Fence() <= k.Fence() {
		t.Errorf("fence %d after %d", k2.Fence(), k.Fence())
	}
}

// waiting: a waiter is woken by the release (pub/sub), long before the
// holder's TTL would free the key, and gets a larger fence.
func waiting(t *testing.T, a, b *dlock.Locker) {
	k, err := a.TryAcquire(ctx(t), "wait", dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		k2, err := b.Acquire(ctx(t), "wait", dlock.WithTTL(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- k2
	}()
	waitFor(t, "the waiter", func() bool { st, _ := a.Status(ctx(t), "wait"); return st.Waiters == 1 })
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case k2 := <-got:
		if k2 == nil {
			t.FailNow()
		}
		if k2.Fence() <= k.Fence() {
			t.Errorf("fence %d after %d", k2.Fence(), k.Fence())
		}
		k2.Release(ctx(t))
	case <-time.After(10 * time.Second): // the TTL is 20s: only a wake-up is this quick
		t.Fatal("the waiter was not woken by the release")
	}
}

// renewal: a lock is renewed while it is held: after three of its TTLs it
// is still held and not lost; its release frees it.
func renewal(t *testing.T, a, b *dlock.Locker) {
	const ttl = 500 * time.Millisecond
	k, err := a.TryAcquire(ctx(t), "renewal", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
		t.Fatal("a held lock was reported lost")
	case <-time.After(3 * ttl):
	}
	if _, err := b.TryAcquire(ctx(t), "renewal"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a lock held three TTLs: %v, want ErrNotAcquired", err)
	}
	// (On a Redlock, Status's fence is the largest of the nodes'.)
	if st, err := b.Status(ctx(t), "renewal"); err != nil || !st.Held || st.Fence < k.Fence() {
		t.Errorf("Status of a renewed lock: %+v, %v; want held, fence %d or more", st, err, k.Fence())
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	k2, err := b.TryAcquire(ctx(t), "renewal")
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	_ = k2.Release(ctx(t))
}

// lost: a lock deleted under its holder (ForceRelease) is reported Lost
// at its next renewal.
func lost(t *testing.T, a, b *dlock.Locker) {
	k, err := a.TryAcquire(ctx(t), "lost", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctx(t), "lost"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second): // renewals run every fraction of the 2s TTL
		t.Fatal("a lock deleted under its holder was not reported lost")
	}
	if err := k.Extend(ctx(t), time.Second); !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of a lost lock: %v", err)
	}
}

// semaphore: at most limit permits, shown by Status; a release admits the
// next.
func semaphore(t *testing.T, a, b *dlock.Locker) {
	var permits []*dlock.Lock
	for range 2 {
		p, err := a.TryAcquire(ctx(t), "sem", dlock.WithLimit(2))
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	if _, err := b.TryAcquire(ctx(t), "sem", dlock.WithLimit(2)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a third permit of 2: %v, want ErrNotAcquired", err)
	}
	if st, err := b.Status(ctx(t), "sem"); err != nil || st.Limit != 2 || len(st.Permits) != 2 {
		t.Fatalf("the semaphore's Status: %+v, %v", st, err)
	}
	permits[0].Release(ctx(t))
	p, err := b.TryAcquire(ctx(t), "sem", dlock.WithLimit(2))
	if err != nil {
		t.Fatalf("a permit after a release: %v", err)
	}
	p.Release(ctx(t))
	permits[1].Release(ctx(t))
}

// shared: shared holds together, an exclusive acquisition refused while
// they last and admitted after.
func shared(t *testing.T, a, b *dlock.Locker) {
	r1, err := a.TryAcquire(ctx(t), "rw", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.TryAcquire(ctx(t), "rw", dlock.WithShared())
	if err != nil {
		t.Fatalf("a second shared hold: %v", err)
	}
	if _, err := b.TryAcquire(ctx(t), "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("exclusive during shared holds: %v, want ErrNotAcquired", err)
	}
	r1.Release(ctx(t))
	r2.Release(ctx(t))
	w, err := b.TryAcquire(ctx(t), "rw")
	if err != nil {
		t.Fatalf("exclusive after the shared holds: %v", err)
	}
	w.Release(ctx(t))
}

// acquireAll: all of the keys or none.
func acquireAll(t *testing.T, a, b *dlock.Locker) {
	ks, err := a.AcquireAll(ctx(t), []string{"acct:1", "acct:2"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	if _, err := b.AcquireAll(short, []string{"acct:2", "acct:3"}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("AcquireAll of a held key: %v, want ErrNotAcquired", err)
	}
	if st, _ := b.Status(ctx(t), "acct:3"); st.Held {
		t.Fatal("a failed AcquireAll left a key held")
	}
	for _, k := range ks {
		k.Release(ctx(t))
	}
	ks, err = b.AcquireAll(ctx(t), []string{"acct:2", "acct:3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		k.Release(ctx(t))
	}
}

// election: a leader that Leader and Observe show, and a vacancy that
// Observe announces when it resigns.
func election(t *testing.T, a, b *dlock.Locker) {
	lead, err := a.Campaign(ctx(t), "leader", "a")
	if err != nil {
		t.Fatal(err)
	}
	if ld, err := b.Leader(ctx(t), "leader"); err != nil || ld.Value != "a" {
		t.Fatalf("Leader: %+v, %v", ld, err)
	}
	octx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	obs := b.Observe(octx, "leader")
	if ld := <-obs; ld.Value != "a" {
		t.Fatalf("Observe's first leader: %+v", ld)
	}
	if err := lead.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case ld := <-obs:
		if ld.Value != "" {
			t.Fatalf("after the resignation Observe sent %+v, want the vacancy", ld)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Observe did not announce the vacancy")
	}
}
