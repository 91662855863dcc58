package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockprom"
)

// newCollector returns a Collector made with opts, registered with a
// registry of its own.
func newCollector(t *testing.T, opts ...dlockprom.Option) (*dlockprom.Collector, *prometheus.Registry) {
	t.Helper()
	m := dlockprom.New(opts...)
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// single returns a Locker with hook m on a redis-server of the test's own,
// and a client of that server.
func single(t *testing.T, m dlock.Hook) (*dlock.Locker, *dlocktest.Server) {
	t.Helper()
	s := dlocktest.Start(t)
	c := s.Client()
	l := dlock.New(c, dlock.WithHook(m))
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		c.Close()
	})
	return l, s
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// find returns the series of family name with the labels given as name,
// value pairs (and possibly others), or nil when there is none.
func find(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// value returns the value of a counter or gauge series (0 when absent).
func value(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := find(t, reg, name, labels...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s %v is neither a counter nor a gauge", name, labels)
	return 0
}

// count returns the number of observations of a histogram series (0 when
// absent).
func count(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	m := find(t, reg, name, labels...)
	if m == nil {
		return 0
	}
	if m.Histogram == nil {
		t.Fatalf("%s %v is not a histogram", name, labels)
	}
	return m.Histogram.GetSampleCount()
}

// want fails the test unless the counter or gauge has value v.
func want(t *testing.T, reg prometheus.Gatherer, v float64, name string, labels ...string) {
	t.Helper()
	if got := value(t, reg, name, labels...); got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// wantCount fails the test unless the histogram has n observations.
func wantCount(t *testing.T, reg prometheus.Gatherer, n uint64, name string, labels ...string) {
	t.Helper()
	if got := count(t, reg, name, labels...); got != n {
		t.Errorf("%s%v has %d observations, want %d", name, labels, got, n)
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAcquireRelease(t *testing.T) {
	m, reg := newCollector(t)
	l, _ := single(t, m)
	ctx := ctxTimeout(t, 30*time.Second)
	for i := 0; i < 3; i++ {
		k, err := l.Acquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Do(ctx, "job", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}

	// Every result is exported from the start, at 0.
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dlock_acquisitions_total Lock acquisitions that ended, by result: acquired, busy, timeout, canceled, unavailable, misconfigured, closed, invalid, error.
# TYPE dlock_acquisitions_total counter
dlock_acquisitions_total{result="acquired"} 4
dlock_acquisitions_total{result="busy"} 0
dlock_acquisitions_total{result="canceled"} 0
dlock_acquisitions_total{result="closed"} 0
dlock_acquisitions_total{result="error"} 0
dlock_acquisitions_total{result="invalid"} 0
dlock_acquisitions_total{result="misconfigured"} 0
dlock_acquisitions_total{result="timeout"} 0
dlock_acquisitions_total{result="unavailable"} 0
# HELP dlock_acquisitions_in_progress Lock acquisitions begun and not ended yet (mostly waiting for a busy lock).
# TYPE dlock_acquisitions_in_progress gauge
dlock_acquisitions_in_progress 0
# HELP dlock_locks_lost_total Locks lost while held, by reason: expired, not held, closed.
# TYPE dlock_locks_lost_total counter
dlock_locks_lost_total{reason="closed"} 0
dlock_locks_lost_total{reason="expired"} 0
dlock_locks_lost_total{reason="not held"} 0
`), "dlock_acquisitions_total", "dlock_acquisitions_in_progress", "dlock_locks_lost_total")
	if err != nil {
		t.Error(err)
	}
	want(t, reg, 4, "dlock_acquire_attempts_total", "result", "acquired")
	want(t, reg, 0, "dlock_acquire_attempts_total", "result", "busy")
	wantCount(t, reg, 4, "dlock_acquire_wait_seconds", "result", "acquired")
	wantCount(t, reg, 4, "dlock_held_seconds", "outcome", "released")
	wantCount(t, reg, 0, "dlock_held_seconds", "outcome", "lost")
	want(t, reg, 0, "dlock_release_failures_total")
	want(t, reg, 0, "dlock_renew_failures_total")
	want(t, reg, 0, "dlock_waiters_woken_total")
	if find(t, reg, "dlock_acquire_wait_seconds", "result", "busy") != nil {
		t.Error("a wait histogram for busy, without a busy acquisition")
	}
	if find(t, reg, "dlock_node_errors_total") != nil {
		t.Error("node errors without a failing node")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestBusyTimeoutCanceled(t *testing.T) {
	m, reg := newCollector(t)
	l, s := single(t, m)
	admin := s.Client()
	defer admin.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	k, err := l.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)

	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	want(t, reg, 1, "dlock_acquisitions_total", "result", "busy")
	want(t, reg, 1, "dlock_acquire_attempts_total", "result", "busy")
	wantCount(t, reg, 1, "dlock_acquire_wait_seconds", "result", "busy")

	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "job"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held lock until a deadline: %v, want DeadlineExceeded", err)
	}
	want(t, reg, 1, "dlock_acquisitions_total", "result", "timeout")
	want(t, reg, 1, "dlock_acquisitions_total", "result", "busy")
	want(t, reg, 1, "dlock_acquisitions_total", "result", "acquired")
	wantCount(t, reg, 1, "dlock_acquire_wait_seconds", "result", "timeout")
	if m := find(t, reg, "dlock_acquire_wait_seconds", "result", "timeout"); m != nil && m.Histogram.GetSampleSum() < 0.1 {
		t.Errorf("the Acquire that timed out waited %vs, want about 0.15s", m.Histogram.GetSampleSum())
	}

	cctx, cancelNow := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(cctx, "job")
		got <- err
	}()
	// Once the Acquire waits (in progress), cancel it.
	waitFor(t, "a waiting Acquire", func() bool { return value(t, reg, "dlock_acquisitions_in_progress") == 1 })
	cancelNow()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire of a held lock until cancelled: %v, want Canceled", err)
	}
	want(t, reg, 1, "dlock_acquisitions_total", "result", "canceled")
	want(t, reg, 0, "dlock_acquisitions_in_progress")
}

func TestWaiterWoken(t *testing.T) {
	m, reg := newCollector(t)
	l, s := single(t, m)
	admin := s.Client()
	defer admin.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	k, err := l.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		k2, err := l.Acquire(ctx, "job")
		if err == nil {
			err = k2.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter to find the lock busy", func() bool {
		return value(t, reg, "dlock_acquire_attempts_total", "result", "busy") >= 1
	})
	// The first attempt, before the inbox is subscribed, does not register:
	// released before the waiter is registered, it would not be woken.
	waitFor(t, "the waiter to register", func() bool {
		return admin.ZCard(ctx, "dlock:{job}:waiters").Val() == 1
	})
	want(t, reg, 1, "dlock_acquisitions_in_progress")
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	want(t, reg, 2, "dlock_acquisitions_total", "result", "acquired")
	want(t, reg, 0, "dlock_acquisitions_in_progress")
	if n := value(t, reg, "dlock_waiters_woken_total"); n < 1 {
		t.Errorf("dlock_waiters_woken_total = %v, want at least 1", n)
	}
	wantCount(t, reg, 2, "dlock_held_seconds", "outcome", "released")
}

func TestLostNotHeld(t *testing.T) {
	m, reg := newCollector(t)
	l, s := single(t, m)
	ctx := ctxTimeout(t, 30*time.Second)
	k, err := l.Acquire(ctx, "victim", dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Client()
	defer c.Close()
	if n, err := c.Del(ctx, "dlock:{victim}").Result(); err != nil || n != 1 {
		t.Fatalf("DEL dlock:{victim}: %d, %v", n, err)
	}
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire after the key was deleted")
	}
	// The hook is told after Lost closes.
	waitFor(t, "the loss to be counted", func() bool {
		return value(t, reg, "dlock_locks_lost_total", "reason", dlock.LostNotHeld) == 1
	})
	want(t, reg, 0, "dlock_locks_lost_total", "reason", dlock.LostExpired)
	wantCount(t, reg, 1, "dlock_held_seconds", "outcome", "lost")
	if err := k.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of a lost lock: %v, want ErrNotHeld", err)
	}
	// A lost lock's Release is not an event.
	wantCount(t, reg, 0, "dlock_held_seconds", "outcome", "released")
	want(t, reg, 0, "dlock_release_failures_total")
	t.Logf("renew failures: %v", value(t, reg, "dlock_renew_failures_total"))
}

func TestClosed(t *testing.T) {
	m, reg := newCollector(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder, waiter := dlock.New(c, dlock.WithHook(m)), dlock.New(c, dlock.WithHook(m))
	defer holder.Close()
	defer waiter.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := holder.Acquire(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "job")
		got <- err
	}()
	waitFor(t, "the waiter to find the lock busy", func() bool {
		return value(t, reg, "dlock_acquire_attempts_total", "result", "busy") >= 1
	})
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Acquire waiting while its Locker closes: %v, want ErrClosed", err)
	}
	want(t, reg, 1, "dlock_acquisitions_total", "result", "closed")
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the closed lock to be counted as lost", func() bool {
		return value(t, reg, "dlock_locks_lost_total", "reason", dlock.LostClosed) == 1
	})
	wantCount(t, reg, 1, "dlock_held_seconds", "outcome", "lost")
	want(t, reg, 0, "dlock_acquisitions_in_progress")
}

func TestRedlockSuspectNode(t *testing.T) {
	m, reg := newCollector(t)
	servers := dlocktest.StartN(t, 3)
	l, err := dlock.NewRedlock(dlocktest.Clients(t, servers...), dlock.WithNodeTimeout(100*time.Millisecond), dlock.WithHook(m))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	frozen := servers[2]
	node := frozen.Addr()
	suspect := func() float64 { return value(t, reg, "dlock_node_suspect", "node", node) }

	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer frozen.Thaw()
	// The acquisition is decided by the two nodes that answer; the release
	// waits for every node, up to the node timeout: the frozen one fails it
	// and becomes suspect.
	k, err := l.Acquire(ctx, "quorum")
	if err != nil {
		t.Fatalf("Acquire with 2 of 3 nodes: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the frozen node to be suspect", func() bool { return suspect() == 1 })
	if n := value(t, reg, "dlock_node_errors_total", "node", node); n < 1 {
		t.Errorf("dlock_node_errors_total{node=%q} = %v, want at least 1", node, n)
	}
	for _, s := range servers[:2] {
		if find(t, reg, "dlock_node_errors_total", "node", s.Addr()) != nil || find(t, reg, "dlock_node_suspect", "node", s.Addr()) != nil {
			t.Errorf("node %s, which answers, has node metrics", s.Addr())
		}
	}
	// Still suspect after another round that does not wait for it.
	k, err = l.Acquire(ctx, "quorum")
	if err != nil {
		t.Fatalf("Acquire with 2 of 3 nodes: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if suspect() != 1 {
		t.Errorf("dlock_node_suspect{node=%q} = %v while the node is frozen, want 1", node, suspect())
	}

	if err := frozen.Thaw(); err != nil {
		t.Fatal(err)
	}
	k, err = l.Acquire(ctx, "quorum")
	if err != nil {
		t.Fatalf("Acquire after the thaw: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the thawed node to be no longer suspect", func() bool { return suspect() == 0 })
	want(t, reg, 3, "dlock_acquisitions_total", "result", "acquired")
	want(t, reg, 0, "dlock_acquisitions_in_progress")
	t.Logf("node errors of the frozen node: %v", value(t, reg, "dlock_node_errors_total", "node", node))
}

func TestKeyLabel(t *testing.T) {
	kind := func(key string) string {
		kind, _, _ := strings.Cut(key, ":")
		return kind
	}
	m, reg := newCollector(t, dlockprom.WithKeyLabel(kind))
	l, _ := single(t, m)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, key := range []string{"invoice:1", "invoice:2", "user:7"} {
		k, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A name that is not UTF-8 (dlock takes any string) does not panic.
	if _, err := l.TryAcquire(ctx, "\xff\xfe:42"); err != nil {
		t.Fatal(err)
	}
	want(t, reg, 1, "dlock_acquisitions_total", "key", "\uFFFD", "result", "acquired")
	want(t, reg, 2, "dlock_acquisitions_total", "key", "invoice", "result", "acquired")
	want(t, reg, 1, "dlock_acquisitions_total", "key", "user", "result", "acquired")
	wantCount(t, reg, 2, "dlock_held_seconds", "key", "invoice", "outcome", "released")
	want(t, reg, 0, "dlock_acquisitions_in_progress", "key", "invoice")
	if n := testutil.CollectAndCount(m, "dlock_acquisitions_in_progress"); n != 3 {
		t.Errorf("%d series of dlock_acquisitions_in_progress, want 3 (one per key label value)", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestKeyLabelLimit(t *testing.T) {
	m, reg := newCollector(t, dlockprom.WithKeyLabel(func(key string) string { return key }))
	ctx := context.Background()
	const extra = 5
	for i := 0; i < dlockprom.KeyLabelLimit+extra; i++ {
		key := fmt.Sprint("account:", i)
		m.Event(m.Start(ctx, key), dlock.Event{Kind: dlock.EventAcquired, Key: key})
	}
	if n := testutil.CollectAndCount(m, "dlock_acquisitions_in_progress"); n != dlockprom.KeyLabelLimit+1 {
		t.Errorf("%d series of dlock_acquisitions_in_progress, want %d", n, dlockprom.KeyLabelLimit+1)
	}
	want(t, reg, extra, "dlock_acquisitions_total", "key", dlockprom.OverflowKeyLabel, "result", "acquired")
	want(t, reg, 1, "dlock_acquisitions_total", "key", "account:0", "result", "acquired")
	want(t, reg, 0, "dlock_acquisitions_in_progress", "key", dlockprom.OverflowKeyLabel)
}

func TestRefusalResults(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: held", dlock.ErrNotAcquired), dlockprom.ResultBusy},
		{fmt.Errorf("%w: %w", dlock.ErrNotAcquired, context.DeadlineExceeded), dlockprom.ResultTimeout},
		{fmt.Errorf("%w: %w", dlock.ErrNotAcquired, context.Canceled), dlockprom.ResultCanceled},
		{fmt.Errorf("%w: %w", dlock.ErrUnavailable, context.DeadlineExceeded), dlockprom.ResultUnavailable},
		{fmt.Errorf("%w: %w", dlock.ErrMisconfigured, &dlock.NodeError{Addr: "a", Err: errors.New("NOPERM")}), dlockprom.ResultMisconfigured},
		{fmt.Errorf("%w: acquire", dlock.ErrClosed), dlockprom.ResultClosed},
		{fmt.Errorf("%w: limit", dlock.ErrInvalid), dlockprom.ResultInvalid},
		{errors.New("something else"), dlockprom.ResultError},
	} {
		m, reg := newCollector(t)
		m.Event(m.Start(ctx, "k"), dlock.Event{Kind: dlock.EventRefused, Key: "k", Err: tc.err, Wait: time.Millisecond})
		want(t, reg, 1, "dlock_acquisitions_total", "result", tc.want)
		wantCount(t, reg, 1, "dlock_acquire_wait_seconds", "result", tc.want)
		want(t, reg, 0, "dlock_acquisitions_in_progress")
	}
}

func TestOptions(t *testing.T) {
	reg := prometheus.NewRegistry()
	custom := dlockprom.New(dlockprom.WithNamespace("app"), dlockprom.WithSubsystem("locks"),
		dlockprom.WithConstLabels(prometheus.Labels{"store": "sessions"}), dlockprom.WithWaitBuckets(0.1, 1),
		dlockprom.WithHeldBuckets(60))
	reg.MustRegister(custom, dlockprom.New()) // no clash with the default names
	ctx := context.Background()
	custom.Event(custom.Start(ctx, "k"), dlock.Event{Kind: dlock.EventAcquired, Key: "k", Wait: 50 * time.Millisecond})
	custom.Event(ctx, dlock.Event{Kind: dlock.EventReleased, Key: "k", Held: time.Second})
	m := find(t, reg, "app_locks_acquire_wait_seconds", "store", "sessions", "result", "acquired")
	if m == nil {
		t.Fatal("no app_locks_acquire_wait_seconds{store=\"sessions\",result=\"acquired\"}")
	}
	var bounds []float64
	for _, b := range m.Histogram.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	if fmt.Sprint(bounds) != "[0.1 1]" || m.Histogram.GetBucket()[0].GetCumulativeCount() != 1 {
		t.Errorf("wait buckets %v (%v), want [0.1 1] with one observation in the first", bounds, m.Histogram.GetBucket())
	}
	if m := find(t, reg, "app_locks_held_seconds", "outcome", "released"); m == nil || len(m.Histogram.GetBucket()) != 1 {
		t.Errorf("app_locks_held_seconds: %v, want one bucket", m)
	}
	want(t, reg, 0, "dlock_acquisitions_total", "result", "acquired")
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestAllocsPerEvent measures the allocations of the hook per event, once
// every series has been resolved: there must be none.
func TestAllocsPerEvent(t *testing.T) {
	ctx := context.Background()
	errNode := &dlock.NodeError{Addr: "10.0.0.1:6379", Err: errors.New("i/o timeout")}
	refused := fmt.Errorf("%w: %w", dlock.ErrNotAcquired, context.DeadlineExceeded)
	events := []dlock.Event{
		{Kind: dlock.EventAttempt, Key: "invoice:1", Attempt: 1, Err: dlock.ErrNotAcquired},
		{Kind: dlock.EventWoken, Key: "invoice:1", Attempt: 1},
		{Kind: dlock.EventAttempt, Key: "invoice:1", Attempt: 2},
		{Kind: dlock.EventAcquired, Key: "invoice:1", Attempt: 2, Wait: 3 * time.Millisecond, Fence: 7, TTL: 30 * time.Second},
		{Kind: dlock.EventRenewFailed, Key: "invoice:1", Err: dlock.ErrUnavailable},
		{Kind: dlock.EventReleased, Key: "invoice:1", Held: 2 * time.Second},
		{Kind: dlock.EventRefused, Key: "invoice:1", Attempt: 0, Wait: time.Second, Err: refused},
		{Kind: dlock.EventLost, Key: "invoice:1", Held: time.Second, Reason: dlock.LostNotHeld, Err: dlock.ErrNotHeld},
		{Kind: dlock.EventNodeError, Key: "invoice:1", Node: "10.0.0.1:6379", Err: errNode},
		{Kind: dlock.EventNodeSuspect, Node: "10.0.0.1:6379"},
		{Kind: dlock.EventNodeBack, Node: "10.0.0.1:6379"},
	}
	for _, tc := range []struct {
		name string
		opts []dlockprom.Option
	}{
		{"default", nil},
		{"key label", []dlockprom.Option{dlockprom.WithKeyLabel(func(key string) string {
			kind, _, _ := strings.Cut(key, ":")
			return kind
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newCollector(t, tc.opts...)
			run := func() {
				for _, e := range events {
					if e.Kind == dlock.EventRefused || e.Kind == dlock.EventAttempt && e.Attempt == 1 {
						m.Start(ctx, e.Key) // an acquisition begins
					}
					m.Event(ctx, e)
				}
			}
			run() // resolves every series
			allocs := testing.AllocsPerRun(1000, run)
			perEvent := allocs / float64(len(events)+2)
			t.Logf("%.2f allocations per run of %d events: %.3f per event", allocs, len(events)+2, perEvent)
			if allocs != 0 {
				t.Errorf("%v allocations per run of %d events, want 0", allocs, len(events)+2)
			}
			want(t, reg, 0, "dlock_acquisitions_in_progress")
			want(t, reg, 0, "dlock_node_suspect", "node", "10.0.0.1:6379")
		})
	}
}

func BenchmarkEvent(b *testing.B) {
	m := dlockprom.New()
	ctx := context.Background()
	acquired := dlock.Event{Kind: dlock.EventAcquired, Key: "invoice:1", Attempt: 1, Wait: time.Millisecond}
	released := dlock.Event{Kind: dlock.EventReleased, Key: "invoice:1", Held: time.Second}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Event(m.Start(ctx, acquired.Key), acquired)
			m.Event(ctx, released)
		}
	})
}

// TestLimitMismatch: a key held with another limit counts as
// "misconfigured", for the acquisition and for its attempt alike.
func TestLimitMismatch(t *testing.T) {
	m, reg := newCollector(t)
	l, s := single(t, m)
	ctx := ctxTimeout(t, 30*time.Second)
	c := s.Client()
	defer c.Close()
	holder := dlock.New(c)
	defer holder.Close()
	k, err := holder.Acquire(ctx, "pool", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	if _, err := l.Acquire(ctx, "pool", dlock.WithLimit(3)); !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("Acquire with another limit: %v, want ErrMisconfigured", err)
	}
	want(t, reg, 1, "dlock_acquisitions_total", "result", "misconfigured")
	want(t, reg, 0, "dlock_acquisitions_total", "result", "invalid")
	want(t, reg, 1, "dlock_acquire_attempts_total", "result", "misconfigured")
}
