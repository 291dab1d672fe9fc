package dlockprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/extra/dlockprom"
)

// An application registers the Collector of its Client, and serves the
// registry as it serves its other metrics.
func ExampleNewCollector() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	col, err := dlockprom.NewCollector(c)
	if err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(col)
	http.Handle("/metrics", promhttp.Handler())
}

// What a Do leaves in the metrics: an acquisition and its wait, a release
// and the time the lock was held.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	col, err := dlockprom.NewCollector(c)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)

	err = c.Do(context.Background(), "reports:nightly", func(ctx context.Context, l *dlock.Lock) error {
		return nil // the report
	})
	if err != nil {
		log.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "dlock_redis_") {
			continue // the Redis calls and writes: how the work was sent
		}
		for _, m := range mf.GetMetric() {
			var labels string
			for _, lp := range m.GetLabel() {
				labels += fmt.Sprintf(" %s=%s", lp.GetName(), lp.GetValue())
			}
			switch {
			case m.GetHistogram() != nil:
				fmt.Printf("%s%s: %d observed\n", mf.GetName(), labels, m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				fmt.Printf("%s%s: %v\n", mf.GetName(), labels, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				fmt.Printf("%s%s: %v\n", mf.GetName(), labels, m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// dlock_acquire_duration_seconds mode=fair outcome=acquired: 1 observed
	// dlock_acquisitions_total outcome=acquired: 1
	// dlock_acquisitions_total outcome=not_acquired: 0
	// dlock_errors_total: 0
	// dlock_extend_failures_total: 0
	// dlock_held mode=fair: 0
	// dlock_hold_duration_seconds mode=fair outcome=released: 1 observed
	// dlock_locks_lost_total: 0
	// dlock_observer_panics_total: 0
	// dlock_releases_total: 1
	// dlock_waiters: 0
}
