package dlockotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/extra/dlockotel"
)

// An application instruments its go-redis client and its dlock Client once,
// after it has set the global providers (otel.SetTracerProvider and
// otel.SetMeterProvider, with the exporters of its choice): the Redis
// commands of each lock operation are then children of its span.
func ExampleInstrument() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := redisotel.InstrumentTracing(rdb); err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	if err := dlockotel.Instrument(c); err != nil {
		log.Fatal(err)
	}
}

// What a Do reports: a span for its acquisition and one for its release,
// and the time it waited and held the lock.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	if err := dlockotel.Instrument(c, dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp)); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	err = c.Do(ctx, "reports:nightly", func(ctx context.Context, l *dlock.Lock) error {
		return nil // the report
	})
	if err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.GetSpans() {
		attrs := attribute.NewSet(s.Attributes...)
		fmt.Println("span", s.Name, attrs.Encoded(attribute.DefaultEncoder()))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					fmt.Println("histogram", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), "count", dp.Count)
				}
			}
		}
	}
	// Output:
	// span dlock.acquire dlock.mode=fair,dlock.outcome=acquired,dlock.try=false
	// span dlock.release dlock.mode=fair,dlock.outcome=released
	// histogram dlock.acquire.duration dlock.mode=fair,dlock.outcome=acquired count 1
	// histogram dlock.hold.duration dlock.mode=fair,dlock.outcome=released count 1
}
