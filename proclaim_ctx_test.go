package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A Proclaim under a stalled server ends with its context, and once the
// stall ends a later Proclaim's value is the one shown, whatever the
// stalled copy does when it lands.
func TestProclaimEndsWithItsContextAndItsLateCopyChangesNothing(t *testing.T) {
	t.Parallel()
	s, direct := setupTCP(t)
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, err := c.Election("pctx")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	p.Delay(1500*time.Millisecond, 0)
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	began := time.Now()
	err = ld.Proclaim(sctx, "stale")
	cancel()
	if took := time.Since(began); took > time.Second {
		t.Errorf("Proclaim took %v past its 200ms context", took)
	}
	if err == nil {
		t.Fatal("a Proclaim whose context ended before it was sent succeeded")
	}
	p.Delay(0, 0)
	if err := ld.Proclaim(ctx, "fresh"); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Proclaim(fresh): %v", err)
	}
	c2 := newClient(t, direct)
	e2, _ := c2.Election("pctx")
	// Through the stalled copy's landing (1.5s after it was sent), the
	// leader shows the later value at every read.
	for end := began.Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		got, err := e2.Leader(ctx)
		if err != nil || got.Value != "fresh" {
			t.Fatalf("Leader while the late copy lands = %+v, %v; want fresh", got, err)
		}
	}
	ld.Resign(ctx)
}
