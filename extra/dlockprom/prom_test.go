package dlockprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
	"github.com/dlockio/dlock/extra/dlockprom"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// setup returns a Client on a private redis-server and a pedantic registry
// with its Collector.
func setup(t *testing.T, col []dlockprom.Option, opts ...dlock.Option) (*dlock.Client, *prometheus.Registry) {
	t.Helper()
	leakcheck.Check(t)
	c := dlocktest.NewClient(t, opts...)
	t.Cleanup(func() { c.Close(context.Background()) })
	reg := prometheus.NewPedanticRegistry()
	collector, err := dlockprom.NewCollector(c, col...)
	if err != nil {
		t.Fatalf("NewCollector = %v", err)
	}
	if err := reg.Register(collector); err != nil {
		t.Fatalf("Register = %v", err)
	}
	return c, reg
}

// gather returns the registry's metric families by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather = %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// metric returns the metric of the family name with exactly the labels
// given (name, value, ...), or nil.
func metric(mfs map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	for _, m := range mfs[name].GetMetric() {
		if len(m.GetLabel()) != len(labels)/2 {
			continue
		}
		match := true
		for i, lp := range m.GetLabel() { // sorted by name
			match = match && lp.GetName() == labels[2*i] && lp.GetValue() == labels[2*i+1]
		}
		if match {
			return m
		}
	}
	return nil
}

// The Collector registers in a pedantic registry, passes the linter, is
// refused as a duplicate in the same registry, and two of them with
// different const labels register together.
func TestCollectorRegistersAndLints(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, nil)
	col, err := dlockprom.NewCollector(c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(t.Context(), "a") // a data point in each histogram
	if err != nil {
		t.Fatal(err)
	}
	l.Release(t.Context())
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint = %v, %v", problems, err)
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint = %v, %v", problems, err)
	}
	if n := testutil.CollectAndCount(col); n != 13 { // 10 Stats series, one held mode, a series in each histogram
		t.Errorf("CollectAndCount = %d, want 13", n)
	}
	if err := reg.Register(col); !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Errorf("Register of a second Collector = %v, want AlreadyRegisteredError", err)
	}

	two := prometheus.NewPedanticRegistry()
	for _, name := range []string{"orders", "reports"} {
		col, err := dlockprom.NewCollector(c, dlockprom.WithConstLabels(prometheus.Labels{"client": name}))
		if err != nil {
			t.Fatal(err)
		}
		if err := two.Register(col); err != nil {
			t.Errorf("Register of the Collector of %s = %v", name, err)
		}
	}
	if _, err := two.Gather(); err != nil {
		t.Errorf("Gather of two Collectors = %v", err)
	}
}

// The histograms count each acquisition and release by mode and outcome,
// in seconds, and the counters are the Client's Stats.
func TestCollectorCountsOperations(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, nil, dlock.WithUnfair(nil))
	ctx := t.Context()
	const n = 5
	for range n {
		l, err := c.Acquire(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "m"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l.Release(ctx) // a repeated Release records no hold
	}
	mfs := gather(t, reg)
	for _, h := range []struct {
		name, outcome string
	}{
		{"dlock_acquire_duration_seconds", "acquired"},
		{"dlock_acquire_duration_seconds", "not_acquired"},
		{"dlock_hold_duration_seconds", "released"},
	} {
		m := metric(mfs, h.name, "mode", "unfair", "outcome", h.outcome)
		if got := m.GetHistogram().GetSampleCount(); got != n {
			t.Errorf("%s{outcome=%q}: %d samples, want %d", h.name, h.outcome, got, n)
		}
		if s := m.GetHistogram().GetSampleSum(); s <= 0 || s > 10*n {
			t.Errorf("%s{outcome=%q}: sum %v, want seconds", h.name, h.outcome, s)
		}
	}
	if got := len(mfs["dlock_hold_duration_seconds"].GetMetric()); got != 1 {
		t.Errorf("dlock_hold_duration_seconds: %d series, want 1", got)
	}
	want := `
# HELP dlock_acquisitions_total Acquisitions that took the lock (outcome acquired) or ended without it (not_acquired).
# TYPE dlock_acquisitions_total counter
dlock_acquisitions_total{outcome="acquired"} 5
dlock_acquisitions_total{outcome="not_acquired"} 5
# HELP dlock_releases_total Releases of a lease that still held the lock.
# TYPE dlock_releases_total counter
dlock_releases_total 5
# HELP dlock_errors_total Acquisitions and releases that failed with an error from Redis.
# TYPE dlock_errors_total counter
dlock_errors_total 0
# HELP dlock_waiters Acquire calls waiting now for a lock that is taken.
# TYPE dlock_waiters gauge
dlock_waiters 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"dlock_acquisitions_total", "dlock_releases_total", "dlock_errors_total", "dlock_waiters"); err != nil {
		t.Error(err)
	}
	calls := metric(mfs, "dlock_redis_calls_total").GetCounter().GetValue()
	writes := metric(mfs, "dlock_redis_writes_total").GetCounter().GetValue()
	if calls < 3*n || writes < 1 || writes > calls {
		t.Errorf("dlock_redis_calls_total = %v, writes = %v, want calls >= %d and 1 <= writes <= calls", calls, writes, 3*n)
	}
}

// A lost lease counts in dlock_locks_lost_total, its hold time is recorded
// with the outcome lost, and the extension that found it gone is a failure.
func TestCollectorCountsALostLease(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, nil)
	l, err := c.Acquire(t.Context(), "lost")
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.Lose(t, c, l)
	want := `
# HELP dlock_locks_lost_total Leases lost before their release.
# TYPE dlock_locks_lost_total counter
dlock_locks_lost_total 1
# HELP dlock_extend_failures_total Extensions (the watchdog's and Extend's) that failed.
# TYPE dlock_extend_failures_total counter
dlock_extend_failures_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "dlock_locks_lost_total", "dlock_extend_failures_total"); err != nil {
		t.Error(err)
	}
	m := metric(gather(t, reg), "dlock_hold_duration_seconds", "mode", "fair", "outcome", "lost")
	if got := m.GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("dlock_hold_duration_seconds{outcome=lost}: %d samples, want 1", got)
	}
}

// dlock_waiters counts an Acquire while it waits.
func TestCollectorWaitersGauge(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, nil)
	release := dlocktest.Hold(t, c, "w")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "w")
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	waiters := func() float64 { return metric(gather(t, reg), "dlock_waiters").GetGauge().GetValue() }
	var got float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = waiters(); got != 0 {
			break
		}
	}
	if got != 1 {
		t.Errorf("dlock_waiters = %v while an Acquire waits, want 1", got)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := waiters(); got != 0 {
		t.Errorf("dlock_waiters = %v after the wait, want 0", got)
	}
}

// Without scripts there is no batch to count.
func TestCollectorWithoutScripts(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, nil, dlock.WithoutScripts())
	l, err := c.Acquire(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(t.Context())
	mfs := gather(t, reg)
	for _, name := range []string{"dlock_redis_calls_total", "dlock_redis_writes_total"} {
		if got := metric(mfs, name).GetCounter().GetValue(); got != 0 {
			t.Errorf("%s = %v without pipelining, want 0", name, got)
		}
	}
}

// WithNamespace prefixes every name, WithConstLabels labels every metric,
// and the buckets are those asked for.
func TestCollectorOptions(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, []dlockprom.Option{dlockprom.WithNamespace("app"),
		dlockprom.WithConstLabels(prometheus.Labels{"client": "orders"}),
		dlockprom.WithAcquireBuckets(0.5, 1), dlockprom.WithHoldBuckets(60)})
	l, err := c.Acquire(t.Context(), "o")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(t.Context())
	mfs := gather(t, reg)
	if len(mfs) != 12 {
		t.Errorf("%d metric families, want 12", len(mfs))
	}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "app_dlock_") {
			t.Errorf("metric %s: want the prefix app_dlock_", name)
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetName() != "client" || m.GetLabel()[0].GetValue() != "orders" {
				t.Errorf("metric %s: labels %v, want client=orders first", name, m.GetLabel())
			}
		}
	}
	for name, want := range map[string]int{"app_dlock_acquire_duration_seconds": 2, "app_dlock_hold_duration_seconds": 1} {
		if got := len(mfs[name].GetMetric()[0].GetHistogram().GetBucket()); got != want {
			t.Errorf("%s: %d buckets, want %d", name, got, want)
		}
	}
}

// NewCollector refuses what Prometheus would refuse, or panic on, later.
func TestNewCollectorRefusesBadInput(t *testing.T) {
	c, err := dlock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlockprom.NewCollector(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewCollector(nil) = %v, want ErrInvalid", err)
	}
	for name, opt := range map[string]dlockprom.Option{
		"a label mode":         dlockprom.WithConstLabels(prometheus.Labels{"mode": "x"}),
		"a label le":           dlockprom.WithConstLabels(prometheus.Labels{"le": "x"}),
		"an empty label name":  dlockprom.WithConstLabels(prometheus.Labels{"": "x"}),
		"an invalid namespace": dlockprom.WithNamespace("\xff"),
		"decreasing buckets":   dlockprom.WithAcquireBuckets(1, 0.5),
		"equal buckets":        dlockprom.WithHoldBuckets(1, 1),
		"no buckets":           dlockprom.WithHoldBuckets(),
		"a nil name template":  dlockprom.WithNameLabel(nil),
	} {
		if _, err := dlockprom.NewCollector(c, opt); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewCollector with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := dlockprom.NewCollector(c, dlockprom.WithConstLabels(prometheus.Labels{"name": "x"}),
		dlockprom.WithNameLabel(strings.ToLower)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewCollector with a const label name and WithNameLabel = %v, want ErrInvalid", err)
	}
}

// dlock_held{mode} counts the leases held now: up at an acquisition, down
// at the release, per mode.
func TestCollectorHeldGauge(t *testing.T) {
	t.Parallel()
	c, reg := setup(t, nil, dlock.WithUnfair(nil))
	ctx := t.Context()
	held := func(mode string) float64 {
		return metric(gather(t, reg), "dlock_held", "mode", mode).GetGauge().GetValue()
	}
	a, err := c.Acquire(ctx, "held-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "held-b")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore("held-s", 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u, s := held("unfair"), held("semaphore"); u != 2 || s != 1 {
		t.Errorf("dlock_held = unfair %v, semaphore %v; want 2 and 1", u, s)
	}
	for _, l := range []*dlock.Lock{a, b, p} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if u, s := held("unfair"), held("semaphore"); u != 0 || s != 0 {
		t.Errorf("dlock_held after the releases = unfair %v, semaphore %v; want 0", u, s)
	}
}

// WithNameLabel labels the histograms with the template's value of the lock
// name: two names of one family make one series.
func TestCollectorNameLabelTemplate(t *testing.T) {
	t.Parallel()
	family := func(name string) string {
		if prefix, _, ok := strings.Cut(name, ":"); ok {
			return prefix + ":*"
		}
		return name
	}
	c, reg := setup(t, []dlockprom.Option{dlockprom.WithNameLabel(family)}, dlock.WithUnfair(nil))
	ctx := t.Context()
	for _, name := range []string{"order:8c1f", "order:93ab", "ledger"} {
		l, err := c.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mfs := gather(t, reg)
	for name, n := range map[string]uint64{"order:*": 2, "ledger": 1} {
		m := metric(mfs, "dlock_hold_duration_seconds", "mode", "unfair", "name", name, "outcome", "released")
		if got := m.GetHistogram().GetSampleCount(); got != n {
			t.Errorf("dlock_hold_duration_seconds{name=%q}: %d samples, want %d", name, got, n)
		}
	}
	if got := len(mfs["dlock_acquire_duration_seconds"].GetMetric()); got != 2 {
		t.Errorf("dlock_acquire_duration_seconds: %d series, want 2 (one per family)", got)
	}
}
