package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// featureShared: two shared holds at once; a writer that waits keeps new
// shared holds out, and the last reader's release wakes it.
func featureShared(ctx context.Context, e *featureEnv) error {
	r1, err := e.locker.Acquire(ctx, "rw", dlock.WithShared())
	if err != nil {
		return err
	}
	r2, err := e.locker.Acquire(ctx, "rw", dlock.WithShared())
	if err != nil {
		return err
	}
	wrote := later(acquireRelease(ctx, e.newLocker(e.newClient()), "rw")) // the writer
	if err := statusUntil(ctx, e.locker, "rw", func(s dlock.Status) bool { return s.Writers >= 1 }); err != nil {
		return err
	}
	if _, err := e.locker.TryAcquire(ctx, "rw", dlock.WithShared()); !errors.Is(err, dlock.ErrNotAcquired) {
		return fmt.Errorf("a reader while a writer waits: %v, want ErrNotAcquired", err)
	}
	if err := r1.Release(ctx); err != nil {
		return err
	}
	if err := r2.Release(ctx); err != nil {
		return err
	}
	return woken(wrote, "the last reader's release")
}

// featureAcquireAll: two AcquireAll calls naming the keys in opposite
// orders both end, each with every key.
func featureAcquireAll(ctx context.Context, e *featureEnv) error {
	other := e.newLocker(e.newClient())
	errs := make(chan error, 2)
	for _, c := range []struct {
		l    *dlock.Locker
		keys []string
	}{{e.locker, []string{"acct:7", "acct:3"}}, {other, []string{"acct:3", "acct:7"}}} {
		go func() {
			for i := 0; i < 5; i++ {
				locks, err := c.l.AcquireAll(ctx, c.keys)
				if err != nil {
					errs <- err
					return
				}
				for _, k := range locks {
					if err := k.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	return errors.Join(<-errs, <-errs)
}

func featureElection(ctx context.Context, e *featureEnv) error {
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := e.newLocker(e.newClient()).Observe(octx, "elect")
	if ld := <-changes; ld.Value != "" {
		return fmt.Errorf("first observed %+v, want vacant", ld)
	}
	lead, err := e.locker.Campaign(ctx, "elect", "host-a")
	if err != nil {
		return err
	}
	if ld := <-changes; ld.Value != "host-a" || ld.Term != lead.Fence() {
		return fmt.Errorf("observed %+v, want host-a, term %d", ld, lead.Fence())
	}
	if ld, err := e.locker.Leader(ctx, "elect"); err != nil || ld.Value != "host-a" {
		return fmt.Errorf("Leader: %+v, %v", ld, err)
	}
	if err := lead.Release(ctx); err != nil {
		return err
	}
	if ld := <-changes; ld.Value != "" {
		return fmt.Errorf("observed %+v after resigning, want vacant", ld)
	}
	if _, err := e.locker.Leader(ctx, "elect"); !errors.Is(err, dlock.ErrNoLeader) {
		return fmt.Errorf("Leader after resigning: %v, want ErrNoLeader", err)
	}
	return nil
}

// featureDeadLeader: an observer sees a leader that died without resigning
// go, once its lock expired.
func featureDeadLeader(ctx context.Context, e *featureEnv) error {
	err := e.crashedHolder(func(l *dlock.Locker) error {
		_, err := l.Campaign(ctx, "dead-leader", "host-b", dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
		return err
	})
	if err != nil {
		return err
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := e.locker.Observe(octx, "dead-leader")
	if ld := <-changes; ld.Value != "host-b" {
		return fmt.Errorf("first observed %+v, want host-b", ld)
	}
	select {
	case ld := <-changes:
		if ld.Value != "" {
			return fmt.Errorf("observed %+v, want vacant", ld)
		}
		return nil
	case <-time.After(3 * time.Second):
		return errors.New("a dead leader was still observed 3s after its lock's TTL of 1s")
	}
}

func featureStatus(ctx context.Context, e *featureEnv) error {
	k, err := e.locker.Acquire(ctx, "status", dlock.WithMetadata("job 7"))
	if err != nil {
		return err
	}
	waiter := e.newLocker(e.newClient())
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = waiter.Acquire(wctx, "status") }()
	if err := waiting(ctx, e.locker, "status", 1); err != nil {
		return err
	}
	s, err := e.locker.Status(ctx, "status")
	if err != nil {
		return err
	}
	if !s.Held || s.Metadata != "job 7" || s.Fence != k.Fence() || s.Waiters != 1 || s.TTL <= 0 {
		return fmt.Errorf("Status: %+v, want held by %q, fence %d, 1 waiter", s, "job 7", k.Fence())
	}
	return k.Release(ctx)
}

// eventKinds records the kinds of events a Hook is told.
type eventKinds chan dlock.EventKind

func (eventKinds) Start(ctx context.Context, _ string) context.Context { return ctx }
func (h eventKinds) Event(_ context.Context, ev dlock.Event) {
	select {
	case h <- ev.Kind:
	default:
	}
}

func featureHook(ctx context.Context, e *featureEnv) error {
	events := make(eventKinds, 16)
	l := e.newLocker(e.newClient(), dlock.WithHook(events))
	if err := l.Do(ctx, "hook", func(context.Context) error { return nil }); err != nil {
		return err
	}
	var got []dlock.EventKind
	for len(events) > 0 {
		got = append(got, <-events)
	}
	want := []dlock.EventKind{dlock.EventAttempt, dlock.EventAcquired, dlock.EventReleased}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("events %v, want %v", got, want)
	}
	return nil
}

// featureClose: Close releases what its Locker holds, and a waiter
// elsewhere takes the lock at once.
func featureClose(ctx context.Context, e *featureEnv) error {
	closing := e.newLocker(e.newClient())
	if _, err := closing.Acquire(ctx, "close"); err != nil {
		return err
	}
	got := later(acquireRelease(ctx, e.locker, "close"))
	if err := waiting(ctx, e.locker, "close", 1); err != nil {
		return err
	}
	if err := closing.Close(); err != nil {
		return err
	}
	return woken(got, "the holder's Close")
}

// featureRedlock: a Redlock over three servers of the same kind.
func featureRedlock(ctx context.Context, e *featureEnv) error {
	clients := []redis.UniversalClient{e.client}
	for i := 0; i < 2; i++ {
		clients = append(clients, newFeatureEnv(e.t, e.kind()).client)
	}
	l, err := dlock.NewRedlock(clients)
	if err != nil {
		return err
	}
	defer l.Close()
	k, err := l.Acquire(ctx, "redlock", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		return err
	}
	if _, err := l.TryAcquire(ctx, "redlock"); !errors.Is(err, dlock.ErrNotAcquired) {
		return fmt.Errorf("TryAcquire of a held Redlock lock: %v, want ErrNotAcquired", err)
	}
	select {
	case <-k.Lost():
		return errors.New("lost while renewed")
	case <-time.After(time.Second):
	}
	return k.Release(ctx)
}

// featureRedlockSameServer: two addresses of one server (127.0.0.1:P and
// localhost:P) in a Redlock are found out by the servers' run ids (INFO
// server, which miniredis does not answer: the check is skipped there).
func featureRedlockSameServer(ctx context.Context, e *featureEnv) error {
	_, port, _ := strings.Cut(e.addr, ":")
	alias := redis.NewClient(&redis.Options{Addr: "localhost:" + port})
	defer alias.Close()
	third := newFeatureEnv(e.t, e.kind()).client
	l, err := dlock.NewRedlock([]redis.UniversalClient{e.client, alias, third})
	if err != nil {
		return err
	}
	defer l.Close()
	for i := 0; i < 3; i++ { // the run ids come with the first rounds
		k, err := l.TryAcquire(ctx, "same-server")
		if errors.Is(err, dlock.ErrMisconfigured) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := k.Release(ctx); err != nil {
			return err
		}
	}
	return errors.New("a Redlock over one server twice still acquires")
}

// featureClusterClient: a Locker of a Cluster client (on miniredis, one
// node that serves every slot, without sharded pub/sub: dlock uses the
// classic inbox there), with a woken waiter.
func featureClusterClient(ctx context.Context, e *featureEnv) error {
	addrs := []string{e.addr}
	if e.mini == nil {
		addrs = dlocktest.StartCluster(e.t, 1).Addrs()
	}
	var lockers []*dlock.Locker
	for i := 0; i < 2; i++ {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		defer cc.Close()
		lockers = append(lockers, e.newLocker(cc))
	}
	k, err := lockers[0].Acquire(ctx, "cluster")
	if err != nil {
		return err
	}
	got := later(acquireRelease(ctx, lockers[1], "cluster"))
	if err := waiting(ctx, lockers[0], "cluster", 1); err != nil {
		return err
	}
	if err := k.Release(ctx); err != nil {
		return err
	}
	return woken(got, "the release")
}

func featureFenced(ctx context.Context, e *featureEnv) error {
	store := fenced.New(e.client)
	k, err := e.locker.Acquire(ctx, "row")
	if err != nil {
		return err
	}
	defer k.Release(ctx)
	if _, _, err := store.Claim(ctx, "row", k.Fence()); err != nil {
		return err
	}
	if err := store.Set(ctx, "row", "v", k.Fence()); err != nil {
		return err
	}
	if err := store.Set(ctx, "row", "stale", k.Fence()-1); !errors.Is(err, fenced.ErrStale) {
		return fmt.Errorf("a stale write: %v, want ErrStale", err)
	}
	return nil
}
