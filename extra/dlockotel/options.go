package dlockotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures New.
type Option func(*config)

type config struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	attrs   []attribute.KeyValue
	keyAttr bool
}

// WithTracerProvider sets the TracerProvider of the spans; the default is
// the global one (otel.GetTracerProvider). A nil tp is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithMeterProvider sets the MeterProvider of the metrics; the default is
// the global one (otel.GetMeterProvider). A nil mp is ignored.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithAttributes adds attrs to every span and every metric of the hook:
// attributes that are the same for the whole Locker (which fleet, which
// Redis deployment). They must be few and bounded, as every metric
// attribute is. Calls add up.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// WithKeyAttribute sets whether spans carry the lock's key as dlock.key
// (default true). Turn it off when keys hold what traces must not (a
// user's e-mail address, a customer's name). Metrics never carry the key.
func WithKeyAttribute(on bool) Option {
	return func(c *config) { c.keyAttr = on }
}
