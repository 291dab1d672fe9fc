package dlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// One release request over a quorum is heard once, not once per node: each
// node publishes its copy, and a holder that acts on each (dlock run sends a
// signal per request) would act up to N times for one ask. One node's copy
// comes late here (its replies are delayed), after the holder read the first.
func TestAReleaseRequestOverAQuorumIsHeardOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var direct, behind []redis.UniversalClient
	var proxy *redistest.Proxy
	for i := range 3 {
		s := redistest.Start(t, redistest.TCP())
		rdb := s.Client(t)
		direct = append(direct, rdb)
		if i == 2 {
			proxy = redistest.NewProxy(t, s.Addr())
			rdb = redis.NewClient(&redis.Options{Addr: proxy.Addr()})
			t.Cleanup(func() { rdb.Close() })
		}
		behind = append(behind, rdb)
	}
	holder := newRedlock(t, behind, 0, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true))
	asker := newRedlock(t, direct, 0)
	l, err := holder.TryAcquire(ctx, "asked-once")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, rdb := range direct {
		subscribed(t, rdb.(*redis.Client), l.Key()+":ch")
	}
	proxy.Delay(0, 300*time.Millisecond)
	if err := asker.RequestRelease(ctx, "asked-once", "deploy"); err != nil {
		t.Fatal(err)
	}
	if got := heard(l); got != "deploy" {
		t.Fatalf("the holder heard %q, want %q", got, "deploy")
	}
	select {
	case again := <-l.ReleaseRequests():
		t.Errorf("one request heard again (%q): once per node", again)
	case <-time.After(2 * time.Second):
	}
}
