// SPDX-License-Identifier: Apache-2.0

// Package dlockotel traces and measures a dlock.Locker with OpenTelemetry.
//
// It is a [dlock.Hook]: install it with dlock.WithHook.
//
//	h, err := dlockotel.New() // the global TracerProvider and MeterProvider
//	if err != nil { ... }
//	locker := dlock.New(client, dlock.WithHook(h))
//
// # Traces
//
// Each acquisition (Acquire, TryAcquire, Do, Campaign) is a span named
// "dlock.acquire", a child of the span in the caller's context, from the
// call's start to its end. When it ends it carries dlock.key (unless
// WithKeyAttribute(false)), dlock.result (see below), dlock.attempts,
// dlock.wait (seconds), and, for a lock acquired, dlock.fence and dlock.ttl
// (seconds); dlock.limit for a semaphore (WithLimit). Each acquisition round
// is a span event "dlock.attempt" (dlock.attempt: its number, dlock.result:
// its outcome), and each wake-up of a waiting Acquire by a release an event
// "dlock.woken". The span's status is Error, with the error recorded, when
// the acquisition failed, except when the lock was merely busy
// (dlock.result "busy": TryAcquire found it held): that is the normal
// "no" of TryAcquire, not a failure, and its status is left Unset. An
// Acquire whose context ended while it waited for a held lock is "timeout"
// or "canceled", and an Error: the caller did not get what it waited for.
//
// A release is not a span of its own: the hook is told of it once it is
// over, with no start, so a span would have a made-up duration. It is an
// event "dlock.released" (dlock.key, dlock.held in seconds, and
// error.message when the release was not confirmed) on the span of the
// context passed to Release, when that span is recording.
//
// A lock lost while held (its key expired, was taken or deleted behind its
// back, or its Locker was closed) is a span "dlock.lost" of its own, a root
// span: the loss happens in the background, usually long after the trace
// of the acquisition ended. It starts when the lock was acquired and ends
// when the loss was noticed, so that its duration is how long the lock was
// held, and carries dlock.key, dlock.lost.reason ("expired", "not held",
// "closed") and dlock.held, and has status Error with the cause recorded,
// except for "closed" (the program closed its Locker: a shutdown, not a
// fault). dlock tells the hook of a loss with the context of the lock's
// acquisition (without its cancellation), so the span links to the
// "dlock.acquire" span of the lock.
//
// # Metrics
//
// No metric carries the key: keys are usually unbounded (a job's id, a
// user's), and every key would be a time series of its own. The attributes
// are few and bounded:
//
//	dlock.acquisitions         counter, {acquisition}: acquisitions that ended, by dlock.result
//	dlock.acquire.attempts     counter, {attempt}: acquisition rounds, by dlock.result
//	dlock.wait.duration        histogram, s: how long acquisitions took, by dlock.result
//	dlock.held.duration        histogram, s: how long locks were held, by dlock.result ("released" or "lost")
//	dlock.lost                 counter, {lock}: locks lost while held, by dlock.lost.reason
//	dlock.renew.failures       counter, {failure}: renewals and Extends not confirmed by a quorum
//	dlock.node.errors          counter, {error}: commands a node failed, by dlock.node (its address)
//	dlock.acquisitions.active  up-down counter, {acquisition}: acquisitions under way
//	dlock.locks.held           up-down counter, {lock}: locks held (acquired, not yet released nor lost)
//	dlock.nodes.suspect        up-down counter, {node}: nodes that stopped answering in time and have not answered since, by dlock.node
//
// dlock.result is one of "acquired", "busy" (held by another owner),
// "timeout" and "canceled" (the context ended while waiting for a held
// lock), "unavailable" (too few nodes answered), "misconfigured" (also a
// key held with another WithLimit), "closed" (the Locker was closed),
// "invalid" (an error wrapping only dlock.ErrInvalid, which dlock's events
// do not give) or "error"; an attempt's is one of
// "acquired", "busy", "unavailable", "misconfigured" and "closed".
// Attributes given with WithAttributes are added to every span and every
// metric.
//
// # Cost
//
// The hook runs on the lock's path: the metric attribute sets are built
// once, in New (per node address the first time a node is named), and
// recording a metric allocates nothing in the hook. A span that is not
// recording (sampled out, or a no-op TracerProvider) costs no more than the
// tracer's Start: nothing is kept and no span event is built.
package dlockotel

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-dev/dlock"
)

// ScopeName is the instrumentation scope of the hook's tracer and meter.
const ScopeName = "github.com/dlock-dev/dlock/extra/dlockotel"

// Span names.
const (
	// SpanAcquire is the span of one acquisition.
	SpanAcquire = "dlock.acquire"
	// SpanLost is the span of a lock that was lost while held.
	SpanLost = "dlock.lost"
)

// Span event names.
const (
	// EventAttempt is the span event of one acquisition round.
	EventAttempt = "dlock.attempt"
	// EventWoken is the span event of a wake-up of a waiting Acquire.
	EventWoken = "dlock.woken"
	// EventReleased is the span event of a release, on Release's span.
	EventReleased = "dlock.released"
)

// Attribute keys.
const (
	// KeyKey is the lock's key (spans only).
	KeyKey = attribute.Key("dlock.key")
	// KeyResult is the outcome of an acquisition, of an attempt, or how a
	// held lock ended.
	KeyResult = attribute.Key("dlock.result")
	// KeyLimit is a semaphore's limit (WithLimit).
	KeyLimit = attribute.Key("dlock.limit")
	// KeyAttempts is how many rounds an acquisition took.
	KeyAttempts = attribute.Key("dlock.attempts")
	// KeyAttempt is the number of an attempt in its acquisition.
	KeyAttempt = attribute.Key("dlock.attempt")
	// KeyWait is how long an acquisition took, in seconds.
	KeyWait = attribute.Key("dlock.wait")
	// KeyHeld is how long a lock was held, in seconds.
	KeyHeld = attribute.Key("dlock.held")
	// KeyFence is the fencing token of the lock acquired.
	KeyFence = attribute.Key("dlock.fence")
	// KeyTTL is the TTL of the lock acquired, in seconds.
	KeyTTL = attribute.Key("dlock.ttl")
	// KeyLostReason is why a lock was lost: dlock.LostExpired,
	// dlock.LostNotHeld or dlock.LostClosed.
	KeyLostReason = attribute.Key("dlock.lost.reason")
	// KeyNode is a node's address.
	KeyNode = attribute.Key("dlock.node")
	// keyErrorMessage is the message of a release's error.
	keyErrorMessage = attribute.Key("error.message")
)

// Values of KeyResult: dlock's classification of acquisitions and attempts
// (dlock.Event.Result), "error" for an error it does not classify, and the
// ends of a lock (dlock.held.duration).
const (
	ResultAcquired      = dlock.ResultAcquired
	ResultBusy          = dlock.ResultBusy
	ResultTimeout       = dlock.ResultTimeout
	ResultCanceled      = dlock.ResultCanceled
	ResultUnavailable   = dlock.ResultUnavailable
	ResultMisconfigured = dlock.ResultMisconfigured
	ResultClosed        = dlock.ResultClosed
	ResultInvalid       = dlock.ResultInvalid
	ResultError         = "error"
	ResultReleased      = "released"
	ResultLost          = "lost"
)

// Default histogram bucket boundaries, in seconds (advice: a View
// overrides them).
var (
	waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	heldBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
)

// Hook is a dlock.Hook that records spans and metrics (see the package
// documentation). It is safe for concurrent use and may be installed on
// several Lockers.
type Hook struct {
	tracer  trace.Tracer
	attrs   []attribute.KeyValue // WithAttributes, for spans
	keyAttr bool
	// startOpts are the span options of every acquisition span.
	startOpts []trace.SpanStartOption

	acquisitions  metric.Int64Counter
	attempts      metric.Int64Counter
	wait          metric.Float64Histogram
	held          metric.Float64Histogram
	lost          metric.Int64Counter
	renewFailures metric.Int64Counter
	nodeErrors    metric.Int64Counter
	active        metric.Int64UpDownCounter
	locksHeld     metric.Int64UpDownCounter
	suspect       metric.Int64UpDownCounter

	// Measurement options with prebuilt attribute sets: WithAttributes
	// alone, and with each result, lost reason and node.
	base        []metric.AddOption
	results     [nResults]measureOpts
	released    []metric.RecordOption
	lostHeld    []metric.RecordOption
	lostReasons map[string][]metric.AddOption // the three known reasons
	resultAttrs [nResults]attribute.KeyValue

	mu    sync.RWMutex
	nodes map[string][]metric.AddOption
}

type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

var _ dlock.Hook = (*Hook)(nil)

// New returns a Hook that records spans with the TracerProvider and metrics
// with the MeterProvider of opts (by default the global ones). It fails
// only if an instrument cannot be created.
func New(opts ...Option) (*Hook, error) {
	c := config{keyAttr: true}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	h := &Hook{
		tracer:      c.tp.Tracer(ScopeName),
		attrs:       append([]attribute.KeyValue(nil), c.attrs...),
		keyAttr:     c.keyAttr,
		lostReasons: make(map[string][]metric.AddOption),
		nodes:       make(map[string][]metric.AddOption),
	}
	h.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if len(h.attrs) > 0 {
		h.startOpts = append(h.startOpts, trace.WithAttributes(h.attrs...))
	}

	m := c.mp.Meter(ScopeName)
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	h.acquisitions, err = m.Int64Counter("dlock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions (Acquire, TryAcquire, Do, Campaign) that ended, by result."))
	check(err)
	h.attempts, err = m.Int64Counter("dlock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquisition rounds, by result."))
	check(err)
	h.wait, err = m.Float64Histogram("dlock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long acquisitions took, from the call to the lock or the refusal, by result."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	check(err)
	h.held, err = m.Float64Histogram("dlock.held.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, by how they ended (released, lost)."),
		metric.WithExplicitBucketBoundaries(heldBuckets...))
	check(err)
	h.lost, err = m.Int64Counter("dlock.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks lost while held, by reason."))
	check(err)
	h.renewFailures, err = m.Int64Counter("dlock.renew.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Renewals and Extends that a quorum did not confirm."))
	check(err)
	h.nodeErrors, err = m.Int64Counter("dlock.node.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Commands that a Redis node failed (an error, no connection, no answer in time), by node."))
	check(err)
	h.active, err = m.Int64UpDownCounter("dlock.acquisitions.active", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions under way."))
	check(err)
	h.locksHeld, err = m.Int64UpDownCounter("dlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held: acquired, and not yet released nor lost."))
	check(err)
	h.suspect, err = m.Int64UpDownCounter("dlock.nodes.suspect", metric.WithUnit("{node}"),
		metric.WithDescription("Nodes that did not answer in time and have not answered since, by node."))
	check(err)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	h.base = []metric.AddOption{metric.WithAttributeSet(h.set())}
	for r := range nResults {
		kv := KeyResult.String(resultNames[r])
		h.resultAttrs[r] = kv
		set := metric.WithAttributeSet(h.set(kv))
		h.results[r] = measureOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	}
	h.released = []metric.RecordOption{metric.WithAttributeSet(h.set(KeyResult.String(ResultReleased)))}
	h.lostHeld = []metric.RecordOption{metric.WithAttributeSet(h.set(KeyResult.String(ResultLost)))}
	for _, reason := range []string{dlock.LostExpired, dlock.LostNotHeld, dlock.LostClosed} {
		h.lostReasons[reason] = []metric.AddOption{metric.WithAttributeSet(h.set(KeyLostReason.String(reason)))}
	}
	return h, nil
}

// set returns the attribute set of a metric: WithAttributes' and extra.
func (h *Hook) set(extra ...attribute.KeyValue) attribute.Set {
	kvs := make([]attribute.KeyValue, 0, len(h.attrs)+len(extra))
	kvs = append(kvs, h.attrs...)
	return attribute.NewSet(append(kvs, extra...)...)
}

// Event implements dlock.Hook.
func (h *Hook) Event(ctx context.Context, e dlock.Event) {
	switch e.Kind {
	case dlock.EventAttempt:
		r := resultOf(e)
		h.attempts.Add(ctx, 1, h.results[r].add...)
		if a := h.acquisition(ctx); a != nil {
			a.span.AddEvent(EventAttempt, trace.WithAttributes(KeyAttempt.Int(e.Attempt), h.resultAttrs[r]))
		}
	case dlock.EventWoken:
		if a := h.acquisition(ctx); a != nil {
			a.span.AddEvent(EventWoken, trace.WithAttributes(KeyAttempt.Int(e.Attempt)))
		}
	case dlock.EventAcquired, dlock.EventRefused:
		h.ended(ctx, e)
	case dlock.EventReleased:
		h.locksHeld.Add(ctx, -1, h.base...)
		h.held.Record(ctx, e.Held.Seconds(), h.released...)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			kvs := make([]attribute.KeyValue, 0, 3)
			if h.keyAttr {
				kvs = append(kvs, KeyKey.String(e.Key))
			}
			kvs = append(kvs, KeyHeld.Float64(e.Held.Seconds()))
			if e.Err != nil {
				kvs = append(kvs, keyErrorMessage.String(e.Err.Error()))
			}
			span.AddEvent(EventReleased, trace.WithAttributes(kvs...))
		}
	case dlock.EventRenewFailed:
		h.renewFailures.Add(ctx, 1, h.base...)
	case dlock.EventLost:
		h.locksHeld.Add(ctx, -1, h.base...)
		h.held.Record(ctx, e.Held.Seconds(), h.lostHeld...)
		h.lost.Add(ctx, 1, h.lostReason(e.Reason)...)
		h.lostSpan(ctx, e)
	case dlock.EventNodeError:
		h.nodeErrors.Add(ctx, 1, h.node(e.Node)...)
	case dlock.EventNodeSuspect:
		h.suspect.Add(ctx, 1, h.node(e.Node)...)
	case dlock.EventNodeBack:
		h.suspect.Add(ctx, -1, h.node(e.Node)...)
	}
}

// ended records the end of an acquisition and ends its span.
func (h *Hook) ended(ctx context.Context, e dlock.Event) {
	r := rAcquired
	if e.Kind == dlock.EventRefused {
		r = resultOf(e)
		if r == rAcquired { // a refusal without an error: should not be
			r = rError
		}
	}
	h.active.Add(ctx, -1, h.base...)
	h.acquisitions.Add(ctx, 1, h.results[r].add...)
	h.wait.Record(ctx, e.Wait.Seconds(), h.results[r].record...)
	if r == rAcquired {
		h.locksHeld.Add(ctx, 1, h.base...)
	}
	a := h.acquisition(ctx)
	if a == nil {
		return
	}
	kvs := make([]attribute.KeyValue, 0, 6)
	kvs = append(kvs, h.resultAttrs[r], KeyAttempts.Int(e.Attempt), KeyWait.Float64(e.Wait.Seconds()))
	if e.Limit > 0 {
		kvs = append(kvs, KeyLimit.Int(e.Limit))
	}
	if r == rAcquired {
		kvs = append(kvs, KeyFence.Int64(int64(e.Fence)), KeyTTL.Float64(e.TTL.Seconds()))
	}
	a.span.SetAttributes(kvs...)
	if r != rAcquired && r != rBusy && e.Err != nil {
		a.span.RecordError(e.Err)
		a.span.SetStatus(codes.Error, e.Err.Error())
	}
	a.span.End()
}

// lostReason returns the measurement options of a lost lock's reason.
func (h *Hook) lostReason(reason string) []metric.AddOption {
	if o, ok := h.lostReasons[reason]; ok {
		return o
	}
	return []metric.AddOption{metric.WithAttributeSet(h.set(KeyLostReason.String(reason)))}
}

// node returns the measurement options of a node, built the first time it
// is named (the nodes of a Locker are few and fixed).
func (h *Hook) node(addr string) []metric.AddOption {
	h.mu.RLock()
	o, ok := h.nodes[addr]
	h.mu.RUnlock()
	if ok {
		return o
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if o, ok = h.nodes[addr]; !ok {
		o = []metric.AddOption{metric.WithAttributeSet(h.set(KeyNode.String(addr)))}
		h.nodes[addr] = o
	}
	return o
}
