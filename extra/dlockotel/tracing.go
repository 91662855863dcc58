package dlockotel

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// acqKey is the context key of an acquisition's state, one per Hook.
type acqKey struct{ h *Hook }

// acqCtx is the context Start returns when it opened a recording span: the
// span in the caller's context is the acquisition's, and the Hook finds its
// own span through acqKey (not through trace.SpanFromContext, which could
// be the caller's span or another hook's).
type acqCtx struct {
	context.Context
	h    *Hook
	span trace.Span
}

// Value implements context.Context.
func (c *acqCtx) Value(key any) any {
	if k, ok := key.(acqKey); ok && k.h == c.h {
		return c
	}
	return c.Context.Value(key)
}

// acquisition returns the acquisition span of ctx opened by h, or nil.
func (h *Hook) acquisition(ctx context.Context) *acqCtx {
	a, _ := ctx.Value(acqKey{h}).(*acqCtx)
	return a
}

// Start implements dlock.Hook: it opens the acquisition's span.
func (h *Hook) Start(ctx context.Context, key string) context.Context {
	h.active.Add(ctx, 1, h.base...)
	opts := h.startOpts
	if h.keyAttr {
		opts = append(opts[:len(opts):len(opts)], trace.WithAttributes(KeyKey.String(key)))
	}
	sctx, span := h.tracer.Start(ctx, SpanAcquire, opts...)
	if !span.IsRecording() {
		// Nothing to record: the events need not find it (and must not
		// take the caller's span for it).
		return ctx
	}
	return &acqCtx{Context: sctx, h: h, span: span}
}

// lostSpan records a loss as a span of its own (see the package
// documentation), linked to the acquisition's span when ctx has it.
func (h *Hook) lostSpan(ctx context.Context, e dlock.Event) {
	now := time.Now()
	kvs := make([]attribute.KeyValue, 0, len(h.attrs)+4)
	kvs = append(kvs, h.attrs...)
	if h.keyAttr {
		kvs = append(kvs, KeyKey.String(e.Key))
	}
	kvs = append(kvs, KeyLostReason.String(e.Reason), KeyHeld.Float64(e.Held.Seconds()))
	if e.Limit > 0 {
		kvs = append(kvs, KeyLimit.Int(e.Limit))
	}
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(now.Add(-e.Held)),
		trace.WithAttributes(kvs...),
	}
	if a := h.acquisition(ctx); a != nil {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: a.span.SpanContext()}))
	}
	_, span := h.tracer.Start(ctx, SpanLost, opts...)
	if span.IsRecording() && e.Reason != dlock.LostClosed {
		// A Locker closed while the lock was held is a shutdown, not a
		// fault: its status stays Unset.
		msg := "lock lost: " + e.Reason
		if e.Err != nil {
			span.RecordError(e.Err, trace.WithTimestamp(now))
			msg = e.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(now))
}
