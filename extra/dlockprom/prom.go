package dlockprom

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlockio/dlock"
)

// The default bucket upper bounds, in seconds, of the histograms.
var (
	// DefaultAcquireBuckets run from a millisecond (one round trip) to a
	// minute (a long wait).
	DefaultAcquireBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// DefaultHoldBuckets run from a millisecond to an hour.
	DefaultHoldBuckets = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600}
)

// Option configures NewCollector.
type Option func(*config)

type config struct {
	names         func(string) string // WithNameLabel's
	namespace     string
	constLabels   prometheus.Labels
	acquire, hold []float64
	err           error
}

// WithNamespace puts ns before the metric names: ns_dlock_waiters and so
// on. The default is none (dlock_waiters).
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithConstLabels adds labels with fixed values to every metric, e.g. to
// tell apart the Collectors of two Clients registered together.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) { c.constLabels = labels }
}

// WithNameLabel adds a label "name" to the histograms, whose value is
// template(the lock name): a template that maps the names of one family to
// one value (order:8c1f… to order:*) keeps the series few; one that returns
// each name makes a series per name.
func WithNameLabel(template func(name string) string) Option {
	return func(c *config) {
		if template == nil {
			c.invalid("WithNameLabel(nil)")
		}
		c.names = template
	}
}

// WithAcquireBuckets sets the bucket upper bounds, in seconds, of
// dlock_acquire_duration_seconds (increasing). The default is
// DefaultAcquireBuckets.
func WithAcquireBuckets(bounds ...float64) Option {
	return func(c *config) {
		c.acquire = bounds
		c.checkBuckets("WithAcquireBuckets", bounds)
	}
}

// WithHoldBuckets sets the bucket upper bounds, in seconds, of
// dlock_hold_duration_seconds (increasing). The default is
// DefaultHoldBuckets.
func WithHoldBuckets(bounds ...float64) Option {
	return func(c *config) {
		c.hold = bounds
		c.checkBuckets("WithHoldBuckets", bounds)
	}
}

func (c *config) checkBuckets(opt string, bounds []float64) {
	if len(bounds) == 0 {
		c.invalid("%s(): no buckets", opt)
	}
	for i := 1; i < len(bounds); i++ {
		if bounds[i] <= bounds[i-1] {
			c.invalid("%s%v: the bounds must increase", opt, bounds)
			return
		}
	}
}

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: dlockprom: "+format, append([]any{dlock.ErrInvalid}, args...)...)
	}
}

// Collector is a prometheus.Collector of a dlock Client's metrics (see the
// package doc). Register it once, in one registry.
type Collector struct {
	c             *dlock.Client
	acquire, hold *prometheus.HistogramVec

	names                                                                                    func(string) string // nil: no name label
	acquisitions, releases, failed, lost, extendFailed, panics, waiters, held, calls, writes *prometheus.Desc
}

// NewCollector returns a Collector of c's metrics: the counters and the
// gauge from c.Stats (counts since c was made, shared with the Clients
// made from it by Owner), the histograms from an Observer it adds to c
// (operations from now on). Make one per Client family. It returns an
// error wrapping dlock.ErrInvalid for a nil Client, or an option or name
// that Prometheus would refuse.
func NewCollector(c *dlock.Client, opts ...Option) (*Collector, error) {
	cfg := config{acquire: DefaultAcquireBuckets, hold: DefaultHoldBuckets}
	for _, o := range opts {
		o(&cfg)
	}
	if c == nil {
		cfg.invalid("NewCollector(nil)")
	}
	if _, ok := cfg.constLabels["le"]; ok {
		cfg.invalid("WithConstLabels: le is the histograms' bucket label")
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	col := &Collector{c: c, names: cfg.names}
	labels := []string{"mode", "outcome"}
	if cfg.names != nil {
		labels = append(labels, "name")
	}
	name := func(n string) string { return prometheus.BuildFQName(cfg.namespace, "dlock", n) }
	desc := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name(n), help, labels, cfg.constLabels)
	}
	col.acquire = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        name("acquire_duration_seconds"),
		Help:        "The time an acquisition took, its wait included, by outcome: acquired, not_acquired (taken by another, or the wait ended) or error.",
		ConstLabels: cfg.constLabels, Buckets: cfg.acquire,
	}, labels)
	col.hold = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        name("hold_duration_seconds"),
		Help:        "How long a lease was held, until its release (outcome released) or its loss (lost).",
		ConstLabels: cfg.constLabels, Buckets: cfg.hold,
	}, labels)
	col.acquisitions = desc("acquisitions_total", "Acquisitions that took the lock (outcome acquired) or ended without it (not_acquired).", "outcome")
	col.releases = desc("releases_total", "Releases of a lease that still held the lock.")
	col.failed = desc("errors_total", "Acquisitions and releases that failed with an error from Redis.")
	col.lost = desc("locks_lost_total", "Leases lost before their release.")
	col.extendFailed = desc("extend_failures_total", "Extensions (the watchdog's and Extend's) that failed.")
	col.panics = desc("observer_panics_total", "Panics recovered in the Client's Observer functions (this Collector's included).")
	col.waiters = desc("waiters", "Acquire calls waiting now for a lock that is taken.")
	col.held = desc("held", "Leases held now, from their acquisition to their release or loss.", "mode")
	col.calls = desc("redis_calls_total", "Script calls sent to Redis through the pipelining batcher.")
	col.writes = desc("redis_writes_total", "Pipelines, or lone calls, that carried the script calls.")

	// A registry checks the names and labels, which NewDesc does not report.
	if err := prometheus.NewRegistry().Register(col); err != nil {
		return nil, fmt.Errorf("%w: dlockprom: %v", dlock.ErrInvalid, err)
	}
	c.Observe(dlock.Observer{End: col.end, Lost: col.lostLease})
	return col, nil
}

// Describe sends the descriptors of the Collector's metrics.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{col.acquisitions, col.releases, col.failed, col.lost,
		col.extendFailed, col.panics, col.waiters, col.held, col.calls, col.writes} {
		ch <- d
	}
	col.acquire.Describe(ch)
	col.hold.Describe(ch)
}

// Collect sends the Client's metrics: its Stats now, and the histograms.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	s := col.c.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(col.acquisitions, s.Acquired, outcomeAcquired)
	counter(col.acquisitions, s.NotAcquired, outcomeNotAcquired)
	counter(col.releases, s.Released)
	counter(col.failed, s.Errors)
	counter(col.lost, s.Lost)
	counter(col.extendFailed, s.ExtendFailed)
	counter(col.panics, s.ObserverPanics)
	counter(col.calls, s.Calls)
	counter(col.writes, s.Writes)
	ch <- prometheus.MustNewConstMetric(col.waiters, prometheus.GaugeValue, float64(s.Waiting))
	for mode, n := range col.c.Held() {
		ch <- prometheus.MustNewConstMetric(col.held, prometheus.GaugeValue, float64(n), mode)
	}
	col.acquire.Collect(ch)
	col.hold.Collect(ch)
}

// end records the duration of an acquisition, and the hold time of a
// lease at its release.
func (col *Collector) end(_ context.Context, e *dlock.Event) {
	switch {
	case e.Op == dlock.OpAcquire:
		col.acquire.WithLabelValues(col.labels(e, outcomeOf(e))...).Observe(e.Took.Seconds())
	case e.Op == dlock.OpRelease && e.Err == nil && e.Held > 0: // not a repeated Release
		col.hold.WithLabelValues(col.labels(e, outcomeReleased)...).Observe(e.Held.Seconds())
	}
}

// lostLease records the hold time of a lease at its loss.
func (col *Collector) lostLease(_ context.Context, e *dlock.Event) {
	col.hold.WithLabelValues(col.labels(e, outcomeLost)...).Observe(e.Held.Seconds())
}

// labels returns the histograms' label values for e with outcome.
func (col *Collector) labels(e *dlock.Event, outcome string) []string {
	if col.names == nil {
		return []string{e.Mode, outcome}
	}
	return []string{e.Mode, outcome, col.names(e.Name)}
}

// The values of the outcome label.
const (
	outcomeAcquired    = "acquired"
	outcomeNotAcquired = "not_acquired"
	outcomeReleased    = "released"
	outcomeLost        = "lost"
	outcomeError       = "error"
)

// outcomeOf names how the acquisition e ended.
func outcomeOf(e *dlock.Event) string {
	switch {
	case e.Err == nil:
		return outcomeAcquired
	case errors.Is(e.Err, dlock.ErrNotAcquired):
		return outcomeNotAcquired
	}
	return outcomeError
}
