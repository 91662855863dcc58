// SPDX-License-Identifier: Apache-2.0

// Package dlockprom exports Prometheus metrics of github.com/dlock-dev/dlock
// Lockers, in the manner of go-redis' extra/redisprometheus. A Collector is
// both the dlock.Hook that feeds it and the prometheus.Collector that
// exports it:
//
//	metrics := dlockprom.New()
//	prometheus.MustRegister(metrics)
//	locker := dlock.New(client, dlock.WithHook(metrics))
//
// One Collector can serve several Lockers (their counts add up); register
// it once. Two Collectors in one registry need different names
// (WithSubsystem) or const labels (WithConstLabels).
//
// # Metrics
//
// With the default namespace "dlock" and no subsystem:
//
//	dlock_acquisitions_total{result}            counter
//	    Acquisitions (Acquire, TryAcquire, Do, Campaign) that ended, by result:
//	    "acquired"; "busy": held by another owner, and the call did not
//	    wait (TryAcquire);
//	    "timeout": the caller's deadline passed first, typically while
//	    waiting for a busy lock; "canceled": the caller's context was
//	    cancelled first;
//	    "unavailable": too few Redis nodes answered (dlock.ErrUnavailable,
//	    even when the context ended too); "misconfigured":
//	    dlock.ErrMisconfigured, also a key held with another WithLimit;
//	    "closed": dlock.ErrClosed; "invalid": an error wrapping only
//	    dlock.ErrInvalid, which dlock's events do not give (the series is
//	    kept at 0 for dashboards written for v0.1.0); "error": any other
//	    error.
//	dlock_acquire_attempts_total{result}        counter
//	    Acquisition rounds, by result: "acquired", "busy", "unavailable",
//	    "misconfigured", "closed". A waiting Acquire makes one per wake-up;
//	    attempts per acquisition is this over dlock_acquisitions_total.
//	dlock_acquire_wait_seconds{result}          histogram
//	    How long acquisitions took, from their start to their result (same
//	    results as dlock_acquisitions_total).
//	dlock_acquisitions_in_progress              gauge
//	    Acquisitions begun and not yet ended: mostly Acquire calls waiting
//	    for a busy lock.
//	dlock_waiters_woken_total                   counter
//	    Wake-ups of waiting Acquire calls by a release (not by their timer).
//	dlock_held_seconds{outcome}                 histogram
//	    How long locks were held, by how the holding ended: "released"
//	    (Release) or "lost".
//	dlock_release_failures_total                counter
//	    Releases that a quorum did not confirm (the key then expires after
//	    its TTL): Release returned an error.
//	dlock_renew_failures_total                  counter
//	    Renewals (automatic, or Extend) that a quorum did not confirm; the
//	    lock is held until its validity runs out.
//	dlock_locks_lost_total{reason}              counter
//	    Locks lost while held, by reason: "expired" (dlock.LostExpired),
//	    "not held" (dlock.LostNotHeld), "closed" (dlock.LostClosed); a
//	    reason that a later dlock may add counts as "other".
//	dlock_node_errors_total{node}               counter
//	    Commands that a Redis node failed (an error, a connection failure,
//	    no answer within the node timeout), by node address.
//	dlock_node_suspect{node}                    gauge
//	    1 while the node is suspect: it did not answer a round in time, and
//	    has not answered since (rounds do not wait for it meanwhile); 0
//	    once it answers again. With several Lockers on the same node, the
//	    number of them that find it suspect.
//
// The counters whose label values are known in advance are exported at 0
// from the start; histograms appear with their first observation, and the
// metrics of a node with its first event.
//
// # Labels
//
// By default no metric has the lock's key as a label: keys are unbounded
// (one per account, per job...) and a label per key would make a series per
// key. WithKeyLabel adds a "key" label whose value a function derives from
// the key, such as its prefix. The node label is the node's address, one
// per Redis node of the Lockers.
//
// # Cost
//
// The hook runs synchronously on the lock path. After the first event of
// each label value, an event costs a few atomic operations and no
// allocation: the Collector resolves each series once and keeps it.
package dlockprom

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/results"
)

// Label values of result (dlock_acquisitions_total,
// dlock_acquire_attempts_total, dlock_acquire_wait_seconds): dlock's
// classification (dlock.Event.Result), and "error" for an error it does
// not classify.
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
)

// Label values of outcome (dlock_held_seconds).
const (
	OutcomeReleased = "released"
	OutcomeLost     = "lost"
)

// result indexes the outcomes of acquisitions and attempts (shared with
// extra/dlockotel: internal/results).
type result = results.Index

const (
	resAcquired      = results.Acquired
	resBusy          = results.Busy
	resTimeout       = results.Timeout
	resCanceled      = results.Canceled
	resUnavailable   = results.Unavailable
	resMisconfigured = results.Misconfigured
	resClosed        = results.Closed
	resInvalid       = results.Invalid
	resError         = results.Error
	numResults       = results.N
)

var resultNames = results.Names

// attemptResults are the results an attempt can have (EventAttempt's Err).
var attemptResults = []result{resAcquired, resBusy, resUnavailable, resMisconfigured, resClosed}

// reasons are EventLost's, in the order of lostIndex, then "other" for a
// reason this package does not know.
var reasons = [...]string{dlock.LostExpired, dlock.LostNotHeld, dlock.LostClosed, "other"}

func lostIndex(reason string) int {
	switch reason {
	case dlock.LostExpired:
		return 0
	case dlock.LostNotHeld:
		return 1
	case dlock.LostClosed:
		return 2
	}
	return 3
}

// resultOf is the result of an acquisition or an attempt.
func resultOf(e dlock.Event) result { return results.Of(e) }

// A Collector counts what dlock Lockers do and exports it to Prometheus. It
// is a dlock.Hook: install it with dlock.WithHook on each Locker to
// observe; and a prometheus.Collector: register it with a registry. Make it
// with New. It is safe for concurrent use.
type Collector struct {
	keyLabel func(string) string

	acquisitions    *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	wait            *prometheus.HistogramVec
	inProgress      *prometheus.GaugeVec
	woken           *prometheus.CounterVec
	held            *prometheus.HistogramVec
	releaseFailures *prometheus.CounterVec
	renewFailures   *prometheus.CounterVec
	lost            *prometheus.CounterVec
	nodeErrors      *prometheus.CounterVec
	nodeSuspect     *prometheus.GaugeVec

	all *series // the series without a key label

	mu    sync.Mutex // serialises the additions to byKey and nodes
	byKey atomic.Pointer[map[string]*series]
	nodes atomic.Pointer[map[string]*node]
}

var (
	_ dlock.Hook           = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// New returns a Collector configured by opts.
func New(opts ...Option) *Collector {
	cfg := config{namespace: "dlock", waitBuckets: DefaultWaitBuckets, heldBuckets: DefaultHeldBuckets}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	var lockLabels []string
	if cfg.keyLabel != nil {
		lockLabels = []string{"key"}
	}
	with := func(labels ...string) []string { return append(append([]string(nil), lockLabels...), labels...) }
	opts2 := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: cfg.namespace, Subsystem: cfg.subsystem, Name: name, Help: help, ConstLabels: cfg.constLabels}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts(opts2(name, help)), with(labels...))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		o := opts2(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: o.Namespace, Subsystem: o.Subsystem,
			Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets}, with(labels...))
	}
	c := &Collector{
		keyLabel: cfg.keyLabel,
		acquisitions: counter("acquisitions_total",
			"Lock acquisitions that ended, by result: acquired, busy, timeout, canceled, unavailable, misconfigured, closed, invalid, error.", "result"),
		attempts: counter("acquire_attempts_total",
			"Lock acquisition rounds, by result: acquired, busy, unavailable, misconfigured, closed.", "result"),
		wait: histogram("acquire_wait_seconds",
			"How long lock acquisitions took, from their start to their result, by result.", cfg.waitBuckets, "result"),
		inProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts2("acquisitions_in_progress",
			"Lock acquisitions begun and not ended yet (mostly waiting for a busy lock).")), with()),
		woken: counter("waiters_woken_total",
			"Wake-ups of waiting acquisitions by a release of the lock."),
		held: histogram("held_seconds",
			"How long locks were held, by outcome: released, lost.", cfg.heldBuckets, "outcome"),
		releaseFailures: counter("release_failures_total",
			"Lock releases not confirmed by a quorum of Redis nodes (the key expires after its TTL)."),
		renewFailures: counter("renew_failures_total",
			"Lock renewals not confirmed by a quorum of Redis nodes (the lock is held until its validity runs out)."),
		lost: counter("locks_lost_total",
			"Locks lost while held, by reason: expired, not held, closed.", "reason"),
		nodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts(opts2("node_errors_total",
			"Commands that a Redis node failed (error, connection failure, no answer in time), by node.")), []string{"node"}),
		nodeSuspect: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts2("node_suspect",
			"1 while a Redis node has not answered since it failed to answer in time, by node (with several Lockers, how many find it suspect).")), []string{"node"}),
	}
	if c.keyLabel == nil {
		c.all = c.newSeries("", false)
	} else {
		c.byKey.Store(&map[string]*series{})
	}
	c.nodes.Store(&map[string]*node{})
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

func (c *Collector) collectors() [11]prometheus.Collector {
	return [...]prometheus.Collector{c.acquisitions, c.attempts, c.wait, c.inProgress, c.woken, c.held,
		c.releaseFailures, c.renewFailures, c.lost, c.nodeErrors, c.nodeSuspect}
}

// Start implements dlock.Hook: it counts an acquisition in progress. It
// returns ctx.
func (c *Collector) Start(ctx context.Context, key string) context.Context {
	c.series(key).inProgress.Inc()
	return ctx
}

// Event implements dlock.Hook: it counts e.
func (c *Collector) Event(_ context.Context, e dlock.Event) {
	switch e.Kind {
	case dlock.EventAttempt:
		s := c.series(e.Key)
		s.attempt(resultOf(e)).Inc()
	case dlock.EventAcquired:
		c.series(e.Key).ended(resAcquired, e.Wait.Seconds())
	case dlock.EventRefused:
		c.series(e.Key).ended(resultOf(e), e.Wait.Seconds())
	case dlock.EventWoken:
		c.series(e.Key).woken.Inc()
	case dlock.EventReleased:
		s := c.series(e.Key)
		s.heldFor(outcomeReleased).Observe(e.Held.Seconds())
		if e.Err != nil {
			s.releaseFailures.Inc()
		}
	case dlock.EventRenewFailed:
		c.series(e.Key).renewFailures.Inc()
	case dlock.EventLost:
		s := c.series(e.Key)
		s.heldFor(outcomeLost).Observe(e.Held.Seconds())
		s.lost[lostIndex(e.Reason)].get(c.lost, s, reasons[lostIndex(e.Reason)]).Inc()
	case dlock.EventNodeError:
		c.node(e.Node).errors.Inc()
	case dlock.EventNodeSuspect:
		c.node(e.Node).suspect.Inc()
	case dlock.EventNodeBack:
		c.node(e.Node).suspect.Dec()
	}
}

const (
	outcomeReleased = iota
	outcomeLost
)

var outcomes = [...]string{outcomeReleased: OutcomeReleased, outcomeLost: OutcomeLost}

// A series holds the resolved children of the lock metrics for one value
// of the key label (or for all locks, without a key label). The children
// of the fixed labels are resolved when the series is made; the others (the
// histograms', the rare results') on first use, then kept.
type series struct {
	keyed bool
	key   string // the key label's value, if keyed

	acquisitions    [numResults]slot[prometheus.Counter]
	attempts        [numResults]slot[prometheus.Counter]
	wait            [numResults]slot[prometheus.Observer]
	held            [len(outcomes)]slot[prometheus.Observer]
	lost            [len(reasons)]slot[prometheus.Counter]
	inProgress      prometheus.Gauge
	woken           prometheus.Counter
	releaseFailures prometheus.Counter
	renewFailures   prometheus.Counter

	c *Collector
}

func (c *Collector) newSeries(key string, keyed bool) *series {
	s := &series{keyed: keyed, key: key, c: c}
	s.inProgress = c.inProgress.WithLabelValues(s.labels()...)
	s.woken = c.woken.WithLabelValues(s.labels()...)
	s.releaseFailures = c.releaseFailures.WithLabelValues(s.labels()...)
	s.renewFailures = c.renewFailures.WithLabelValues(s.labels()...)
	// Counters with known label values start at 0, so that rate() and
	// increase() see their first increment.
	for r := range numResults {
		s.acquisitions[r].get(c.acquisitions, s, resultNames[r])
	}
	for _, r := range attemptResults {
		s.attempts[r].get(c.attempts, s, resultNames[r])
	}
	for i, reason := range reasons[:len(reasons)-1] {
		s.lost[i].get(c.lost, s, reason)
	}
	return s
}

// labels returns the label values of the series' metrics: the key label's
// first if there is one, then values.
func (s *series) labels(values ...string) []string {
	if !s.keyed {
		return values
	}
	return append([]string{s.key}, values...)
}

func (s *series) attempt(r result) prometheus.Counter {
	return s.attempts[r].get(s.c.attempts, s, resultNames[r])
}

// ended counts an acquisition's end with r after wait seconds.
func (s *series) ended(r result, wait float64) {
	s.acquisitions[r].get(s.c.acquisitions, s, resultNames[r]).Inc()
	s.wait[r].get(s.c.wait, s, resultNames[r]).Observe(wait)
	s.inProgress.Dec()
}

func (s *series) heldFor(outcome int) prometheus.Observer {
	return s.held[outcome].get(s.c.held, s, outcomes[outcome])
}

// A slot holds a child of a vector once resolved.
type slot[M any] struct{ p atomic.Pointer[M] }

// vec is a metric vector: *prometheus.CounterVec, *prometheus.HistogramVec.
type vec[M any] interface {
	WithLabelValues(lvs ...string) M
}

// get returns the child of v for s and value, resolving it on first use.
func (sl *slot[M]) get(v vec[M], s *series, value string) M {
	if p := sl.p.Load(); p != nil {
		return *p
	}
	return sl.resolve(v, s, value)
}

func (sl *slot[M]) resolve(v vec[M], s *series, value string) M {
	m := v.WithLabelValues(s.labels(value)...)
	sl.p.CompareAndSwap(nil, &m)
	return *sl.p.Load()
}

// series returns the series of key's locks.
func (c *Collector) series(key string) *series {
	if c.keyLabel == nil {
		return c.all
	}
	// A label value must be UTF-8 (client_golang panics otherwise), and a
	// lock's name is any string (no allocation when it is UTF-8).
	v := strings.ToValidUTF8(c.keyLabel(key), "\uFFFD")
	if s, ok := (*c.byKey.Load())[v]; ok {
		return s
	}
	return c.addSeries(v)
}

// addSeries adds the series of the key label value v (copy on write: the
// readers do not lock), or returns the overflow series past KeyLabelLimit.
func (c *Collector) addSeries(v string) *series {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.byKey.Load()
	if s, ok := old[v]; ok {
		return s
	}
	if len(old) >= KeyLabelLimit {
		if s, ok := old[OverflowKeyLabel]; ok {
			return s
		}
		v = OverflowKeyLabel
	}
	s := c.newSeries(v, true)
	storeWith(&c.byKey, v, s)
	return s
}

// storeWith stores a copy of the map at p with k set to v (copy on write:
// readers load the map without locking); c.mu is held.
func storeWith[V any](p *atomic.Pointer[map[string]V], k string, v V) {
	m := maps.Clone(*p.Load())
	m[k] = v
	p.Store(&m)
}

// A node holds the resolved children of the metrics of one node.
type node struct {
	errors  prometheus.Counter
	suspect prometheus.Gauge
}

// node returns the node of address addr.
func (c *Collector) node(addr string) *node {
	if n, ok := (*c.nodes.Load())[addr]; ok {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.nodes.Load()
	if n, ok := old[addr]; ok {
		return n
	}
	n := &node{errors: c.nodeErrors.WithLabelValues(addr), suspect: c.nodeSuspect.WithLabelValues(addr)}
	storeWith(&c.nodes, addr, n)
	return n
}
