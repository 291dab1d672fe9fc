package dlock_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// proxiedNode returns a client (no retries, readTimeout: 0 for the
// default) to srv through a new proxy, and the proxy.
func proxiedNode(t *testing.T, srv *redistest.Server, readTimeout time.Duration) (*redis.Client, *redistest.Proxy) {
	t.Helper()
	p := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: readTimeout})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	return c, p
}

// evalsFailing returns a client (no retries) to srv whose script calls
// fail unsent while the flag returned is set.
func evalsFailing(t *testing.T, srv *redistest.Server) (*redis.Client, *atomic.Bool) {
	down := new(atomic.Bool)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	c.AddHook(failEvals{down})
	t.Cleanup(func() { c.Close() })
	return c, down
}

// takenWithin tries, for up to d (0: once), to take name with a new
// Client over nodes, and gives it back; it returns the last try's error.
func takenWithin(t *testing.T, nodes []redis.UniversalClient, name string, d time.Duration) error {
	c := newRedlock(t, nodes, 200*time.Millisecond, dlock.LeaseTTL(10*time.Second))
	var err error
	waitFor(d, func() bool {
		var l *dlock.Lock
		if l, err = c.TryAcquire(t.Context(), name); err == nil {
			l.Release(t.Context())
		}
		return err == nil
	})
	return err
}

// The first Lock's Release, after another Lock resumed its lease on
// nodes 0 and 1 (node 2 missed the resume), with node 1's reply coming
// after the node timeout, deletes the lease only on node 2: it reports
// the lease resumed elsewhere (ErrNotHeld), not released, and the resumed
// Lock still holds the lock on a majority.
func TestRedlockSupersededReleaseWithASlowNodeIsNotReleased(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	slow, p1 := proxiedNode(t, srvs[1], 0)
	missed, down := evalsFailing(t, srvs[2])
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	first := firstLease(t, newRedlock(t, []redis.UniversalClient{direct[0], slow, direct[2]}, 200*time.Millisecond, opts...), "superseded-slow")
	down.Store(true) // node 2 misses the resume
	r, err := newRedlock(t, []redis.UniversalClient{direct[0], direct[1], missed}, 200*time.Millisecond, opts...).TryAcquire(ctx, "superseded-slow", dlock.Resume(first.Token()))
	down.Store(false)
	if err != nil {
		t.Fatalf("resume on nodes 0 and 1 = %v", err)
	}

	p1.Delay(0, time.Second)
	err = first.Release(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded Lock's Release (node 0: resumed, node 1: late, node 2: missed the resume) = %v; want ErrNotHeld", err)
	}
	if err := r.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("the resumed Lock's Extend after the superseded Lock's Release = %v", err)
	}
	if takenWithin(t, direct, "superseded-slow", 0) == nil {
		t.Error("another Client took the lock the resumed Lock holds on a majority")
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("the resumed Lock's Release = %v", err)
	}
}

// A failed attempt whose requests to nodes 0 and 1 are held in the
// network past the Redis client's read timeout (node 2 granted it alone)
// leaves no lease once they land: the calls ended without a reply, so
// they may have left a grant, and the undo, which waits for each node's
// call, is sent to both.
func TestRedlockAttemptHeldPastTheReadTimeoutLeavesNoLease(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	n0, p0 := proxiedNode(t, srvs[0], 300*time.Millisecond)
	n1, p1 := proxiedNode(t, srvs[1], 300*time.Millisecond)
	c := newRedlock(t, []redis.UniversalClient{n0, n1, direct[2]}, 100*time.Millisecond, dlock.LeaseTTL(5*time.Second))
	if err := firstLease(t, c, "held-warm").Release(ctx); err != nil { // (the scripts loaded)
		t.Fatal(err)
	}
	p0.Delay(time.Second, 0)
	p1.Delay(time.Second, 0)
	_, err := c.TryAcquire(ctx, "held")
	p0.Delay(0, 0)
	p1.Delay(0, 0)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with nodes 0 and 1 held = %v, want ErrNotAcquired", err)
	}
	if !waitFor(5*time.Second, func() bool { return p0.HeldRequests() == 0 && p1.HeldRequests() == 0 }) {
		t.Fatal("the held requests never landed")
	}
	key := "dlock:{held}"
	if !waitFor(3*time.Second, func() bool { n, _ := keyOnNodes(ctx, toClients(direct), key); return n == 0 }) {
		_, vals := keyOnNodes(ctx, toClients(direct), key)
		t.Errorf("the lock on the nodes 3s after the held requests landed: %q; want none", vals)
	}
	if err := takenWithin(t, direct, "held", 0); err != nil {
		t.Errorf("another Client's TryAcquire after the failed attempt = %v", err)
	}
}
