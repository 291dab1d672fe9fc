package dlockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockio/dlock"
)

// ScopeName is the name of the Tracer and Meter of this package.
const ScopeName = "github.com/dlockio/dlock/extra/dlockotel"

// The attributes of spans and metrics.
const (
	ModeKey     = attribute.Key("dlock.mode")      // Event.Mode: fair, unfair, reentrant, quorum, semaphore, election, read, write
	OutcomeKey  = attribute.Key("dlock.outcome")   // see the package doc
	LockNameKey = attribute.Key("dlock.lock.name") // only with WithLockNameAttribute(true) or WithLockNameTemplate
	TryKey      = attribute.Key("dlock.try")       // spans of acquisitions: TryAcquire
	AutoKey     = attribute.Key("dlock.auto")      // spans of extensions: made by the watchdog
)

// The outcomes, values of OutcomeKey.
const (
	OutcomeAcquired    = "acquired"
	OutcomeNotAcquired = "not_acquired" // taken by another, or the context ended the wait
	OutcomeReleased    = "released"
	OutcomeExtended    = "extended"
	OutcomeLost        = "lost"  // the lease was gone (dlock.ErrNotHeld)
	OutcomeError       = "error" // an error from Redis, or a bad argument
)

// The bucket boundaries, in seconds, of the histograms.
var (
	acquireBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets    = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600}
)

// Option configures Instrument.
type Option func(*config)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	lockName func(string) string // LockNameKey's value; nil: none
	err      error
}

// WithTracerProvider makes Instrument start spans with tp's Tracer. The
// default is the global provider (otel.GetTracerProvider), which forwards
// to the first one otel.SetTracerProvider sets, even later; a noop provider
// (go.opentelemetry.io/otel/trace/noop) turns tracing off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.invalid("WithTracerProvider(nil)")
		}
		c.tp = tp
	}
}

// WithMeterProvider makes Instrument record metrics with mp's Meter. The
// default is the global provider (otel.GetMeterProvider), which forwards
// to the first one otel.SetMeterProvider sets, even later; a noop provider
// (go.opentelemetry.io/otel/metric/noop) turns metrics off.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.invalid("WithMeterProvider(nil)")
		}
		c.mp = mp
	}
}

// WithLockNameAttribute(true) adds the lock's name (LockNameKey) to spans
// and metrics. The default is false: each name would be a time series of
// its own, and names often carry identifiers.
func WithLockNameAttribute(on bool) Option {
	return func(c *config) {
		c.lockName = nil
		if on {
			c.lockName = func(name string) string { return name }
		}
	}
}

// WithLockNameTemplate adds LockNameKey to spans and metrics with the value
// template(the lock name): a template that maps the names of one family to
// one value (order:8c1f… to order:*) keeps the time series few.
func WithLockNameTemplate(template func(name string) string) Option {
	return func(c *config) {
		if template == nil {
			c.invalid("WithLockNameTemplate(nil)")
		}
		c.lockName = template
	}
}

func (c *config) invalid(what string) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: dlockotel: %s", dlock.ErrInvalid, what)
	}
}

// Instrument makes c report its operations to OpenTelemetry: spans through
// the TracerProvider, metrics through the MeterProvider (see the package
// doc for what each holds). It adds an Observer to c (see
// dlock.Client.Observe), which reaches the Clients made from c by Owner
// too; instrument one Client of such a family, once. It returns an error
// wrapping dlock.ErrInvalid for a nil Client or option, or the error of
// the MeterProvider that refused an instrument.
func Instrument(c *dlock.Client, opts ...Option) error {
	cfg := config{}
	for _, o := range opts {
		o(&cfg)
	}
	if c == nil {
		cfg.invalid("Instrument(nil)")
	}
	if cfg.err != nil {
		return cfg.err
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	in := &instrumentation{tracer: cfg.tp.Tracer(ScopeName), lockName: cfg.lockName}
	if err := in.metrics(c, cfg.mp.Meter(ScopeName)); err != nil {
		return fmt.Errorf("dlockotel: %w", err)
	}
	c.Observe(dlock.Observer{Start: in.start, End: in.end, Lost: in.lost, Waiting: in.waiting})
	return nil
}

// instrumentation is the Observer of one Instrument call.
type instrumentation struct {
	tracer   trace.Tracer
	lockName func(string) string // nil: no LockNameKey

	acquire, hold           metric.Float64Histogram
	lostLeases, extendFails metric.Int64Counter
	waiters                 metric.Int64UpDownCounter
	sets                    sync.Map // setKey → attribute.Set, without the lock name
}

// metrics creates the instruments, and the callback that reads c.Stats.
func (in *instrumentation) metrics(c *dlock.Client, m metric.Meter) error {
	var errs [8]error
	in.acquire, errs[0] = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("The time an acquisition took, its wait included."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...))
	in.hold, errs[1] = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a lease was held, until its release or its loss."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	in.lostLeases, errs[2] = m.Int64Counter("dlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before their release."))
	in.extendFails, errs[3] = m.Int64Counter("dlock.extend.failures", metric.WithUnit("{extension}"),
		metric.WithDescription("Extensions (the watchdog's and Extend's) that failed."))
	in.waiters, errs[4] = m.Int64UpDownCounter("dlock.waiters", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls waiting for a lock that is taken."))
	calls, err := m.Int64ObservableCounter("dlock.redis.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Script calls sent to Redis through the pipelining batcher."))
	errs[5] = err
	writes, err := m.Int64ObservableCounter("dlock.redis.writes", metric.WithUnit("{write}"),
		metric.WithDescription("Pipelines, or lone calls, that carried the script calls."))
	errs[6] = err
	held, err := m.Int64ObservableGauge("dlock.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now, from their acquisition to their release or loss."))
	errs[7] = err
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		o.ObserveInt64(calls, int64(s.Calls))
		o.ObserveInt64(writes, int64(s.Writes))
		for mode, n := range c.Held() {
			o.ObserveInt64(held, n, metric.WithAttributes(ModeKey.String(mode)))
		}
		return nil
	}, calls, writes, held)
	return err
}

// opKey is the context key of the span an instrumentation started; each
// instrumentation has its own, so that two of them on one Client, or other
// Observers, do not take each other's spans.
type opKey struct{ in *instrumentation }

// op is what Start leaves in the context for End and Waiting.
type op struct {
	span trace.Span
	mode string
}

func (in *instrumentation) start(ctx context.Context, e *dlock.Event) context.Context {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, ModeKey.String(e.Mode))
	switch e.Op {
	case dlock.OpAcquire:
		attrs = append(attrs, TryKey.Bool(e.Try))
	case dlock.OpExtend:
		attrs = append(attrs, AutoKey.Bool(e.Auto))
	}
	if in.lockName != nil {
		attrs = append(attrs, LockNameKey.String(in.lockName(e.Name)))
	}
	ctx, span := in.tracer.Start(ctx, "dlock."+string(e.Op),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, opKey{in}, op{span: span, mode: e.Mode})
}

func (in *instrumentation) end(ctx context.Context, e *dlock.Event) {
	outcome := outcomeOf(e)
	if o, ok := ctx.Value(opKey{in}).(op); ok {
		o.span.SetAttributes(OutcomeKey.String(outcome))
		if outcome == OutcomeError || outcome == OutcomeLost {
			o.span.RecordError(e.Err)
			o.span.SetStatus(codes.Error, e.Err.Error())
		}
		o.span.End()
	}
	switch {
	case e.Op == dlock.OpAcquire:
		in.acquire.Record(ctx, e.Took.Seconds(), metric.WithAttributeSet(in.attrs(e, outcome)))
	case e.Op == dlock.OpRelease && e.Err == nil && e.Held > 0: // not a repeated Release
		in.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributeSet(in.attrs(e, outcome)))
	case e.Op == dlock.OpExtend && e.Err != nil && outcome != OutcomeReleased:
		in.extendFails.Add(ctx, 1, metric.WithAttributeSet(in.attrs(e, outcome)))
	}
}

func (in *instrumentation) lost(ctx context.Context, e *dlock.Event) {
	in.lostLeases.Add(ctx, 1, metric.WithAttributeSet(in.attrs(e, "")))
	in.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributeSet(in.attrs(e, OutcomeLost)))
}

func (in *instrumentation) waiting(ctx context.Context, name string, delta int) {
	o, _ := ctx.Value(opKey{in}).(op)
	if o.span != nil {
		if delta > 0 {
			o.span.AddEvent("dlock.wait.begin")
		} else {
			o.span.AddEvent("dlock.wait.end")
		}
	}
	in.waiters.Add(ctx, int64(delta), metric.WithAttributeSet(in.attrs(&dlock.Event{Name: name, Mode: o.mode}, "")))
}

// attrs returns the metric attributes of e: its mode, the outcome unless
// empty, and the lock name if asked for. Without the name there are a few
// sets only, made once.
func (in *instrumentation) attrs(e *dlock.Event, outcome string) attribute.Set {
	if in.lockName == nil {
		key := setKey{e.Mode, outcome}
		if set, ok := in.sets.Load(key); ok {
			return set.(attribute.Set)
		}
		set := in.newSet(e, outcome)
		in.sets.Store(key, set)
		return set
	}
	return in.newSet(e, outcome)
}

type setKey struct{ mode, outcome string }

func (in *instrumentation) newSet(e *dlock.Event, outcome string) attribute.Set {
	kv := make([]attribute.KeyValue, 0, 3)
	if e.Mode != "" {
		kv = append(kv, ModeKey.String(e.Mode))
	}
	if outcome != "" {
		kv = append(kv, OutcomeKey.String(outcome))
	}
	if in.lockName != nil {
		kv = append(kv, LockNameKey.String(in.lockName(e.Name)))
	}
	return attribute.NewSet(kv...)
}

// outcomeOf names how the operation e ended (see the package doc).
func outcomeOf(e *dlock.Event) string {
	switch {
	case e.Err == nil && e.Op == dlock.OpAcquire:
		return OutcomeAcquired
	case e.Err == nil && e.Op == dlock.OpExtend:
		return OutcomeExtended
	case e.Err == nil:
		return OutcomeReleased
	case errors.Is(e.Err, dlock.ErrNotAcquired):
		return OutcomeNotAcquired
	case errors.Is(e.Err, dlock.ErrNotHeld):
		return OutcomeLost
	case errors.Is(e.Err, dlock.ErrReleased):
		return OutcomeReleased // a watchdog's extension that crossed a Release
	}
	return OutcomeError
}
