package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A manual Extend that meets a Redis outage shorter than the lease's
// validity retries, as the watchdog does, and succeeds once Redis answers;
// one whose ctx ends first returns the error, the earlier validity
// standing.
func TestExtendRetriesThroughAnOutage(t *testing.T) {
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	ctx := t.Context()
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(3*time.Second))
	l, err := c.TryAcquire(ctx, "extend-retry")
	if err != nil {
		t.Fatal(err)
	}
	before := l.ValidUntil()
	p.Stall()
	heal := time.AfterFunc(500*time.Millisecond, p.Cut) // the outage ends
	defer heal.Stop()
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := l.Extend(ectx, 3*time.Second); err != nil {
		t.Fatalf("Extend through a 500ms outage = %v, want it retried until Redis answered", err)
	}
	if !l.ValidUntil().After(before) {
		t.Error("the validity did not move on")
	}

	// The caller's ctx bounds the retries.
	p.Stall()
	defer p.Cut()
	before = l.ValidUntil()
	ectx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Extend(ectx, 3*time.Second); err == nil {
		t.Fatal("Extend succeeded with Redis stalled")
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Extend took %v past its 300ms ctx", took)
	}
	if !l.ValidUntil().Equal(before) || l.Err() != nil {
		t.Errorf("after a failed Extend: validity %v (was %v), Err %v", l.ValidUntil(), before, l.Err())
	}
}
