package dlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockrueidis"
	"github.com/dlock-dev/dlock/internal/contract"
	"github.com/dlock-dev/dlock/internal/history"
)

func TestMain(m *testing.M) {
	if history.IsWorker() {
		os.Exit(history.Worker(historyLockers)) // a worker process of TestHistory
	}
	code := m.Run()
	if code == 0 {
		// A rueidis Cluster client closes the connections that a refresh
		// of its slots replaced 5s later, on a goroutine that outlives
		// the client's Close.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func client(t *testing.T, o rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// topologies start their servers and return a maker of Lockers on them
// through rueidis clients (each closed when the test ends).
var topologies = []contract.Topology{
	{Name: "single", Start: func(t *testing.T) func() *dlock.Locker {
		s := dlocktest.Start(t)
		return func() *dlock.Locker {
			l := dlockrueidis.New(client(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
			t.Cleanup(func() { l.Close() })
			return l
		}
	}},
	{Name: "sentinel", Start: func(t *testing.T) func() *dlock.Locker {
		master := dlocktest.Start(t)
		sentinel := dlocktest.StartSentinel(t, "mymaster", master)
		return func() *dlock.Locker {
			l := dlockrueidis.New(client(t, rueidis.ClientOption{InitAddress: []string{sentinel.Addr()},
				Sentinel: rueidis.SentinelOption{MasterSet: "mymaster"}}))
			t.Cleanup(func() { l.Close() })
			return l
		}
	}},
	{Name: "redlock3", Start: func(t *testing.T) func() *dlock.Locker {
		servers := dlocktest.StartN(t, 3)
		return func() *dlock.Locker {
			var cs []rueidis.Client
			for _, s := range servers {
				cs = append(cs, client(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
			}
			l, err := dlockrueidis.NewRedlock(cs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		}
	}},
	{Name: "cluster3", Start: func(t *testing.T) func() *dlock.Locker {
		cl := dlocktest.StartCluster(t, 3)
		return func() *dlock.Locker {
			l := dlockrueidis.New(client(t, rueidis.ClientOption{InitAddress: cl.Addrs()}))
			t.Cleanup(func() { l.Close() })
			return l
		}
	}},
}

// TestContract runs dlock's contract suite (internal/contract, which the
// core runs on go-redis) through rueidis clients, on each topology.
func TestContract(t *testing.T) { contract.Run(t, topologies) }

// TestHistory runs dlock's history checker (internal/history, which the
// core runs on go-redis) through rueidis clients: worker processes under a
// seeded schedule of faults, on one Redis and a 5-node Redlock, two at
// once, 5s each unless $DLOCK_HISTORY_DURATION says otherwise.
func TestHistory(t *testing.T) { history.Test(t, 5*time.Second, true) }

// TestExplore runs dlock's explorer (internal/history, which the core runs
// on go-redis) through rueidis clients: every public call at random and at
// once under command-level faults (the client's node.Client wrapped), on
// one Redis and Redlocks of 3 and 5 masters, each Locker through fault
// proxies of its own, 4s each unless $DLOCK_EXPLORE_DURATION says
// otherwise, three at once.
func TestExplore(t *testing.T) {
	history.Explore{Family: history.Family{Name: "rueidis", New: exploreLocker, ByAddr: true},
		Duration: 4 * time.Second, Topologies: history.Topologies[:3], Parallel: true}.Run(t)
}

// exploreLocker is the explorer's Locker (history.Family.New) on rueidis
// clients, one per address.
func exploreLocker(addrs []string, _ bool, _ func(int, any)) (*dlock.Locker, func(), error) {
	var cs []rueidis.Client
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}})
		if err != nil {
			return nil, closeAll, err
		}
		cs = append(cs, c)
	}
	if len(cs) == 1 {
		return dlockrueidis.New(cs[0]), closeAll, nil
	}
	l, err := dlockrueidis.NewRedlock(cs)
	return l, closeAll, err
}

// historyLockers are a history worker's Lockers (history.Lockers) on
// rueidis clients. A client is made again until its server answers (a
// worker restarted after a kill can meet a server that is down or cut
// off): rueidis.NewClient connects at once.
func historyLockers(addrs []string) (l, adopter *dlock.Locker, closeAll func(), err error) {
	var clients []rueidis.Client
	closeAll = func() {
		for _, x := range []*dlock.Locker{l, adopter} {
			if x != nil {
				x.Close()
			}
		}
		for _, c := range clients {
			c.Close()
		}
	}
	var mine, adopters []rueidis.Client
	for _, a := range append(addrs, addrs...) {
		var c rueidis.Client
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if c, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return nil, nil, closeAll, err
		}
		clients = append(clients, c)
		if len(mine) < len(addrs) {
			mine = append(mine, c)
		} else {
			adopters = append(adopters, c)
		}
	}
	if l, err = dlockrueidis.NewRedlock(mine); err == nil {
		adopter, err = dlockrueidis.NewRedlock(adopters)
	}
	return l, adopter, closeAll, err
}

// TestNewRedlockRefuses: no client, a nil client, the same client twice.
func TestNewRedlockRefuses(t *testing.T) {
	s := dlocktest.Start(t)
	c := client(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	if _, err := dlockrueidis.NewRedlock(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("no client: %v", err)
	}
	if _, err := dlockrueidis.NewRedlock([]rueidis.Client{c, nil}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a nil client: %v", err)
	}
	if _, err := dlockrueidis.NewRedlock([]rueidis.Client{c, c}); !errors.Is(err, dlock.ErrMisconfigured) {
		t.Errorf("the same client twice: %v", err)
	}
	if _, err := dlockrueidis.NewRedlock([]rueidis.Client{c}, dlock.WithNodeTimeout(-1)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("an invalid Option: %v", err)
	}
	// New, as dlock.New: a Locker whose every call returns the error.
	l := dlockrueidis.New(c, dlock.WithNodeTimeout(-1))
	defer l.Close()
	if _, err := l.TryAcquire(context.Background(), "k"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New with an invalid Option, then TryAcquire: %v", err)
	}
}

// TestConnectionClosedRetried: a connection the server closed while the
// client was idle (its idle timeout, a restart, a proxy's) costs no call:
// the script is sent again on a new connection, as go-redis does (dlock's
// scripts are idempotent, so a retried one changes nothing). Without the
// retry, the first TryAcquire after the close failed as unavailable (and
// Acquire logged that Redis did not answer, and tried again after a
// pause).
func TestConnectionClosedRetried(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	c := client(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	l := dlockrueidis.New(c)
	defer l.Close()
	ctx := context.Background()
	// closeClients has the server close every connection but the admin's.
	closeClients := func() {
		if err := admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if i > 0 {
			closeClients()
		}
		lk, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("TryAcquire %d: %v", i, err)
		}
		if i > 0 {
			closeClients()
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
	if n, err := admin.Exists(ctx, "dlock:{k}").Result(); err != nil || n != 0 {
		t.Errorf("the lock key after the last Release: %d, %v", n, err)
	}
}

// TestServerDownFailsFast: on a server that is down, the retries of a
// closed connection (TestConnectionClosedRetried) do not hold a call until
// its node timeout: each dial is refused at once, and so is the call.
func TestServerDownFailsFast(t *testing.T) {
	s := dlocktest.Start(t)
	c := client(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	const nodeTimeout = 5 * time.Second
	l := dlockrueidis.New(c, dlock.WithNodeTimeout(nodeTimeout))
	defer l.Close()
	ctx := context.Background()
	lk, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("TryAcquire on a server that is down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > nodeTimeout/2 {
		t.Errorf("TryAcquire on a server that is down took %s (node timeout %s): it waited for the server", d, nodeTimeout)
	}
}

// TestLateCopyOfShorteningExtend: an Extend to 1234ms whose first copy is
// held up on a connection that failed (conn.Do sends it again, and it is
// answered), then an Extend to 10s; the held copy runs last. The key must
// still live as long as the holder's validity (no command of dlock moves
// an expiry earlier).
func TestLateCopyOfShorteningExtend(t *testing.T) {
	s := dlocktest.Start(t)
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	admin := s.Client()
	defer admin.Close()
	c := client(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}})
	l := dlockrueidis.New(c)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := l.Acquire(ctx, "late", dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	deliver := p.HoldBack("$4\r\n1234\r\n")
	if err := k.Extend(ctx, 1234*time.Millisecond); err != nil {
		t.Fatalf("Extend(1234ms), sent again after a reset: %v", err)
	}
	if err := k.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := deliver(ctx); err != nil {
		t.Fatalf("the held copy: %v", err)
	}
	if pttl, left := admin.PTTL(ctx, "dlock:{late}").Val(), time.Until(k.ValidUntil()); pttl < left {
		t.Fatalf("the key expires in %v, the holder's validity runs %v: a late copy of Extend(1234ms) cut it short", pttl, left)
	}
	if err := k.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}
