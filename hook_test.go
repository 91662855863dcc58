package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// recorder is a Hook that records every event, and checks that each
// acquisition's events carry the context its Start returned.
type recorder struct {
	mu     sync.Mutex
	events []dlock.Event
	starts map[string]int
	badCtx int
	signal chan struct{}
}

type startKey struct{}

func newRecorder() *recorder {
	return &recorder{starts: make(map[string]int), signal: make(chan struct{}, 1)}
}

func (r *recorder) Start(ctx context.Context, key string) context.Context {
	r.mu.Lock()
	r.starts[key]++
	r.mu.Unlock()
	return context.WithValue(ctx, startKey{}, key)
}

func (r *recorder) Event(ctx context.Context, e dlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case dlock.EventAttempt, dlock.EventAcquired, dlock.EventRefused, dlock.EventWoken, dlock.EventLost, dlock.EventRenewFailed:
		if ctx.Value(startKey{}) != e.Key || (e.Kind == dlock.EventLost && ctx.Err() != nil) {
			r.badCtx++
		}
	}
	r.events = append(r.events, e)
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// of returns the events of kind, in order.
func (r *recorder) of(kind dlock.EventKind) []dlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var es []dlock.Event
	for _, e := range r.events {
		if e.Kind == kind {
			es = append(es, e)
		}
	}
	return es
}

func (r *recorder) kinds(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []string
	for _, e := range r.events {
		if e.Key == key {
			ks = append(ks, e.Kind.String())
		}
	}
	return ks
}

// await waits until cond holds for the recorded events.
func (r *recorder) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-r.signal:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestHookAcquireRelease(t *testing.T) {
	rec := newRecorder()
	l, _, _ := single(t, dlock.WithHook(rec))
	k, err := l.Acquire(ctx(t), "h1", dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rec.kinds("h1"), ","), "attempt,acquired,released"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	acq := rec.of(dlock.EventAcquired)[0]
	if acq.Fence != k.Fence() || acq.TTL != 5*time.Second || acq.Attempt != 1 || acq.Wait <= 0 {
		t.Errorf("acquired event %+v", acq)
	}
	if rel := rec.of(dlock.EventReleased)[0]; rel.Err != nil || rel.Held <= 0 {
		t.Errorf("released event %+v", rel)
	}
	if rec.starts["h1"] != 1 || rec.badCtx != 0 {
		t.Errorf("%d starts, %d events without Start's context", rec.starts["h1"], rec.badCtx)
	}
	// A second Release is not an event.
	_ = k.Release(ctx(t))
	if n := len(rec.of(dlock.EventReleased)); n != 1 {
		t.Errorf("%d released events, want 1", n)
	}
}

func TestHookRefusedAndWoken(t *testing.T) {
	rec := newRecorder()
	l, _, c := single(t, dlock.WithHook(rec))
	other := newLocker(t, c)
	held, err := other.Acquire(ctx(t), "h2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx(t), "h2"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v", err)
	}
	ref := rec.of(dlock.EventRefused)
	if len(ref) != 1 || !errors.Is(ref[0].Err, dlock.ErrNotAcquired) || ref[0].Attempt != 1 {
		t.Fatalf("refused events %+v", ref)
	}
	if at := rec.of(dlock.EventAttempt); len(at) != 1 || !errors.Is(at[0].Err, dlock.ErrNotAcquired) {
		t.Fatalf("attempt events %+v", at)
	}

	got := make(chan error, 1)
	go func() {
		k, err := l.Acquire(ctx(t), "h2")
		if err == nil {
			err = k.Release(context.Background())
		}
		got <- err
	}()
	// Once the waiter is registered in Redis, release: the release wakes it.
	waitFor(t, func() bool { return c.ZCard(ctx(t), "dlock:{h2}:waiters").Val() > 0 }, "the waiter's registration")
	if err := held.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if len(rec.of(dlock.EventWoken)) == 0 {
		t.Errorf("no woken event: %v", rec.kinds("h2"))
	}
	acq := rec.of(dlock.EventAcquired)
	if len(acq) != 1 || acq[0].Attempt < 2 {
		t.Errorf("acquired events %+v, want one after at least 2 attempts", acq)
	}
	if rec.badCtx != 0 {
		t.Errorf("%d events without Start's context", rec.badCtx)
	}
}

// TestHookStartsEnd: every Start ends in exactly one acquired or refused
// event, also when ten waiters give up at once.
func TestHookStartsEnd(t *testing.T) {
	rec := newRecorder()
	l, _, c := single(t, dlock.WithHook(rec))
	held, err := newLocker(t, c).Acquire(ctx(t), "h3")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	cctx, cancel := context.WithCancel(ctx(t))
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Acquire(cctx, "h3"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Errorf("Acquire: %v", err)
			}
		}()
	}
	rec.await(t, "a first attempt", func() bool { return len(rec.of(dlock.EventAttempt)) > 0 })
	cancel()
	wg.Wait()
	if n := len(rec.of(dlock.EventRefused)); n != 10 || rec.starts["h3"] != 10 {
		t.Errorf("%d starts, %d refused events, want 10 and 10", rec.starts["h3"], n)
	}
	for _, e := range rec.of(dlock.EventRefused) {
		if !errors.Is(e.Err, context.Canceled) {
			t.Errorf("refused with %v", e.Err)
		}
	}
}

func TestHookLost(t *testing.T) {
	rec := newRecorder()
	l, s, c := single(t, dlock.WithHook(rec))

	// Deleted behind its back: not held.
	k, err := l.Acquire(ctx(t), "gone", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c.Del(ctx(t), "dlock:{gone}")
	<-k.Lost()
	rec.await(t, "the lost event", func() bool { return len(rec.of(dlock.EventLost)) == 1 })
	lost := rec.of(dlock.EventLost)
	if len(lost) != 1 || lost[0].Reason != dlock.LostNotHeld || !errors.Is(lost[0].Err, dlock.ErrLockLost) || lost[0].Held <= 0 {
		t.Fatalf("lost events %+v", lost)
	}
	_ = k.Release(ctx(t)) // not an event: the lock was lost
	if n := len(rec.of(dlock.EventReleased)); n != 0 {
		t.Errorf("%d released events for a lost lock", n)
	}

	// Redis down: renewals fail, then the validity runs out.
	k, err = l.Acquire(ctx(t), "frozen", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	<-k.Lost()
	// Where go-redis retries a refused dial until the call's deadline
	// (v9.23), the first renewal takes the whole validity: the lock is lost
	// before a renewal could fail, and its node error comes after, at the
	// round's deadline, while Redis is still down (restarted earlier, the
	// retried dial gets through and the renewal is refused instead).
	rec.await(t, "a node error", func() bool { return len(rec.of(dlock.EventNodeError)) > 0 })
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "the lost event", func() bool { return len(rec.of(dlock.EventLost)) == 2 })
	lost = rec.of(dlock.EventLost)
	if len(lost) != 2 || lost[1].Reason != dlock.LostExpired || lost[1].Key != "frozen" {
		t.Fatalf("lost events %+v", lost)
	}
	if rf := rec.of(dlock.EventRenewFailed); dlock.DefaultClientsInline() && (len(rf) == 0 || rf[0].Key != "frozen" || !errors.Is(rf[0].Err, dlock.ErrUnavailable)) {
		t.Errorf("renew failed events %+v", rf)
	}
	if ne := rec.of(dlock.EventNodeError); len(ne) == 0 || ne[0].Node != s.Addr() || ne[0].Key != "frozen" {
		t.Errorf("node error events %+v", ne)
	}

	// Closed, with the acquisition's context cancelled.
	actx, cancel := context.WithCancel(ctx(t))
	if _, err := l.Acquire(actx, "closing"); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = l.Close()
	lost = rec.of(dlock.EventLost)
	if len(lost) != 3 || lost[2].Reason != dlock.LostClosed {
		t.Fatalf("lost events %+v", lost)
	}
	if rec.badCtx != 0 {
		t.Errorf("%d events without their acquisition's context, or with its cancellation", rec.badCtx)
	}
}

// TestHookNodeSuspect: on a Redlock, a frozen node is reported failed and
// suspect, and back once it answers.
func TestHookNodeSuspect(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	rec := newRecorder()
	l, err := dlock.NewRedlock(dlocktest.Clients(t, servers...), dlock.WithHook(rec), dlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	thaw := freeze(t, servers[2])
	k, err := l.Acquire(ctx(t), "sus")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	addr := servers[2].Addr()
	if s := rec.of(dlock.EventNodeSuspect); len(s) != 1 || s[0].Node != addr {
		t.Fatalf("suspect events %+v", s)
	}
	if ne := rec.of(dlock.EventNodeError); len(ne) == 0 || ne[0].Node != addr || !errors.Is(ne[0].Err, context.DeadlineExceeded) {
		t.Errorf("node error events %+v", ne)
	}
	thaw()
	rec.await(t, "the node back", func() bool {
		if k, err := l.Acquire(ctx(t), "sus"); err == nil {
			_ = k.Release(ctx(t))
		}
		return len(rec.of(dlock.EventNodeBack)) > 0
	})
	if b := rec.of(dlock.EventNodeBack); len(b) != 1 || b[0].Node != addr {
		t.Errorf("back events %+v", b)
	}
}

// TestLogger: WithLogger logs a lost lock, a failing node once, and an
// inbox subscription the ACL refuses, without the user wiring anything.
func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}

	l, s, _ := single(t, dlock.WithLogger(log))
	k, err := l.Acquire(ctx(t), "logged", dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	<-k.Lost()
	waitFor(t, func() bool {
		return strings.Contains(logged(), "lock lost") && strings.Contains(logged(), "node failed")
	}, "the lost lock and the node's failure logged")
	out := logged()
	if !strings.Contains(out, `level=WARN msg="dlock: lock lost" key=logged reason=expired`) {
		t.Errorf("no lost lock in the log:\n%s", out)
	}
	// Renewals fail every few milliseconds; a repeated failure is quiet
	// (the first ones may differ: a broken connection, then a refused one).
	if n := strings.Count(out, `msg="dlock: node failed"`); n < 1 || n > 3 {
		t.Errorf("%d node failures logged, want 1 to 3 (repeats are quiet):\n%s", n, out)
	}
	if strings.Contains(out, "acquired") {
		t.Errorf("an acquisition logged above Debug:\n%s", out)
	}

	// An ACL user without dlock's channels: waiting cannot work.
	secured, _ := securedServer(t)
	nc := redis.NewClient(&redis.Options{Addr: secured.Addr(), Username: "nochannels", Password: "pw"})
	defer nc.Close()
	admin := redis.NewClient(&redis.Options{Addr: secured.Addr(), Password: "secret"})
	defer admin.Close()
	held, err := newLocker(t, admin).Acquire(ctx(t), "acl")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	nl := newLocker(t, nc, dlock.WithLogger(log))
	if _, err := nl.Acquire(ctx(t), "acl"); !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("Acquire: %v", err)
	}
	if out := logged(); !strings.Contains(out, `level=ERROR msg="dlock: node refused the subscription to the waiters' channel`) {
		t.Errorf("no refused subscription in the log:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func TestEventKindString(t *testing.T) {
	for k := dlock.EventAttempt; k <= dlock.EventNodeBack; k++ {
		if s := k.String(); s == "unknown" || s == "" {
			t.Errorf("kind %d has no name", k)
		}
	}
	if s := dlock.EventKind(200).String(); s != "unknown" {
		t.Errorf("kind 200: %q", s)
	}
}

// afterScript runs fn once, after the first script call (EVALSHA, or EVAL
// after NOSCRIPT) that succeeds while armed.
type afterScript struct {
	armed atomic.Bool
	fn    func()
}

func (a *afterScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *afterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a.after(cmd, err)
		return err
	}
}

func (a *afterScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			a.after(c, c.Err())
		}
		return err
	}
}

func (a *afterScript) after(cmd redis.Cmder, err error) {
	if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && a.armed.CompareAndSwap(true, false) {
		a.fn()
	}
}

// TestHookClosedDuringAcquire: a lock granted while the Locker closes is
// given back, and the hook hears of a refusal only: no release of a lock
// it was never told of.
func TestHookClosedDuringAcquire(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	rec := newRecorder()
	l := dlock.New(c, dlock.WithHook(rec))
	hook := &afterScript{fn: func() { _ = l.Close() }}
	c.AddHook(hook)
	hook.armed.Store(true)
	if _, err := l.Acquire(ctx(t), "closing"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Acquire: %v, want ErrClosed", err)
	}
	got := strings.Join(rec.kinds("closing"), ",")
	if !dlock.DefaultClientsInline() {
		// The call runs on a helper goroutine, and Close, called from
		// within it, waits (up to its bound) for the acquisition: the
		// round times out meanwhile, a node error.
		got = strings.TrimPrefix(got, "node error,")
	}
	if want := "attempt,refused"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

// TestHookLostBeforeTold: a lock lost (its Locker closed) before the hook
// heard of its acquisition is reported lost after it, with the
// acquisition's context.
func TestHookLostBeforeTold(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	entered, resume := make(chan struct{}), make(chan struct{})
	rec := newRecorder()
	gate := hookFunc(func(ctx context.Context, e dlock.Event) {
		if e.Kind == dlock.EventAttempt && e.Err == nil {
			close(entered)
			<-resume
		}
		rec.Event(ctx, e)
	})
	l := dlock.New(c, dlock.WithHook(startHook{rec, gate}))
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx(t), "early")
		done <- err
	}()
	<-entered // granted, the hook not yet told
	_ = l.Close()
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err) // acquired, then taken back by Close
	}
	if got, want := strings.Join(rec.kinds("early"), ","), "attempt,acquired,lost"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if rec.badCtx != 0 {
		t.Errorf("%d events without their acquisition's context", rec.badCtx)
	}
}

type hookFunc func(ctx context.Context, e dlock.Event)

// startHook is a Hook whose Start is the recorder's and whose events go to
// event.
type startHook struct {
	rec   *recorder
	event hookFunc
}

func (h startHook) Start(ctx context.Context, key string) context.Context {
	return h.rec.Start(ctx, key)
}
func (h startHook) Event(ctx context.Context, e dlock.Event) { h.event(ctx, e) }

// TestHookAfterHolder: Do's context is cancelled before the hook hears of
// the loss, so that a slow hook cannot delay it.
func TestHookAfterHolder(t *testing.T) {
	rec := newRecorder()
	fnCancelled := make(chan struct{})
	var sawCancelled atomic.Bool
	slow := hookFunc(func(ctx context.Context, e dlock.Event) {
		if e.Kind == dlock.EventLost {
			select {
			case <-fnCancelled:
				sawCancelled.Store(true)
			case <-time.After(5 * time.Second):
			}
		}
		rec.Event(ctx, e)
	})
	l, _, c := single(t, dlock.WithHook(startHook{rec, slow}))
	err := l.Do(ctx(t), "slowhook", func(ctx context.Context) error {
		c.Del(context.Background(), "dlock:{slowhook}")
		<-ctx.Done()
		close(fnCancelled)
		return nil
	}, dlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v", err)
	}
	rec.await(t, "the lost event", func() bool { return len(rec.of(dlock.EventLost)) == 1 })
	if !sawCancelled.Load() {
		t.Error("the hook heard of the loss before Do's function saw its context cancelled")
	}
}

// TestHookSuspectBalanced: suspect and back events per node balance out
// once the Locker is closed, also with rounds in flight at Close.
func TestHookSuspectBalanced(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	rec := newRecorder()
	l, err := dlock.NewRedlock(dlocktest.Clients(t, servers...), dlock.WithHook(rec), dlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	freeze(t, servers[1], servers[2])
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = l.TryAcquire(ctx(t), fmt.Sprint("balanced", i))
		}()
	}
	rec.await(t, "a suspect node", func() bool { return len(rec.of(dlock.EventNodeSuspect)) > 0 })
	_ = l.Close()
	wg.Wait()
	count := map[string]int{}
	for _, e := range rec.of(dlock.EventNodeSuspect) {
		count[e.Node]++
	}
	for _, e := range rec.of(dlock.EventNodeBack) {
		count[e.Node]--
	}
	for node, n := range count {
		if n != 0 {
			t.Errorf("node %s: %d more suspect than back events after Close", node, n)
		}
	}
}

// TestHookCallerDeadline: an acquisition cut short by its caller's
// deadline is not a node's failure.
func TestHookCallerDeadline(t *testing.T) {
	rec := newRecorder()
	l, s, _ := single(t, dlock.WithHook(rec))
	freeze(t, s)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.TryAcquire(short, "deadline"); err == nil {
		t.Fatal("acquired on a frozen Redis")
	}
	if ne := rec.of(dlock.EventNodeError); len(ne) != 0 {
		t.Errorf("node errors for the caller's deadline: %+v", ne)
	}
}

// TestHookReleaseFindsLost: a Release that finds the lock taken (here
// deleted behind its back before any renewal could notice) is a loss for
// the hook, not a release.
func TestHookReleaseFindsLost(t *testing.T) {
	rec := newRecorder()
	l, _, c := single(t, dlock.WithHook(rec))
	k, err := l.Acquire(ctx(t), "silent", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if k.TTL() != time.Minute {
		t.Errorf("TTL %s, want 1m", k.TTL())
	}
	c.Del(ctx(t), "dlock:{silent}")
	if err := k.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld", err)
	}
	if got, want := strings.Join(rec.kinds("silent"), ","), "attempt,acquired,lost"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if lost := rec.of(dlock.EventLost); len(lost) != 1 || lost[0].Reason != dlock.LostNotHeld || !errors.Is(lost[0].Err, dlock.ErrLockLost) {
		t.Errorf("lost events %+v", lost)
	}
}

func TestEventResult(t *testing.T) {
	for _, tc := range []struct {
		e    dlock.Event
		want string
	}{
		{dlock.Event{Kind: dlock.EventAcquired}, dlock.ResultAcquired},
		{dlock.Event{Kind: dlock.EventAttempt}, dlock.ResultAcquired},
		{dlock.Event{Kind: dlock.EventAttempt, Err: dlock.ErrNotAcquired}, dlock.ResultBusy},
		{dlock.Event{Kind: dlock.EventRefused, Err: fmt.Errorf("%w: held", dlock.ErrNotAcquired)}, dlock.ResultBusy},
		{dlock.Event{Kind: dlock.EventRefused, Err: fmt.Errorf("%w: %w", dlock.ErrNotAcquired, context.DeadlineExceeded)}, dlock.ResultTimeout},
		{dlock.Event{Kind: dlock.EventRefused, Err: fmt.Errorf("%w: %w", dlock.ErrNotAcquired, context.Canceled)}, dlock.ResultCanceled},
		{dlock.Event{Kind: dlock.EventRefused, Err: fmt.Errorf("%w: %w", dlock.ErrUnavailable, context.DeadlineExceeded)}, dlock.ResultUnavailable},
		{dlock.Event{Kind: dlock.EventRefused, Err: dlock.ErrMisconfigured}, dlock.ResultMisconfigured},
		{dlock.Event{Kind: dlock.EventRefused, Err: dlock.ErrClosed}, dlock.ResultClosed},
		{dlock.Event{Kind: dlock.EventRefused, Err: fmt.Errorf("%w: limit", dlock.ErrInvalid)}, dlock.ResultInvalid},
		{dlock.Event{Kind: dlock.EventRefused, Err: errors.New("other")}, ""},
		{dlock.Event{Kind: dlock.EventLost}, ""},
	} {
		if got := tc.e.Result(); got != tc.want {
			t.Errorf("%v %v: %q, want %q", tc.e.Kind, tc.e.Err, got, tc.want)
		}
	}
}
