package dlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockotel"
)

var (
	resAcquired = dlockotel.KeyResult.String(dlockotel.ResultAcquired)
	resBusy     = dlockotel.KeyResult.String(dlockotel.ResultBusy)
	resTimeout  = dlockotel.KeyResult.String(dlockotel.ResultTimeout)
	resReleased = dlockotel.KeyResult.String(dlockotel.ResultReleased)
	resLost     = dlockotel.KeyResult.String(dlockotel.ResultLost)
)

// eventsNamed returns the span's events named name.
func eventsNamed(s sdktrace.ReadOnlySpan, name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, ev := range s.Events() {
		if ev.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

func wantAttr(t *testing.T, what string, kvs []attribute.KeyValue, k attribute.Key, want attribute.Value) {
	t.Helper()
	got, ok := attr(kvs, k)
	if !ok {
		t.Errorf("%s: no attribute %s (have %v)", what, k, kvs)
		return
	}
	if got != want {
		t.Errorf("%s: %s = %v, want %v", what, k, got.Emit(), want.Emit())
	}
}

func TestAcquireRelease(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := e.locker(c)

	ctx, caller := e.tp.Tracer("test").Start(ctxTimeout(t, 10*time.Second), "caller")
	k, err := l.Acquire(ctx, "report", dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := e.metrics()
	if got := m.int("dlock.locks.held"); got != 1 {
		t.Errorf("dlock.locks.held = %d while held, want 1", got)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()

	sp := e.one(dlockotel.SpanAcquire)
	if sp.Parent().SpanID() != caller.SpanContext().SpanID() || sp.SpanContext().TraceID() != caller.SpanContext().TraceID() {
		t.Errorf("dlock.acquire's parent is %v, want the caller's span %v", sp.Parent().SpanID(), caller.SpanContext().SpanID())
	}
	if sp.SpanKind() != trace.SpanKindInternal {
		t.Errorf("span kind %v, want internal", sp.SpanKind())
	}
	if sp.Status().Code != codes.Unset {
		t.Errorf("status %v, want Unset", sp.Status())
	}
	attrs := sp.Attributes()
	wantAttr(t, "dlock.acquire", attrs, dlockotel.KeyKey, attribute.StringValue("report"))
	wantAttr(t, "dlock.acquire", attrs, dlockotel.KeyResult, attribute.StringValue("acquired"))
	wantAttr(t, "dlock.acquire", attrs, dlockotel.KeyAttempts, attribute.IntValue(1))
	wantAttr(t, "dlock.acquire", attrs, dlockotel.KeyFence, attribute.Int64Value(int64(k.Fence())))
	wantAttr(t, "dlock.acquire", attrs, dlockotel.KeyTTL, attribute.Float64Value(5))
	if k.Fence() == 0 {
		t.Error("fence 0")
	}
	if w, ok := attr(attrs, dlockotel.KeyWait); !ok || w.AsFloat64() < 0 || w.AsFloat64() > sp.EndTime().Sub(sp.StartTime()).Seconds() {
		t.Errorf("dlock.wait = %v, want between 0 and the span's duration %s", w.Emit(), sp.EndTime().Sub(sp.StartTime()))
	}
	if _, ok := attr(attrs, dlockotel.KeyLimit); ok {
		t.Error("dlock.limit on a plain lock")
	}
	evs := eventsNamed(sp, dlockotel.EventAttempt)
	if len(evs) != 1 {
		t.Fatalf("%d attempt events, want 1: %v", len(evs), sp.Events())
	}
	wantAttr(t, "attempt event", evs[0].Attributes, dlockotel.KeyAttempt, attribute.IntValue(1))
	wantAttr(t, "attempt event", evs[0].Attributes, dlockotel.KeyResult, attribute.StringValue("acquired"))

	// The release is an event on the span of Release's context.
	cs := e.one("caller")
	rel := eventsNamed(cs, dlockotel.EventReleased)
	if len(rel) != 1 {
		t.Fatalf("%d released events on the caller's span, want 1: %v", len(rel), cs.Events())
	}
	wantAttr(t, "released event", rel[0].Attributes, dlockotel.KeyKey, attribute.StringValue("report"))
	if h, ok := attr(rel[0].Attributes, dlockotel.KeyHeld); !ok || h.AsFloat64() <= 0 {
		t.Errorf("released event: dlock.held = %v, want > 0", h.Emit())
	}
	if _, ok := attr(rel[0].Attributes, "error.message"); ok {
		t.Error("released event has an error.message after a confirmed release")
	}
	if n := len(e.ended(dlockotel.SpanLost)); n != 0 {
		t.Errorf("%d dlock.lost spans", n)
	}

	m = e.metrics()
	m.noKey()
	if got := m.int("dlock.acquisitions", resAcquired); got != 1 {
		t.Errorf("dlock.acquisitions{acquired} = %d, want 1", got)
	}
	if got := m.int("dlock.acquire.attempts", resAcquired); got != 1 {
		t.Errorf("dlock.acquire.attempts{acquired} = %d, want 1", got)
	}
	if n, sum := m.hist("dlock.wait.duration", resAcquired); n != 1 || sum < 0 {
		t.Errorf("dlock.wait.duration{acquired}: count %d sum %g, want 1 and ≥ 0", n, sum)
	}
	if n, sum := m.hist("dlock.held.duration", resReleased); n != 1 || sum <= 0 {
		t.Errorf("dlock.held.duration{released}: count %d sum %g, want 1 and > 0", n, sum)
	}
	for _, name := range []string{"dlock.acquisitions.active", "dlock.locks.held", "dlock.nodes.suspect"} {
		if got := m.int(name); got != 0 {
			t.Errorf("%s = %d at the end, want 0", name, got)
		}
	}
	if got := m.int("dlock.lost", dlockotel.KeyLostReason.String(dlock.LostNotHeld)); got != 0 {
		t.Errorf("dlock.lost = %d", got)
	}
}

func TestTryAcquireBusy(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := dlock.New(c) // another process, without the hook
	defer holder.Close()
	l := e.locker(c)
	ctx := ctxTimeout(t, 10*time.Second)

	k, err := holder.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	if _, err := l.TryAcquire(ctx, "busy"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held lock: %v, want ErrNotAcquired", err)
	}

	sp := e.one(dlockotel.SpanAcquire)
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyResult, attribute.StringValue("busy"))
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyAttempts, attribute.IntValue(1))
	if _, ok := attr(sp.Attributes(), dlockotel.KeyFence); ok {
		t.Error("dlock.fence on a refusal")
	}
	// Busy is TryAcquire's normal "no": not an error.
	if sp.Status().Code != codes.Unset {
		t.Errorf("status %v, want Unset for a busy lock", sp.Status())
	}
	if n := len(eventsNamed(sp, "exception")); n != 0 {
		t.Errorf("%d exception events for a busy lock", n)
	}
	evs := eventsNamed(sp, dlockotel.EventAttempt)
	if len(evs) != 1 {
		t.Fatalf("%d attempt events, want 1", len(evs))
	}
	wantAttr(t, "attempt event", evs[0].Attributes, dlockotel.KeyResult, attribute.StringValue("busy"))

	m := e.metrics()
	m.noKey()
	if got := m.int("dlock.acquisitions", resBusy); got != 1 {
		t.Errorf("dlock.acquisitions{busy} = %d, want 1", got)
	}
	if got := m.int("dlock.acquisitions", resAcquired); got != 0 {
		t.Errorf("dlock.acquisitions{acquired} = %d, want 0", got)
	}
	if got := m.int("dlock.acquire.attempts", resBusy); got != 1 {
		t.Errorf("dlock.acquire.attempts{busy} = %d, want 1", got)
	}
	if n, _ := m.hist("dlock.wait.duration", resBusy); n != 1 {
		t.Errorf("dlock.wait.duration{busy} count %d, want 1", n)
	}
	if got := m.int("dlock.locks.held"); got != 0 {
		t.Errorf("dlock.locks.held = %d after a refusal, want 0", got)
	}
	if got := m.int("dlock.acquisitions.active"); got != 0 {
		t.Errorf("dlock.acquisitions.active = %d, want 0", got)
	}
}

// An Acquire whose context ends while it waits for a held lock is a
// timeout: an error, recorded.
func TestAcquireTimeout(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := dlock.New(c)
	defer holder.Close()
	l := e.locker(c)
	ctx := ctxTimeout(t, 10*time.Second)

	k, err := holder.Acquire(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "slow"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	sp := e.one(dlockotel.SpanAcquire)
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyResult, attribute.StringValue("timeout"))
	if sp.Status().Code != codes.Error {
		t.Errorf("status %v, want Error", sp.Status())
	}
	if n := len(eventsNamed(sp, "exception")); n != 1 {
		t.Errorf("%d exception events, want 1", n)
	}
	if w, _ := attr(sp.Attributes(), dlockotel.KeyWait); w.AsFloat64() < 0.15 {
		t.Errorf("dlock.wait = %g, want about 0.2", w.AsFloat64())
	}
	m := e.metrics()
	if got := m.int("dlock.acquisitions", resTimeout); got != 1 {
		t.Errorf("dlock.acquisitions{timeout} = %d, want 1", got)
	}
	if n, sum := m.hist("dlock.wait.duration", resTimeout); n != 1 || sum < 0.15 {
		t.Errorf("dlock.wait.duration{timeout}: count %d sum %g, want 1 and ≥ 0.15", n, sum)
	}
}

// An Acquire that waits for a held lock is woken by its release: its span
// has the attempts and the wake-up.
func TestWokenByRelease(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := dlock.New(c)
	defer holder.Close()
	l := e.locker(c)
	ctx := ctxTimeout(t, 20*time.Second)

	k, err := holder.Acquire(ctx, "queue", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		k   *dlock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		k, err := l.Acquire(ctx, "queue", dlock.WithTTL(30*time.Second))
		done <- result{k, err}
	}()
	// The waiter is registered in Redis: the release will wake it (its
	// timer would only fire after seconds).
	eventually(t, 10*time.Second, "the waiter to register", func() bool {
		return c.ZCard(ctx, "dlock:{queue}:waiters").Val() >= 1
	})
	if got := e.metrics().int("dlock.acquisitions.active"); got != 1 {
		t.Errorf("dlock.acquisitions.active = %d while waiting, want 1", got)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lock")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.k.Release(ctx); err != nil {
		t.Fatal(err)
	}

	sp := e.one(dlockotel.SpanAcquire)
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyResult, attribute.StringValue("acquired"))
	attempts := eventsNamed(sp, dlockotel.EventAttempt)
	woken := eventsNamed(sp, dlockotel.EventWoken)
	if len(woken) < 1 {
		t.Fatalf("no %s event: %v", dlockotel.EventWoken, sp.Events())
	}
	if len(attempts) < 2 {
		t.Fatalf("%d attempt events, want at least 2", len(attempts))
	}
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyAttempts, attribute.IntValue(len(attempts)))
	for i, ev := range attempts {
		wantAttr(t, "attempt event", ev.Attributes, dlockotel.KeyAttempt, attribute.IntValue(i+1))
		want := "busy"
		if i == len(attempts)-1 {
			want = "acquired"
		}
		wantAttr(t, "attempt event", ev.Attributes, dlockotel.KeyResult, attribute.StringValue(want))
	}
	// The wake-up comes after a busy attempt and before the last one.
	last := attempts[len(attempts)-1]
	w := woken[len(woken)-1]
	if w.Time.After(last.Time) || w.Time.Before(attempts[len(attempts)-2].Time) {
		t.Errorf("woken at %v, not between the last two attempts (%v, %v)", w.Time, attempts[len(attempts)-2].Time, last.Time)
	}
	wantAttr(t, "woken event", w.Attributes, dlockotel.KeyAttempt, attribute.IntValue(len(attempts)-1))

	m := e.metrics()
	if got := m.int("dlock.acquire.attempts", resBusy); got != int64(len(attempts)-1) {
		t.Errorf("dlock.acquire.attempts{busy} = %d, want %d", got, len(attempts)-1)
	}
	if got := m.int("dlock.acquire.attempts", resAcquired); got != 1 {
		t.Errorf("dlock.acquire.attempts{acquired} = %d, want 1", got)
	}
	if got := m.int("dlock.acquisitions", resAcquired); got != 1 {
		t.Errorf("dlock.acquisitions{acquired} = %d, want 1", got)
	}
}

// A lock whose key is deleted behind its back is lost when its renewal finds
// it gone: a dlock.lost span, the lost counter, the held time.
func TestLost(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := e.locker(c)
	ctx := ctxTimeout(t, 20*time.Second)

	k, err := l.Acquire(ctx, "job", dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Del(ctx, "dlock:{job}").Val(); n != 1 {
		t.Fatalf("deleted %d keys, want 1", n)
	}
	select {
	case <-k.Lost():
	case <-ctx.Done():
		t.Fatal("the lock was not lost")
	}
	// Lost closes before the hook is told: wait for the span.
	eventually(t, 5*time.Second, "the dlock.lost span", func() bool { return len(e.ended(dlockotel.SpanLost)) > 0 })
	if err := k.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the loss: %v, want ErrNotHeld", err)
	}

	acq := e.one(dlockotel.SpanAcquire)
	sp := e.one(dlockotel.SpanLost)
	if sp.Parent().IsValid() {
		t.Errorf("dlock.lost has a parent %v, want a root span", sp.Parent())
	}
	// dlock passes the acquisition's context with the loss.
	if len(sp.Links()) != 1 || sp.Links()[0].SpanContext.SpanID() != acq.SpanContext().SpanID() {
		t.Errorf("dlock.lost links %v, want the acquisition's span %v", sp.Links(), acq.SpanContext().SpanID())
	}
	wantAttr(t, "dlock.lost", sp.Attributes(), dlockotel.KeyLostReason, attribute.StringValue(dlock.LostNotHeld))
	wantAttr(t, "dlock.lost", sp.Attributes(), dlockotel.KeyKey, attribute.StringValue("job"))
	held, ok := attr(sp.Attributes(), dlockotel.KeyHeld)
	if !ok || held.AsFloat64() <= 0 {
		t.Errorf("dlock.held = %v, want > 0", held.Emit())
	}
	// The span covers the time the lock was held.
	if d := sp.EndTime().Sub(sp.StartTime()).Seconds(); d-held.AsFloat64() > 1e-6 || held.AsFloat64()-d > 1e-6 {
		t.Errorf("dlock.lost lasts %gs, want dlock.held %gs", d, held.AsFloat64())
	}
	if sp.StartTime().Before(acq.StartTime()) || sp.StartTime().After(acq.EndTime()) {
		t.Errorf("dlock.lost starts at %v, not within the acquisition [%v, %v]", sp.StartTime(), acq.StartTime(), acq.EndTime())
	}
	if sp.Status().Code != codes.Error {
		t.Errorf("status %v, want Error", sp.Status())
	}
	if n := len(eventsNamed(sp, "exception")); n != 1 {
		t.Errorf("%d exception events, want 1", n)
	}

	m := e.metrics()
	m.noKey()
	if got := m.int("dlock.lost", dlockotel.KeyLostReason.String(dlock.LostNotHeld)); got != 1 {
		t.Errorf("dlock.lost{not held} = %d, want 1", got)
	}
	if n, sum := m.hist("dlock.held.duration", resLost); n != 1 || sum <= 0 {
		t.Errorf("dlock.held.duration{lost}: count %d sum %g, want 1 and > 0", n, sum)
	}
	if n, _ := m.hist("dlock.held.duration", resReleased); n != 0 {
		t.Errorf("dlock.held.duration{released} count %d after a loss, want 0", n)
	}
	if got := m.int("dlock.locks.held"); got != 0 {
		t.Errorf("dlock.locks.held = %d, want 0", got)
	}
	if got := m.int("dlock.renew.failures"); got != 0 {
		t.Errorf("dlock.renew.failures = %d, want 0 (the renewal was answered: not held)", got)
	}
}

// A frozen node of a Redlock is counted in node errors and suspect nodes,
// until it answers again.
func TestNodeMetrics(t *testing.T) {
	e := newEnv(t)
	servers := dlocktest.StartN(t, 3)
	clients := dlocktest.Clients(t, servers...)
	l, err := dlock.NewRedlock(clients, dlock.WithHook(e.hook), dlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	frozen := servers[0]
	node := dlockotel.KeyNode.String(frozen.Addr())

	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Thaw() })
	k, err := l.TryAcquire(ctx, "quorum")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m := e.metrics()
	m.noKey()
	if got := m.int("dlock.node.errors", node); got < 1 {
		t.Errorf("dlock.node.errors{%s} = %d, want ≥ 1", frozen.Addr(), got)
	}
	if got := m.int("dlock.nodes.suspect", node); got != 1 {
		t.Errorf("dlock.nodes.suspect{%s} = %d with the node frozen, want 1", frozen.Addr(), got)
	}
	for _, s := range servers[1:] {
		if got := m.int("dlock.node.errors", dlockotel.KeyNode.String(s.Addr())); got != 0 {
			t.Errorf("dlock.node.errors{%s} = %d for a node that answers", s.Addr(), got)
		}
	}

	if err := frozen.Thaw(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the node to answer again", func() bool {
		k, err := l.TryAcquire(ctx, "quorum")
		if err == nil {
			_ = k.Release(ctx)
		}
		return e.metrics().int("dlock.nodes.suspect", node) == 0
	})
}

// With WithAttributes, every span and metric has them; with
// WithKeyAttribute(false), no span has the key.
func TestOptions(t *testing.T) {
	env := attribute.String("deployment", "test")
	e := newEnv(t, dlockotel.WithAttributes(env), dlockotel.WithKeyAttribute(false))
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := e.locker(c)
	ctx := ctxTimeout(t, 10*time.Second)

	ctx, caller := e.tp.Tracer("test").Start(ctx, "caller")
	k, err := l.Acquire(ctx, "secret@example.com", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()
	sp := e.one(dlockotel.SpanAcquire)
	wantAttr(t, "dlock.acquire", sp.Attributes(), "deployment", attribute.StringValue("test"))
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyLimit, attribute.IntValue(2))
	for _, s := range e.spans.Ended() {
		if _, ok := attr(s.Attributes(), dlockotel.KeyKey); ok {
			t.Errorf("span %s has the key", s.Name())
		}
		for _, ev := range s.Events() {
			if _, ok := attr(ev.Attributes, dlockotel.KeyKey); ok {
				t.Errorf("event %s of span %s has the key", ev.Name, s.Name())
			}
		}
	}
	m := e.metrics()
	if got := m.int("dlock.acquisitions", env, resAcquired); got != 1 {
		t.Errorf("dlock.acquisitions{deployment,acquired} = %d, want 1", got)
	}
	if n, _ := m.hist("dlock.held.duration", env, resReleased); n != 1 {
		t.Errorf("dlock.held.duration{deployment,released} count %d, want 1", n)
	}
	if got := m.int("dlock.locks.held", env); got != 0 {
		t.Errorf("dlock.locks.held{deployment} = %d, want 0", got)
	}
}

// When the acquisition's span is not recording (sampled out), the hook
// keeps nothing, never touches the caller's span, and still counts.
func TestNotRecording(t *testing.T) {
	e := newEnv(t)
	// The hook's spans are sampled out; the caller's span is recorded by
	// another provider.
	sampledOut := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer sampledOut.Shutdown(context.Background())
	h, err := dlockotel.New(dlockotel.WithTracerProvider(sampledOut), dlockotel.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := e.tp.Tracer("test").Start(context.Background(), "caller")
	defer caller.End()
	if got := h.Start(ctx, "k"); got != ctx {
		t.Error("Start returned a new context for a span that is not recording")
	}

	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c, dlock.WithHook(h), dlock.WithHook(e.hook))
	defer l.Close()
	k, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !caller.IsRecording() {
		t.Fatal("the hook ended the caller's span")
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !caller.IsRecording() {
		t.Fatal("the hook ended the caller's span")
	}
	// e.hook, installed after h on the same Locker, still finds its own
	// span.
	sp := e.one(dlockotel.SpanAcquire)
	if sp.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Error("the second hook's span is not a child of the caller's")
	}
	if got := e.metrics().int("dlock.acquisitions", resAcquired); got != 1 {
		t.Errorf("dlock.acquisitions{acquired} = %d, want 1", got)
	}
}

// Given the acquisition's context with EventLost (as a proposed change of
// dlock would pass it), dlock.lost links to the acquisition's span.
func TestLostLinksToAcquisition(t *testing.T) {
	e := newEnv(t)
	ctx := e.hook.Start(context.Background(), "k")
	e.hook.Event(ctx, dlock.Event{Kind: dlock.EventAttempt, Key: "k", Attempt: 1})
	e.hook.Event(ctx, dlock.Event{Kind: dlock.EventAcquired, Key: "k", Attempt: 1, Fence: 7, TTL: time.Second})
	e.hook.Event(context.WithoutCancel(ctx), dlock.Event{Kind: dlock.EventLost, Key: "k", Held: 20 * time.Millisecond,
		Reason: dlock.LostExpired, Err: dlock.ErrLockLost})
	acq := e.one(dlockotel.SpanAcquire)
	lost := e.one(dlockotel.SpanLost)
	if lost.Parent().IsValid() {
		t.Error("dlock.lost has a parent, want a root span")
	}
	if len(lost.Links()) != 1 || lost.Links()[0].SpanContext.SpanID() != acq.SpanContext().SpanID() {
		t.Errorf("dlock.lost links %v, want the acquisition's span %v", lost.Links(), acq.SpanContext().SpanID())
	}
	wantAttr(t, "dlock.lost", lost.Attributes(), dlockotel.KeyLostReason, attribute.StringValue(dlock.LostExpired))
	m := e.metrics()
	if got := m.int("dlock.lost", dlockotel.KeyLostReason.String(dlock.LostExpired)); got != 1 {
		t.Errorf("dlock.lost{expired} = %d, want 1", got)
	}
	if n, sum := m.hist("dlock.held.duration", resLost); n != 1 || sum < 0.019 || sum > 0.021 {
		t.Errorf("dlock.held.duration{lost}: count %d sum %g, want 1 and 0.02", n, sum)
	}
}

// A loss by Close is not a fault: its span's status stays Unset.
func TestLostClosed(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c, dlock.WithHook(e.hook))
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := l.Acquire(ctx, "shutdown"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sp := e.one(dlockotel.SpanLost)
	wantAttr(t, "dlock.lost", sp.Attributes(), dlockotel.KeyLostReason, attribute.StringValue(dlock.LostClosed))
	if sp.Status().Code != codes.Unset {
		t.Errorf("status %v, want Unset", sp.Status())
	}
	if got := e.metrics().int("dlock.lost", dlockotel.KeyLostReason.String(dlock.LostClosed)); got != 1 {
		t.Errorf("dlock.lost{closed} = %d, want 1", got)
	}
}

// TestLimitMismatch: a key held with another limit is the result
// "misconfigured", an error, for the acquisition as for its attempt.
func TestLimitMismatch(t *testing.T) {
	e := newEnv(t)
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	holder := dlock.New(c)
	defer holder.Close()
	l := e.locker(c)
	ctx := ctxTimeout(t, 10*time.Second)

	k, err := holder.Acquire(ctx, "pool", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	if _, err := l.Acquire(ctx, "pool"); !errors.Is(err, dlock.ErrMisconfigured) {
		t.Fatalf("Acquire without the holders' limit: %v, want ErrMisconfigured", err)
	}
	sp := e.one(dlockotel.SpanAcquire)
	wantAttr(t, "dlock.acquire", sp.Attributes(), dlockotel.KeyResult, attribute.StringValue("misconfigured"))
	if sp.Status().Code != codes.Error {
		t.Errorf("status %v, want Error", sp.Status())
	}
	m := e.metrics()
	if got := m.int("dlock.acquisitions", dlockotel.KeyResult.String(dlockotel.ResultMisconfigured)); got != 1 {
		t.Errorf("dlock.acquisitions{misconfigured} = %d, want 1", got)
	}
	if got := m.int("dlock.acquire.attempts", dlockotel.KeyResult.String(dlockotel.ResultMisconfigured)); got != 1 {
		t.Errorf("dlock.acquire.attempts{misconfigured} = %d, want 1", got)
	}
}
