package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
	"github.com/dlockio/dlock/extra/dlockotel"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/testopt"
)

// harness is an instrumented Client on a private redis-server whose go-redis
// client has redisotel's tracing hook, with the SDKs' in-memory exporter
// and manual reader.
type harness struct {
	c      *dlock.Client
	rdb    *redis.Client
	tp     *sdktrace.TracerProvider
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
}

func setup(t *testing.T, instr []dlockotel.Option, opts ...dlock.Option) *harness {
	t.Helper()
	leakcheck.Check(t)
	h := &harness{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		h.tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	h.rdb = dlocktest.Start(t).Client()
	if err := redisotel.InstrumentTracing(h.rdb, redisotel.WithTracerProvider(h.tp)); err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(h.rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	instr = append([]dlockotel.Option{dlockotel.WithTracerProvider(h.tp), dlockotel.WithMeterProvider(mp)}, instr...)
	if err := dlockotel.Instrument(c, instr...); err != nil {
		t.Fatalf("Instrument = %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return h
}

// dlockSpans returns the spans this package made, in the order they ended.
func (h *harness) dlockSpans() []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range h.spans.GetSpans() {
		if s.InstrumentationScope.Name == dlockotel.ScopeName {
			out = append(out, s)
		}
	}
	return out
}

func attr(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func outcome(s tracetest.SpanStub) string {
	v, _ := attr(s.Attributes, dlockotel.OutcomeKey)
	return v.AsString()
}

// Each operation is a span of kind internal, child of the caller's span and
// parent of go-redis's spans of its Redis commands, with and without
// pipelining.
func TestSpansAreParentsOfRedisSpans(t *testing.T) {
	t.Parallel()
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelining=%v", pipelining), func(t *testing.T) {
			h := setup(t, nil, testopt.Pipelining(pipelining)) // the API always pipelines; both paths must nest spans alike
			ctx, caller := h.tp.Tracer("test").Start(t.Context(), "caller")
			l, err := h.c.Acquire(ctx, "traced")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := h.c.TryAcquire(ctx, "traced"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a held lock = %v, want ErrNotAcquired", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			caller.End()

			byID := map[trace.SpanID]tracetest.SpanStub{}
			for _, s := range h.spans.GetSpans() {
				byID[s.SpanContext.SpanID()] = s
			}
			var got []string
			children := map[trace.SpanID]int{}
			for _, s := range h.dlockSpans() {
				got = append(got, s.Name+" "+outcome(s))
				if s.SpanKind != trace.SpanKindInternal {
					t.Errorf("%s: kind %v, want internal", s.Name, s.SpanKind)
				}
				if s.Parent.SpanID() != caller.SpanContext().SpanID() {
					t.Errorf("%s: parent %v, want the caller's span", s.Name, s.Parent.SpanID())
				}
				children[s.SpanContext.SpanID()] = 0
			}
			want := []string{"dlock.acquire acquired", "dlock.extend extended", "dlock.acquire not_acquired", "dlock.release released"}
			if !slices.Equal(got, want) {
				t.Errorf("dlock spans = %q, want %q", got, want)
			}
			// Every go-redis command span descends from a dlock span. (go-redis
			// dials its connections with a context of its own.)
			for _, s := range h.spans.GetSpans() {
				if s.InstrumentationScope.Name == dlockotel.ScopeName || s.Name == "caller" || s.Name == "redis.dial" {
					continue
				}
				p, ok := byID[s.Parent.SpanID()]
				for ok && p.InstrumentationScope.Name != dlockotel.ScopeName {
					p, ok = byID[p.Parent.SpanID()]
				}
				if !ok {
					t.Errorf("go-redis span %q has no dlock span among its ancestors", s.Name)
					continue
				}
				if byID[s.Parent.SpanID()].InstrumentationScope.Name == dlockotel.ScopeName {
					children[p.SpanContext.SpanID()]++
				}
			}
			// One operation at a time: each pipeline carries one call, and
			// each operation has its own Redis span.
			for _, s := range h.dlockSpans() {
				if children[s.SpanContext.SpanID()] == 0 {
					t.Errorf("%s (%s) has no go-redis child span", s.Name, outcome(s))
				}
			}
		})
	}
}

// The watchdog's extensions are root spans marked dlock.auto, with their
// Redis commands as children.
func TestWatchdogExtensionsAreRootSpans(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, dlock.LeaseTTL(300*time.Millisecond))
	l, err := h.c.Acquire(t.Context(), "kept")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	var auto tracetest.SpanStub
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && auto.Name == ""; time.Sleep(20 * time.Millisecond) {
		for _, s := range h.dlockSpans() {
			if v, _ := attr(s.Attributes, dlockotel.AutoKey); s.Name == "dlock.extend" && v.AsBool() {
				auto = s
			}
		}
	}
	if auto.Name == "" {
		t.Fatal("no span of a watchdog's extension within 5s (TTL 300ms)")
	}
	if auto.Parent.IsValid() || outcome(auto) != "extended" {
		t.Errorf("watchdog's extension: parent %v, outcome %q; want a root span, extended", auto.Parent.SpanID(), outcome(auto))
	}
	children := 0
	for _, s := range h.spans.GetSpans() {
		if s.Parent.SpanID() == auto.SpanContext.SpanID() {
			children++
		}
	}
	if children == 0 {
		t.Error("the watchdog's extension has no go-redis child span")
	}
}

// A lock found taken is an outcome, not an error; an error from Redis, a
// bad name and a lost lease set the status Error and record the error.
func TestSpanOutcomesAndStatus(t *testing.T) {
	t.Parallel()
	h := setup(t, nil)
	ctx := t.Context()
	release := dlocktest.Hold(t, h.c, "taken")
	if _, err := h.c.TryAcquire(ctx, "taken"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock = %v", err)
	}
	release()
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	release = dlocktest.Hold(t, h.c, "taken")
	if _, err := h.c.Acquire(wait, "taken"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held lock until a deadline = %v", err)
	}
	cancel()
	release()
	if _, err := h.c.TryAcquire(ctx, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("TryAcquire(\"\") = %v", err)
	}
	l, err := h.c.TryAcquire(ctx, "foreign")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	h.rdb.HSet(ctx, l.Key(), "f", "v") // another program's value
	if _, err := h.c.TryAcquire(ctx, "foreign"); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("TryAcquire of a foreign key = %v, want ErrWrongType", err)
	}
	l, err = h.c.Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.Lose(t, h.c, l)
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lease = %v", err)
	}

	type row struct {
		span, outcome string
		status        codes.Code
	}
	var got []row
	for _, s := range h.dlockSpans() {
		got = append(got, row{s.Name, outcome(s), s.Status.Code})
		errored := slices.ContainsFunc(s.Events, func(e sdktrace.Event) bool { return e.Name == "exception" })
		if errored != (s.Status.Code == codes.Error) {
			t.Errorf("%s %s: status %v, error recorded %v", s.Name, outcome(s), s.Status.Code, errored)
		}
	}
	want := []row{
		{"dlock.acquire", "acquired", codes.Unset}, // Hold
		{"dlock.acquire", "not_acquired", codes.Unset},
		{"dlock.release", "released", codes.Unset},
		{"dlock.acquire", "acquired", codes.Unset}, // Hold
		{"dlock.acquire", "not_acquired", codes.Unset},
		{"dlock.release", "released", codes.Unset},
		{"dlock.acquire", "error", codes.Error}, // ""
		{"dlock.acquire", "acquired", codes.Unset},
		{"dlock.release", "released", codes.Unset},
		{"dlock.acquire", "error", codes.Error}, // foreign
		{"dlock.acquire", "acquired", codes.Unset},
		{"dlock.extend", "lost", codes.Error}, // Lose finds it gone
		{"dlock.release", "lost", codes.Error},
	}
	if !slices.Equal(got, want) {
		t.Errorf("spans:\n got %v\nwant %v", got, want)
	}
}

// The lock name is in no span and no metric unless asked for, as it is or
// through a template.
func TestLockNameAttribute(t *testing.T) {
	t.Parallel()
	family := func(name string) string { p, _, _ := strings.Cut(name, ":"); return p + ":*" }
	for _, c := range []struct {
		name string
		opt  dlockotel.Option
		want string // "": no attribute
	}{
		{"off", dlockotel.WithLockNameAttribute(false), ""},
		{"on", dlockotel.WithLockNameAttribute(true), "orders:1234"},
		{"template", dlockotel.WithLockNameTemplate(family), "orders:*"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := setup(t, []dlockotel.Option{c.opt})
			release := dlocktest.Hold(t, h.c, "orders:1234")
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			h.c.Acquire(ctx, "orders:1234") // waits: dlock.waiters
			cancel()
			release()
			spans := h.dlockSpans()
			if len(spans) != 3 {
				t.Fatalf("%d dlock spans, want 3", len(spans))
			}
			on := c.want != ""
			for _, s := range spans {
				v, ok := attr(s.Attributes, dlockotel.LockNameKey)
				if ok != on || v.AsString() != c.want {
					t.Errorf("span %s: lock name attribute %q (%v), want %q", s.Name, v.AsString(), ok, c.want)
				}
			}
			sets := 0
			for _, m := range h.collect(t) {
				if m.Name == "dlock.redis.calls" || m.Name == "dlock.redis.writes" || m.Name == "dlock.held" {
					continue // from Client.Stats and Client.Held: no name
				}
				forEachSet(m, func(set attribute.Set) {
					sets++
					v, ok := set.Value(dlockotel.LockNameKey)
					if ok != on || v.AsString() != c.want {
						t.Errorf("metric %s %v: lock name attribute %q (%v), want %q", m.Name, set.Encoded(attribute.DefaultEncoder()), v.AsString(), ok, c.want)
					}
				})
			}
			if sets < 3 { // acquire.duration (2 outcomes), hold.duration, waiters
				t.Errorf("%d metric data points with attributes, want at least 3", sets)
			}
		})
	}
}

// The histograms count every acquisition and release, in seconds, by mode
// and outcome; the Stats counters are there too.
func TestMetricsCountOperations(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, dlock.WithUnfair(nil))
	ctx := t.Context()
	const n = 5
	for range n {
		l, err := h.c.Acquire(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.c.TryAcquire(ctx, "m"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l.Release(ctx) // a repeated Release records no hold
	}
	ms := h.collect(t)
	unfair := func(outcome string) attribute.Set {
		return attribute.NewSet(dlockotel.ModeKey.String("unfair"), dlockotel.OutcomeKey.String(outcome))
	}
	for _, c := range []struct {
		metric  string
		set     attribute.Set
		want    uint64
		wantAll uint64
	}{
		{"dlock.acquire.duration", unfair("acquired"), n, 2 * n},
		{"dlock.acquire.duration", unfair("not_acquired"), n, 2 * n},
		{"dlock.hold.duration", unfair("released"), n, n},
	} {
		m := find(t, ms, c.metric)
		if m.Unit != "s" {
			t.Errorf("%s: unit %q, want s", c.metric, m.Unit)
		}
		hist, ok := m.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("%s: %T, want a float64 histogram", c.metric, m.Data)
		}
		var got, all uint64
		for _, dp := range hist.DataPoints {
			all += dp.Count
			if dp.Attributes.Equals(&c.set) {
				got = dp.Count
				if max, _ := dp.Max.Value(); max > 10 {
					t.Errorf("%s %v: max %v, want seconds", c.metric, c.set.Encoded(attribute.DefaultEncoder()), dp.Max)
				}
			}
		}
		if got != c.want || all != c.wantAll {
			t.Errorf("%s: count %d for %v (%d in all), want %d (%d)", c.metric, got,
				c.set.Encoded(attribute.DefaultEncoder()), all, c.want, c.wantAll)
		}
	}
	if calls, writes := sum(t, ms, "dlock.redis.calls", nil), sum(t, ms, "dlock.redis.writes", nil); calls < 3*n || writes < 1 || writes > calls {
		t.Errorf("dlock.redis.calls = %d, writes = %d, want calls >= %d and 1 <= writes <= calls", calls, writes, 3*n)
	}
}

// A lost lease counts in dlock.lease.lost, its hold time is recorded with
// the outcome lost, and the extension that found it gone is a failure.
func TestMetricsOfALostLease(t *testing.T) {
	t.Parallel()
	h := setup(t, nil)
	l, err := h.c.Acquire(t.Context(), "lost")
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.Lose(t, h.c, l)
	ms := h.collect(t)
	fair := attribute.NewSet(dlockotel.ModeKey.String("fair"))
	if got := sum(t, ms, "dlock.lease.lost", &fair); got != 1 {
		t.Errorf("dlock.lease.lost = %d, want 1", got)
	}
	lostExt := attribute.NewSet(dlockotel.ModeKey.String("fair"), dlockotel.OutcomeKey.String("lost"))
	if got := sum(t, ms, "dlock.extend.failures", &lostExt); got != 1 {
		t.Errorf("dlock.extend.failures{outcome=lost} = %d, want 1", got)
	}
	hist := find(t, ms, "dlock.hold.duration").Data.(metricdata.Histogram[float64])
	if len(hist.DataPoints) != 1 || !hist.DataPoints[0].Attributes.Equals(&lostExt) || hist.DataPoints[0].Count != 1 {
		t.Errorf("dlock.hold.duration = %+v, want one hold with outcome lost", hist.DataPoints)
	}
	if s := h.c.Stats(); s.Lost != 1 || s.ExtendFailed != 1 {
		t.Errorf("Stats = %+v, want 1 lost and 1 failed extension, as the metrics say", s)
	}
}

// dlock.waiters counts an Acquire while it waits, and its span marks the wait.
func TestWaiters(t *testing.T) {
	t.Parallel()
	h := setup(t, nil)
	release := dlocktest.Hold(t, h.c, "w")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := h.c.Acquire(ctx, "w")
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	fair := attribute.NewSet(dlockotel.ModeKey.String("fair"))
	var waiting int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if waiting = sum(t, h.collect(t), "dlock.waiters", &fair); waiting != 0 {
			break
		}
	}
	if waiting != 1 {
		t.Errorf("dlock.waiters = %d while an Acquire waits, want 1", waiting)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := sum(t, h.collect(t), "dlock.waiters", &fair); got != 0 {
		t.Errorf("dlock.waiters = %d after the wait, want 0", got)
	}
	var events []string
	for _, s := range h.dlockSpans() {
		if s.Name == "dlock.acquire" && len(s.Events) > 0 {
			for _, e := range s.Events {
				events = append(events, e.Name)
			}
		}
	}
	if want := []string{"dlock.wait.begin", "dlock.wait.end"}; !slices.Equal(events, want) {
		t.Errorf("events of the waiting acquisition = %q, want %q", events, want)
	}
}

// Without options, Instrument reports to the global providers, even those
// set after it was called.
func TestInstrumentWithGlobalProviders(t *testing.T) {
	// Serial: it sets the global OpenTelemetry providers.
	leakcheck.Check(t)
	c := dlocktest.NewClient(t)
	if err := dlockotel.Instrument(c); err != nil {
		t.Fatal(err)
	}
	spans, reader := tracetest.NewInMemoryExporter(), sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	t.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	l, err := c.Acquire(t.Context(), "g")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(t.Context())
	if got := len(spans.GetSpans()); got != 2 {
		t.Errorf("%d spans through the global TracerProvider, want 2", got)
	}
	h := &harness{reader: reader}
	hist := find(t, h.collect(t), "dlock.acquire.duration").Data.(metricdata.Histogram[float64])
	if len(hist.DataPoints) != 1 || hist.DataPoints[0].Count != 1 {
		t.Errorf("dlock.acquire.duration through the global MeterProvider = %+v, want one acquisition", hist.DataPoints)
	}
}

// Instrument refuses a nil Client or provider.
func TestInstrumentRefusesNil(t *testing.T) {
	c, err := dlock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"nil client":          dlockotel.Instrument(nil),
		"nil tracer provider": dlockotel.Instrument(c, dlockotel.WithTracerProvider(nil)),
		"nil meter provider":  dlockotel.Instrument(c, dlockotel.WithMeterProvider(nil)),
		"nil name template":   dlockotel.Instrument(c, dlockotel.WithLockNameTemplate(nil)),
	} {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Instrument with a %s = %v, want ErrInvalid", name, err)
		}
	}
}

// dlock.held is the number of leases held now, by mode: up at an
// acquisition, down at the release.
func TestHeldGauge(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, dlock.WithUnfair(nil))
	ctx := t.Context()
	unfair := attribute.NewSet(dlockotel.ModeKey.String("unfair"))
	held := func() int64 {
		g, ok := find(t, h.collect(t), "dlock.held").Data.(metricdata.Gauge[int64])
		if !ok {
			t.Fatal("dlock.held is not an int64 gauge")
		}
		for _, dp := range g.DataPoints {
			if dp.Attributes.Equals(&unfair) {
				return dp.Value
			}
		}
		return -1
	}
	a, err := h.c.Acquire(ctx, "held-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.c.Acquire(ctx, "held-b")
	if err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 2 {
		t.Errorf("dlock.held{mode=unfair} = %d with two leases, want 2", n)
	}
	a.Release(ctx)
	b.Release(ctx)
	if n := held(); n != 0 {
		t.Errorf("dlock.held{mode=unfair} = %d after the releases, want 0", n)
	}
}

func (h *harness) collect(t *testing.T) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == dlockotel.ScopeName {
			return sm.Metrics
		}
	}
	return nil
}

func find(t *testing.T, ms []metricdata.Metrics, name string) metricdata.Metrics {
	t.Helper()
	for _, m := range ms {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no metric %s", name)
	return metricdata.Metrics{}
}

// sum returns the value of the int64 sum name for the attributes set (all
// of them if set is nil); 0 if it has no data point yet.
func sum(t *testing.T, ms []metricdata.Metrics, name string, set *attribute.Set) int64 {
	t.Helper()
	for _, m := range ms {
		if m.Name != name {
			continue
		}
		s, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s: %T, want an int64 sum", name, m.Data)
		}
		var v int64
		for _, dp := range s.DataPoints {
			if set == nil || dp.Attributes.Equals(set) {
				v += dp.Value
			}
		}
		return v
	}
	return 0
}

// forEachSet calls f with the attributes of each data point of m.
func forEachSet(m metricdata.Metrics, f func(attribute.Set)) {
	switch d := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			f(dp.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			f(dp.Attributes)
		}
	}
}
