package dlockprom

import "github.com/prometheus/client_golang/prometheus"

// DefaultWaitBuckets are the buckets, in seconds, of the wait-time histogram
// (dlock_acquire_wait_seconds) unless WithWaitBuckets says otherwise: from
// half a millisecond (one round trip to a nearby Redis) to a minute (an
// Acquire that waited for a long job).
var DefaultWaitBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// DefaultHeldBuckets are the buckets, in seconds, of the held-time
// histogram (dlock_held_seconds) unless WithHeldBuckets says otherwise: from
// a millisecond to an hour.
var DefaultHeldBuckets = []float64{.001, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}

// KeyLabelLimit is the most distinct values of the key label (see
// WithKeyLabel) that a Collector keeps apart. Past it, every new value is
// counted under OverflowKeyLabel, so that a mapping that turns out to be
// unbounded cannot make the number of series grow without end.
const KeyLabelLimit = 1000

// OverflowKeyLabel is the value of the key label of the locks whose mapped
// value came after KeyLabelLimit others (see WithKeyLabel).
const OverflowKeyLabel = "_overflow"

// An Option configures a Collector made by New.
type Option func(*config)

type config struct {
	namespace   string
	subsystem   string
	constLabels prometheus.Labels
	waitBuckets []float64
	heldBuckets []float64
	keyLabel    func(key string) string
}

// WithNamespace sets the namespace of the metrics' names, the part before
// the first underscore (default "dlock": dlock_acquisitions_total). An empty
// namespace leaves it out.
func WithNamespace(namespace string) Option {
	return func(c *config) { c.namespace = namespace }
}

// WithSubsystem sets the subsystem of the metrics' names, between the
// namespace and the name (default none): WithSubsystem("jobs") gives
// dlock_jobs_acquisitions_total. Use it, or WithConstLabels, to register
// two Collectors (for two sets of Lockers) with the same registry.
func WithSubsystem(subsystem string) Option {
	return func(c *config) { c.subsystem = subsystem }
}

// WithConstLabels adds labels with fixed values to every metric of the
// Collector, for example {"store": "sessions"}. Their names must not be
// one of the Collector's own labels (result, outcome, reason, node, key).
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) {
		c.constLabels = make(prometheus.Labels, len(labels))
		for k, v := range labels {
			c.constLabels[k] = v
		}
	}
}

// WithWaitBuckets sets the upper bounds, in seconds and increasing, of the
// buckets of the wait-time histogram (default DefaultWaitBuckets). An
// empty list keeps the default.
func WithWaitBuckets(buckets ...float64) Option {
	return func(c *config) {
		if len(buckets) > 0 {
			c.waitBuckets = append([]float64(nil), buckets...)
		}
	}
}

// WithHeldBuckets sets the upper bounds, in seconds and increasing, of the
// buckets of the held-time histogram (default DefaultHeldBuckets). An empty
// list keeps the default.
func WithHeldBuckets(buckets ...float64) Option {
	return func(c *config) {
		if len(buckets) > 0 {
			c.heldBuckets = append([]float64(nil), buckets...)
		}
	}
}

// WithKeyLabel adds the label "key" to the metrics of locks (all but the
// node metrics), with the value that f returns for the lock's key: for
// example the part before the first ':' of "invoice:42", to tell the kinds
// of locks apart. Lock keys themselves are unbounded (a key per account,
// per job...), and a label with one value per key would make a series per
// key: f must map keys to a small, fixed set of values, and must be
// deterministic, fast and safe for concurrent use (it is called on the lock
// path). At most KeyLabelLimit values are kept apart; later ones are
// counted as OverflowKeyLabel. A nil f means no key label, the default.
func WithKeyLabel(f func(key string) string) Option {
	return func(c *config) { c.keyLabel = f }
}
